"""Which speculative drafter decodes a Whisper window (the ``--speculative`` option).

* ``ngram``: prompt lookup over the prompt (previous text) and the tokens decoded so far;
* ``self``: the first ``draft_layers`` decoder layers of the same model draft (early exit);
* ``auto``: the drafter measured best for offline transcription on CPU: prompt lookup. The early-exit
  self-draft of an untrained Whisper layer is accepted ~4% of the time and costs more than it saves
  (BENCHMARKS.md, "Speculative decoding"), so ``auto`` does not use it.

All of them are lossless: greedy verification keeps exactly the tokens plain decoding would give.
"""

from __future__ import annotations

from typing import Optional

from burble.asr.options import TranscribeOptions
from burble.asr.whisper.model import WhisperTextModel
from burble.decoding.drafters import ModelDrafter, PromptLookupDrafter
from burble.decoding.speculative import Drafter


def window_drafter(
    options: TranscribeOptions, text_model: WhisperTextModel, prompt: list[int], *, eos_token_id: int
) -> Optional[Drafter]:
    """The drafter for one window's greedy decode, or ``None`` when speculation is off."""
    if options.speculative == "off":
        return None
    lookup = PromptLookupDrafter(hint_tokens=prompt)
    if options.speculative in ("ngram", "auto"):
        return lookup
    layers = max(1, min(options.draft_layers, text_model.num_layers - 1))
    return ModelDrafter(text_model.early_exit(layers), eos_token_id=eos_token_id)
