"""Which speculative drafter decodes a Whisper window (the ``--speculative`` option).

* ``ngram``: prompt lookup over the prompt (previous text) and the tokens decoded so far;
* ``self``: the first ``draft_layers`` decoder layers of the same model draft (early exit);
* ``mtp``: the model's trained multi-token-prediction heads (:mod:`burble.decoding.mtp`), shipped
  for the models ``recipes/mtp_heads`` trained, drafting a chain or a tree (``draft_tree``); when
  re-decoding, the previous hypothesis drafts first and the heads past it. Measured on the dev
  speech (tiny.en, 1 thread): 1.3-1.45x fewer decoder passes, but the heads' guesses beyond the
  next token are rarely right (acceptance 0.32-0.44 at the first position, <= 0.08 after), so
  drafting and the longer passes cost more than they save (decoder 0.6-0.95x): opt-in only;
* ``eagle``: the model's trained EAGLE-style draft layer (:mod:`burble.decoding.eagle`), shipped
  for tiny.en, drafting a chain at the level of the decoder's features. On the dev speech it is
  accepted more than the heads (1.66-1.77 tokens per pass, 1.6x fewer decoder passes). Since the
  decoder's projections run multi-row passes through oneDNN (``kernels.linear``), a pass of 2-5
  rows costs 1.25x a one-row step on 1 thread and no more than one on 2: decoder 1.01x (k = 2) /
  0.85x (k = 4) of plain on 1 thread, 1.27x / 1.11x on 2 (1.33x at k = 2 with the layer trained on
  augmented speech, 2026-12-06). ``--draft-tree static`` adds the first position's next-best guesses
  as leaves: 7% fewer passes, but a tree pass costs more (decoder 1.29x against 1.33x, 2 threads);
* ``auto``: what measured fastest for the situation (BENCHMARKS.md, "Speculative decoding"):

  - re-decoding audio that has a previous hypothesis (streaming re-decodes its window every
    chunk): that hypothesis is the draft (:class:`PreviousHypothesisDrafter`), 2.1x fewer decoder
    passes and 1.6-2x faster decoding; adding the heads past its end measured slower;
  - offline (a window decoded once): the draft layer in chains of ``AUTO_EAGLE_DRAFT_LENGTH``
    tokens where the model ships one (tiny.en: end to end 1.16x on 2 threads, 1.00x on 1, against
    plain decoding with float32 logits; 1.03x against plain decoding with the int8 logit screen,
    which makes one-row passes ~1.3x faster but not verification passes), else no drafter. Since
    single-row decoder products got faster (``kernels.linear``, 2026-12-07) the layer only breaks
    even on the 2-core CPU here: decoder 1.01-1.03x on the dev speech, and on the long files 6.8 s
    against 6.4 s for plain decoding (``recipes/mtp_heads/RESULTS_eagle.md`` says where the time goes).
    Prompt lookup is accepted ~8% of the time and made the decoder 0.85x as fast; the early-exit
    self-draft of an untrained Whisper layer ~4% (0.26x); the MTP heads see above.
    Windows decoded together in a batch (:func:`burble.asr.batching.decode_windows`) stay plain.

All of them are lossless: greedy verification keeps exactly the tokens plain decoding would give.
"""

from __future__ import annotations

from typing import Optional, Sequence

from burble.asr.options import TranscribeOptions
from burble.asr.whisper.model import WhisperTextModel
from burble.decoding.drafters import FirstDraft, ModelDrafter, PreviousHypothesisDrafter, PromptLookupDrafter
from burble.decoding.eagle import EagleDrafter, EagleLayer
from burble.decoding.mtp import MTPDrafter, MTPHeads, TreeShape
from burble.decoding.speculative import Drafter


# ``--speculative eagle`` stops a chain before a token the draft layer gives less than this
# probability. Off: on the dev speech (tiny.en, k = 4, 1 thread, interleaved) cutting at 0.3 / 0.5
# drafted 36% / 49% fewer tokens but gave decoder 0.78x / 0.79x against 0.74x without a cut and
# 0.86x with k = 2, so a shorter fixed chain did better than the cut.
EAGLE_MIN_PROBABILITY = 0.0

