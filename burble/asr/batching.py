"""Decode many Whisper windows that share one prompt as the rows of one call to the shared loop."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch

from burble.asr.loaded import LoadedWhisper
from burble.asr.options import TranscribeOptions
from burble.asr.processors import ProcessorFactory, window_processors
from burble.asr.search import best_of_rows, decode_window, decoding_options
from burble.asr.speculation import drafts_without_hypothesis
from burble.asr.window import WindowResult
from burble.decoding.generate import generate
from burble.decoding.stats import SpeculativeStats


def decode_windows(
    whisper: LoadedWhisper,
    audio_features: torch.Tensor,
    prompt: list[int],
    options: TranscribeOptions,
    *,
    temperature: float = 0.0,
    stats: Optional[SpeculativeStats] = None,
    extra_processors: Optional[ProcessorFactory] = None,
) -> list[WindowResult]:
    """Decode ``B`` windows sharing one prompt in one batch: ``B`` rows of the shared loop.

    Greedy and sampling decode all windows together (``best_of`` samples per window become
    ``B * best_of`` rows); rows finish independently, so each window gets the tokens it would
    get alone. Beam search and speculative decoding run window by window (both decode one
    sequence at a time).

    Args:
      audio_features: ``(B, 1500, D)`` encoder states.
      prompt: the prompt every window starts from.
      options: transcription options.
      temperature: 0 for greedy, > 0 to sample.
      stats: decoding counters to merge into.
      extra_processors: this caller's own processors (e.g. a batch job's biasing).
    """
    batch = audio_features.shape[0]
    sequential = temperature == 0 and (options.beam_size > 1 or drafts_without_hypothesis(options))
    if batch == 1 or sequential:
        return [
            decode_window(
                whisper, audio_features[i : i + 1], prompt, options, temperature=temperature, stats=stats,
                extra_processors=extra_processors,
            )
            for i in range(batch)
        ]
    samples = options.best_of if temperature > 0 else 1
    if samples > 1:
        audio_features = audio_features.repeat_interleave(samples, dim=0)
    text_model = whisper.text_model(audio_features)
    decoding = replace(decoding_options(whisper, prompt, options, temperature), beam_size=1)
    prompts = torch.tensor([prompt], device=whisper.device).repeat(batch * samples, 1)
    with torch.inference_mode():
        result = generate(
            text_model, prompts, decoding, processors=window_processors(whisper, prompt, options, extra_processors),
            probe_index=prompt.index(whisper.tokenizer.sot),
        )
    if stats is not None:
        stats.merge(result.stats)
    return [best_of_rows(whisper, result, temperature, rows=range(i * samples, (i + 1) * samples)) for i in range(batch)]
