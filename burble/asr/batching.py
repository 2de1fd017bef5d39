"""Decode many Whisper windows as the rows of one call to the shared loop.

* :func:`decode_windows`: windows of one file that share one prompt (batch transcription);
* :func:`decode_rows`: windows of different streams (:class:`WindowRequest`), each with its own
  audio length, prompt, processors, draft and token limit (the streaming engine's batches).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import torch

from burble.asr.loaded import LoadedWhisper
from burble.asr.options import TranscribeOptions
from burble.asr.processors import ProcessorFactory, window_processors
from burble.asr.search import best_of_rows, decode_window, decoding_options
from burble.asr.speculation import drafts_without_hypothesis
from burble.asr.whisper.attention_record import CrossAttentionRecord, heads_by_layer
from burble.asr.window import WindowResult
from burble.decoding.drafters import PreviousHypothesisDrafter
from burble.decoding.generate import generate
from burble.decoding.stats import SpeculativeStats
from burble.kernels.attention import KeysValues


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


CrossKeysValuesOf = Callable[[], list[KeysValues]]


@dataclass
class WindowRequest:
    """One stream's window: a row of :func:`decode_rows` (what a streaming recognizer asks for).

    Args:
      audio_features: ``(1, T, D)`` the window's encoder states (``T`` may differ between rows).
      prompt: the window's prompt (its own previous text and forced prefix).
      options: greedy options; ``max_new_tokens`` caps this row.
      previous_hypothesis: the last decode of the same audio: this row's speculative draft.
      extra_processors: this stream's biasing.
      cross: computes the decoder's cross-attention K/V of ``audio_features`` per layer, each
        ``(1, H, T, d)``, valid until the stream's next decode (a cache-aware stream extends its
        own); ``None``: projected here.
      stats: this stream's decoding counters (its share of the batch's).
      record_alignment: keep the alignment heads' scores in ``result.record``.
      forced_prefix_length: the prompt's last tokens that are the window's committed text (beam
        search counts them in a hypothesis's length, see :func:`~burble.asr.search.decode_window`).
    """

    audio_features: torch.Tensor
    prompt: list[int]
    options: TranscribeOptions
    previous_hypothesis: Sequence[int] = ()
    extra_processors: Optional[ProcessorFactory] = None
    cross: Optional[CrossKeysValuesOf] = None
    stats: Optional[SpeculativeStats] = None
    record_alignment: bool = True
    forced_prefix_length: int = 0

    @property
    def batchable(self) -> bool:
        """Greedy and beam 1: what rows of one call can decode (beam search runs alone)."""
        return self.options.beam_size == 1 and self.options.speculative in ("auto", "off")


def decode_rows(whisper: LoadedWhisper, requests: Sequence[WindowRequest]) -> list[WindowResult]:
    """Decode windows of different streams as the rows of one greedy call.

    Rows differ in everything but the model: audio length (each row's cross-attention reads its
    own stream's K/V), prompt, processors, draft and token limit.
    Each row gets the tokens it would get decoded alone with :func:`decode_window` (tested); one
    request, or any that cannot share a call (beam search), is decoded alone.
    """
    if len(requests) == 1 or not all(r.batchable for r in requests):
        return [_decode_alone(whisper, r) for r in requests]
    batch = len(requests)
    # Each row's cross-attention K/V stay where its stream keeps them (nothing is stacked: a copy
    # would cost ~12 MB per row of tiny.en's 1262 frames).
    rows = [r.cross() if r.cross is not None else whisper.model.decoder.cross_kv(r.audio_features) for r in requests]
    text_model = whisper.text_model(requests[0].audio_features, cross_rows=rows)
    heads = heads_by_layer(whisper.model.alignment_heads)
    text_model.row_records = [CrossAttentionRecord(heads) for _ in requests]
    limits = [decoding_options(whisper, r.prompt, r.options, 0.0).max_new_tokens for r in requests]
    decoding = replace(decoding_options(whisper, max((r.prompt for r in requests), key=len), requests[0].options, 0.0),
                       max_new_tokens=max(limits))  # fmt: skip
    width = max(len(r.prompt) for r in requests)
    eot = whisper.tokenizer.eot
    prompts = torch.tensor([r.prompt + [eot] * (width - len(r.prompt)) for r in requests], device=whisper.device)
    # A row without a hypothesis (or with speculation off) drafts nothing: one token per pass.
    drafters = [PreviousHypothesisDrafter(r.previous_hypothesis if r.options.speculative == "auto" else ()) for r in requests]
    with torch.inference_mode():
        result = generate(
            text_model, prompts, decoding, drafter=drafters, prompt_lengths=[len(r.prompt) for r in requests],
            row_processors=[window_processors(whisper, r.prompt, r.options, r.extra_processors) for r in requests],
            probe_index=[r.prompt.index(whisper.tokenizer.sot) for r in requests], row_max_new_tokens=limits,
        )
    windows = []
    for b, request in enumerate(requests):
        if request.stats is not None:  # this row's share: the passes it waited for, its tokens
            request.stats.merge(SpeculativeStats(
                target_passes=result.stats.target_passes, generated=len(result.tokens[b]),
                decoder_seconds=result.stats.decoder_seconds / batch,
            ))  # fmt: skip
        window = best_of_rows(whisper, result, 0.0, rows=range(b, b + 1))
        window.record = text_model.row_records[b] if request.record_alignment else None
        windows.append(window)
    return windows


def _decode_alone(whisper: LoadedWhisper, request: WindowRequest) -> WindowResult:
    return decode_window(
        whisper, request.audio_features, request.prompt, request.options, temperature=0.0, stats=request.stats,
        previous_hypothesis=request.previous_hypothesis, extra_processors=request.extra_processors,
        cross=request.cross() if request.cross is not None else None, record_alignment=request.record_alignment,
        forced_prefix_length=request.forced_prefix_length,
    )
