"""The alignment heads' cross-attention scores of every row a decode computes, kept by position.

Word timing (:func:`burble.asr.whisper.timing.align`) reads a few cross-attention heads' scores
for the rows of a window's final text. A greedy or speculative decode has computed each of those
rows already, in the pass that fed its token; recording them there saves the separate timing pass
(a full decoder pass over the text, ~16 of the ~120 ms of a streaming decode of tiny.en on two
cores). The record is what :class:`~burble.asr.whisper.model.WhisperTextModel` keeps when asked
(``text_model.record = CrossAttentionRecord(...)``).

A speculative pass also computes rows after draft tokens that verification rejects. So a row is
used only if the pass that computed it fed the final tokens from its first position through that
row: the positions before a pass are accepted tokens in the cache, which never change, so such a
row is exactly the row of the final text. A row no recorded pass computed that way (the last token
of a decode cut at its token limit, a static-shape pass) makes
:meth:`CrossAttentionRecord.scores` return ``None``, and the caller runs the timing pass. A batch
of different windows keeps one record per row (``WhisperTextModel.row_records``), each row's
passes from its own position.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch


def heads_by_layer(pairs: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    """``[(layer, head), ...]`` (a model's ``alignment_heads``) as ``{layer: [heads]}``."""
    capture: dict[int, list[int]] = {}
    for layer, head in pairs:
        capture.setdefault(layer, []).append(head)
    return capture


class CrossAttentionRecord:
    """Scores of the capture heads for the rows of every recorded decoder pass.

    Args:
      heads: ``{layer: [heads]}`` to capture (a model's alignment heads, by layer).
    """

    def __init__(self, heads: dict[int, list[int]]) -> None:
        self.heads = heads
        self._passes: list[tuple[int, list[int], torch.Tensor]] = []

    def add(self, start: int, tokens: torch.Tensor, weights: list[torch.Tensor]) -> None:
        """One pass fed ``tokens`` ``(1, T)`` at positions ``start ..``; ``weights`` are its
        captured scores per layer, each ``(1, heads, T, frames)``."""
        if tokens.shape[0] != 1 or not weights:
            return  # a batch's rows are not one text: nothing to record
        self._passes.append((start, tokens[0].tolist(), torch.cat([w[0] for w in weights], dim=0)))

    def scores(self, sequence: Sequence[int], first: int, end: int) -> Optional[torch.Tensor]:
        """The scores of rows ``[first, end)`` of ``sequence`` (the final tokens from position 0),
        ``(heads, end - first, frames)`` pre-softmax, or ``None`` if any row is not trustworthy."""
        if first < 0 or end > len(sequence) or first >= end:
            return None
        rows: list[Optional[torch.Tensor]] = [None] * (end - first)
        for start, tokens, weights in self._passes:
            # The pass's rows are right up to its first token that is not the final one.
            matching = next((i for i, token in enumerate(tokens) if start + i >= len(sequence) or sequence[start + i] != token), len(tokens))
            for offset in range(max(0, first - start), min(matching, end - start)):
                rows[start + offset - first] = weights[:, offset]
        if any(row is None for row in rows):
            return None
        return torch.stack(rows, dim=1)  # type: ignore[arg-type]
