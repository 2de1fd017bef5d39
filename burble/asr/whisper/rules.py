"""Whisper-specific logits processors: the timestamp grammar.

These plug into the shared logits-processor chain (:mod:`burble.decoding.logits`). The rules follow
the reference implementations (openai/whisper and CTranslate2), so burble's greedy output is the
same token sequence as faster-whisper's:

1. ``<|notimestamps|>`` is never generated;
2. the first generated token is a timestamp, at most ``max_initial_timestamp`` seconds;
3. timestamps come in pairs (start, end), except a single one directly before end-of-text;
4. timestamps never decrease;
5. if the total probability of all timestamps beats every single text token, emit a timestamp.
"""

from __future__ import annotations

import torch

from burble.asr.tokenizer import WhisperTokenizer


class TimestampRules:
    """Enforces Whisper's timestamp grammar.

    Args:
      tokenizer: gives eot / no-timestamps / first timestamp ids.
      sample_begin: index of the first generated token in the token rows.
      max_initial_timestamp_index: the first timestamp may be at most this many 0.02 s steps.
    """

    def __init__(self, tokenizer: WhisperTokenizer, sample_begin: int, max_initial_timestamp_index: int | None = 50) -> None:
        self.eot = tokenizer.eot
        self.no_timestamps = tokenizer.no_timestamps
        self.timestamp_begin = tokenizer.timestamp_begin
        self.sample_begin = sample_begin
        self.max_initial_timestamp_index = max_initial_timestamp_index

    def apply(self, logits: torch.Tensor, tokens: torch.Tensor) -> None:
        tb = self.timestamp_begin
        logits[:, self.no_timestamps] = float("-inf")
        generated = tokens[:, self.sample_begin :].tolist()
        compared: list[int] = []  # rows that rule 5 applies to
        for row, seq in enumerate(generated):
            if not seq:
                logits[row, :tb] = float("-inf")
                if self.max_initial_timestamp_index is not None:
                    logits[row, tb + self.max_initial_timestamp_index + 1 :] = float("-inf")
                continue
            check_probability = True
            last = seq[-1]
            if last >= tb:
                penultimate = seq[-2] if len(seq) >= 2 else last
                if penultimate >= tb:  # a closed pair: text must follow
                    logits[row, tb:] = float("-inf")
                    check_probability = False
                else:  # an opened pair: the end timestamp (or end-of-text) must follow
                    logits[row, : self.eot] = float("-inf")
            for token in reversed(seq):
                if token >= tb:
                    logits[row, tb:token] = float("-inf")
                    break
            if check_probability:
                compared.append(row)
        if compared:
            self._prefer_timestamps(logits, compared)

    def _prefer_timestamps(self, logits: torch.Tensor, rows: list[int]) -> None:
        """Rule 5 on ``rows``: forbid text where all timestamps together outweigh every text token.

        The reference compares ``logsumexp(logprobs[tb:])`` with ``max(logprobs[:tb])`` after a
        full-vocabulary ``log_softmax``. Both sides carry the same ``- logsumexp(logits)``, which
        cancels, so the raw logits are compared instead: a reduction over each slice, no
        normalised copy of the vocabulary, and all rows at once with no host round trip.
        """
        tb = self.timestamp_begin
        scores = logits.float()
        prefer = torch.logsumexp(scores[:, tb:], dim=-1) > scores[:, :tb].amax(dim=-1)
        if len(rows) < logits.shape[0]:
            applies = torch.zeros(logits.shape[0], dtype=torch.bool)
            applies[rows] = True
            prefer &= applies.to(prefer.device)
        logits[:, :tb].masked_fill_(prefer[:, None], float("-inf"))
