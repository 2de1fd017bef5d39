"""Which speculative drafter decodes a Whisper window (the ``--speculative`` option).

* ``ngram``: prompt lookup over the prompt (previous text) and the tokens decoded so far;
* ``self``: the first ``draft_layers`` decoder layers of the same model draft (early exit);
* ``mtp``: the model's trained multi-token-prediction heads (:mod:`burble.decoding.mtp`), shipped
  for the models ``recipes/mtp_heads`` trained;
* ``auto``: what measured fastest for the situation (BENCHMARKS.md, "Speculative decoding"):

  - re-decoding audio that has a previous hypothesis (streaming re-decodes its window every
    chunk): that hypothesis is the draft (:class:`PreviousHypothesisDrafter`), 2.1x fewer decoder
    passes and 1.6x faster decoding; where the model has draft heads they draft past the
    hypothesis's end (:class:`FirstDraft`);
  - offline (a window decoded once): the model's draft heads if burble ships some, else plain
    decoding (prompt lookup is accepted ~8% of the time and made the decoder 0.84x as fast; the
    untrained early-exit self-draft ~4%, 0.29x).

All of them are lossless: greedy verification keeps exactly the tokens plain decoding would give.
"""

from __future__ import annotations

from typing import Optional, Sequence

from burble.asr.options import TranscribeOptions
from burble.asr.whisper.model import WhisperTextModel
from burble.decoding.drafters import FirstDraft, ModelDrafter, PreviousHypothesisDrafter, PromptLookupDrafter
from burble.decoding.mtp import MTPDrafter, MTPHeads, TreeShape
from burble.decoding.speculative import Drafter


# ``--draft-tree``: a fixed Medusa-style tree of 10 nodes (rank paths: the heads' 1st/2nd/3rd
# choices) and the probability-ranked dynamic tree.
DRAFT_TREES: dict[str, Optional[TreeShape]] = {
    "chain": None,
    "static": TreeShape(paths=((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0), (0, 0, 0, 0, 0))),
    "dynamic": TreeShape(top_k=3, beam=3, max_nodes=12),
}


def drafts_without_hypothesis(options: TranscribeOptions) -> bool:
    """Whether windows with no previous hypothesis must be decoded one by one (a drafter was asked
    for). ``auto`` keeps batched windows batched: rows of one batch share every pass, which a
    batch-1 speculative decode cannot; a window decoded alone still drafts with the heads."""
    return options.speculative in ("ngram", "self", "mtp")


def window_drafter(
    options: TranscribeOptions,
    text_model: WhisperTextModel,
    prompt: list[int],
    *,
    eos_token_id: int,
    previous_hypothesis: Sequence[int] = (),
    draft_heads: Optional[MTPHeads] = None,
) -> Optional[Drafter]:
    """The drafter for one window's greedy decode, or ``None`` for plain decoding.

    Args:
      previous_hypothesis: the tokens an earlier decode of the same audio gave (streaming).
      draft_heads: the model's trained MTP heads, if burble ships some for it.
    """
    if options.speculative == "off":
        return None
    if options.speculative == "mtp" and draft_heads is None:
        raise ValueError("--speculative mtp: no trained draft heads ship for this model (see recipes/mtp_heads)")
    mtp = None
    if draft_heads is not None:
        mtp = MTPDrafter(text_model, draft_heads, eos_token_id=eos_token_id, tree=DRAFT_TREES[options.draft_tree])
    if options.speculative in ("auto", "mtp"):
        # The previous hypothesis first (it is right about most of the re-decoded audio); the heads
        # draft where it has nothing to offer (past its end, or after a divergence).
        drafters = [PreviousHypothesisDrafter(previous_hypothesis)] if previous_hypothesis else []
        drafters += [mtp] if mtp is not None else []
        return FirstDraft(drafters) if len(drafters) > 1 else (drafters[0] if drafters else None)
    if options.speculative == "ngram":
        return PromptLookupDrafter(hint_tokens=prompt)
    layers = max(1, min(options.draft_layers, text_model.num_layers - 1))
    return ModelDrafter(text_model.early_exit(layers), eos_token_id=eos_token_id)
