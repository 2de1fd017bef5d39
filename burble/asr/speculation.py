"""Which speculative drafter decodes a Whisper window (the ``--speculative`` option).

* ``ngram``: prompt lookup over the prompt (previous text) and the tokens decoded so far;
* ``self``: the first ``draft_layers`` decoder layers of the same model draft (early exit);
* ``auto``: what measured fastest for the situation (BENCHMARKS.md, "Speculative decoding"):

  - re-decoding audio that has a previous hypothesis (streaming re-decodes its window every
    chunk): that hypothesis is the draft (:class:`PreviousHypothesisDrafter`), 2.1x fewer decoder
    passes and 1.6x faster decoding;
  - offline (a window decoded once): no drafter. Prompt lookup is accepted ~8% of the time and
    made the decoder 0.84x as fast; the early-exit self-draft of an untrained Whisper layer is
    accepted ~4% of the time (0.29x). ``auto`` stays plain decoding until a drafter beats it.

All of them are lossless: greedy verification keeps exactly the tokens plain decoding would give.
"""

from __future__ import annotations

from typing import Optional, Sequence

from burble.asr.options import TranscribeOptions
from burble.asr.whisper.model import WhisperTextModel
from burble.decoding.drafters import ModelDrafter, PreviousHypothesisDrafter, PromptLookupDrafter
from burble.decoding.speculative import Drafter


def drafts_without_hypothesis(options: TranscribeOptions) -> bool:
    """Whether a window with no previous hypothesis is decoded speculatively (offline decoding)."""
    return options.speculative in ("ngram", "self")


def window_drafter(
    options: TranscribeOptions,
    text_model: WhisperTextModel,
    prompt: list[int],
    *,
    eos_token_id: int,
    previous_hypothesis: Sequence[int] = (),
) -> Optional[Drafter]:
    """The drafter for one window's greedy decode, or ``None`` for plain decoding.

    Args:
      previous_hypothesis: the tokens an earlier decode of the same audio gave (streaming).
    """
    if options.speculative == "off":
        return None
    if options.speculative == "auto":
        return PreviousHypothesisDrafter(previous_hypothesis) if previous_hypothesis else None
    if options.speculative == "ngram":
        return PromptLookupDrafter(hint_tokens=prompt)
    layers = max(1, min(options.draft_layers, text_model.num_layers - 1))
    return ModelDrafter(text_model.early_exit(layers), eos_token_id=eos_token_id)