# ``auto`` drafts chains of 2 tokens with the draft layer: on the dev speech 1.65 tokens per pass
# against 1.71 with 4, and each drafted token costs ~1.1 ms (decoder 1.27x vs 1.11x, 2 threads);
# with first-position leaves the same chains took 7% fewer passes but decoded slower (1.29x vs 1.33x).
AUTO_EAGLE_DRAFT_LENGTH = 2

# ``--speculative eagle --draft-tree static|dynamic``: beside the chain's first token, the layer's
# next-best guesses for that position as leaves (the first position is where the layer misses
# most: on the dev speech its best guess is right 43% of the time, one of its best 3 56%).
EAGLE_TREE_FIRST_CANDIDATES = 3

# ``--draft-tree``: a fixed Medusa-style tree of 10 nodes (rank paths: the heads' 1st/2nd/3rd
# choices) and the probability-ranked dynamic tree.
DRAFT_TREES: dict[str, Optional[TreeShape]] = {
    "chain": None,
    "static": TreeShape(paths=((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0, 0), (0, 0, 0, 0, 0))),
    "dynamic": TreeShape(top_k=3, beam=3, max_nodes=12),
}


def drafts_without_hypothesis(options: TranscribeOptions) -> bool:
    """Whether windows with no previous hypothesis are decoded one by one (a drafter was asked for:
    speculative decoding runs at batch 1)."""
    return options.speculative in ("ngram", "self", "mtp", "eagle")


def window_drafter(
    options: TranscribeOptions,
    text_model: WhisperTextModel,
    prompt: list[int],
    *,
    eos_token_id: int,
    previous_hypothesis: Sequence[int] = (),
    draft_heads: Optional[MTPHeads] = None,
    draft_layer: Optional[EagleLayer] = None,
) -> Optional[Drafter]:
    """The drafter for one window's greedy decode, or ``None`` for plain decoding.

    Args:
      previous_hypothesis: the tokens an earlier decode of the same audio gave (streaming).
      draft_heads: the model's trained MTP heads, if burble ships some for it.
      draft_layer: the model's trained EAGLE-style draft layer, if burble ships one for it.
    """
    if options.speculative == "off":
        return None
    if options.speculative == "mtp" and draft_heads is None:
        raise ValueError("--speculative mtp: no trained draft heads ship for this model (see recipes/mtp_heads)")
    if options.speculative == "eagle" and draft_layer is None:
        raise ValueError("--speculative eagle: no trained draft layer ships for this model (see recipes/mtp_heads)")
    if options.speculative == "auto":
        if previous_hypothesis:
            return PreviousHypothesisDrafter(previous_hypothesis)
        if draft_layer is None:
            return None
        return EagleDrafter(text_model, draft_layer, eos_token_id=eos_token_id, max_tokens=AUTO_EAGLE_DRAFT_LENGTH)
    if options.speculative == "mtp":
        mtp = MTPDrafter(text_model, draft_heads, eos_token_id=eos_token_id, tree=DRAFT_TREES[options.draft_tree])
        # The previous hypothesis first (it is right about most of the re-decoded audio); the heads
        # draft where it has nothing to offer (past its end, or after a divergence).
        return FirstDraft([PreviousHypothesisDrafter(previous_hypothesis), mtp]) if previous_hypothesis else mtp
    if options.speculative == "eagle":
        first_candidates = 1 if options.draft_tree == "chain" else EAGLE_TREE_FIRST_CANDIDATES
        eagle = EagleDrafter(text_model, draft_layer, eos_token_id=eos_token_id, min_probability=EAGLE_MIN_PROBABILITY,
                             first_candidates=first_candidates)
        return FirstDraft([PreviousHypothesisDrafter(previous_hypothesis), eagle]) if previous_hypothesis else eagle
    if options.speculative == "ngram":
        return PromptLookupDrafter(hint_tokens=prompt)
    layers = max(1, min(options.draft_layers, text_model.num_layers - 1))
    return ModelDrafter(text_model.early_exit(layers), eos_token_id=eos_token_id)
