"""Decode one Whisper window: pick the search (beam, sampling, greedy with or without a drafter)
and score its result.

The search itself is the shared core's (:func:`burble.decoding.generate.generate`,
:func:`burble.decoding.beam.beam_search`); this module builds what it needs for one window (the
logits chain, the decoding options, the drafter) and turns its output into a
:class:`~burble.asr.window.WindowResult`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from burble.asr.loaded import LoadedWhisper
from burble.asr.options import TranscribeOptions
from burble.asr.processors import ProcessorFactory, logit_screen, window_processors
from burble.asr.speculation import window_drafter
from burble.asr.whisper.attention_record import CrossAttentionRecord, heads_by_layer
from burble.asr.window import WindowResult
from burble.decoding.beam import beam_search
from burble.decoding.generate import GenerationResult, generate
from burble.decoding.options import DecodingOptions
from burble.decoding.speculative import Drafter
from burble.decoding.stats import SpeculativeStats
from burble.kernels.attention import KeysValues


def decoding_options(
    whisper: LoadedWhisper, prompt: list[int], options: TranscribeOptions, temperature: float, forced_prefix_length: int = 0
) -> DecodingOptions:
    """The core's options for one window: new tokens fit in the text context, beams only at 0."""
    n_ctx = whisper.model.dims.n_text_ctx
    max_new = options.max_new_tokens or min(n_ctx // 2, n_ctx - max(len(prompt) - 1, 0))
    return DecodingOptions(
        max_new_tokens=min(max_new, n_ctx - len(prompt)),
        eos_token_id=whisper.tokenizer.eot,
        temperature=temperature,
        beam_size=options.beam_size if temperature == 0 else 1,
        patience=options.patience,
        length_penalty=options.length_penalty,
        draft_length=options.draft_length,
        length_offset=forced_prefix_length,
    )


def best_of_rows(
    whisper: LoadedWhisper, result: GenerationResult, temperature: float, rows: Optional[range] = None
) -> WindowResult:
    """The best of ``rows`` (default: all rows) by average log-probability."""
    assert result.probe_logits is not None
    rows = rows if rows is not None else range(len(result.tokens))
    tokenizer = whisper.tokenizer
    no_speech = float(torch.softmax(result.probe_logits[rows[0]].float(), dim=-1)[tokenizer.no_speech])
    # avg log-prob as the reference: sum over generated tokens (end-of-text included) / (len + 1).
    scored = [(sum(result.token_logprobs[r]) / (len(result.tokens[r]) + 1), r) for r in rows]
    avg_logprob, row = max(scored, key=lambda s: s[0])
    return WindowResult(
        tokens=list(result.tokens[row]), avg_logprob=avg_logprob, no_speech_prob=no_speech, temperature=temperature,
        text_of=tokenizer.decode, token_logprobs=list(result.token_logprobs[row]),
    )


def decode_window(
    whisper: LoadedWhisper,
    audio_features: torch.Tensor,
    prompt: list[int],
    options: TranscribeOptions,
    *,
    temperature: float = 0.0,
    stats: Optional[SpeculativeStats] = None,
    drafter: Optional[Drafter] = None,
    previous_hypothesis: Sequence[int] = (),
    extra_processors: Optional[ProcessorFactory] = None,
    cross: Optional[list[KeysValues]] = None,
    record_alignment: bool = False,
    forced_prefix_length: int = 0,
) -> WindowResult:
    """Decode one 30 s window's text tokens (timestamps included, end-of-text excluded).

    Args:
      audio_features: ``(1, 1500, D)`` encoder states.
      prompt: the window's prompt (:func:`burble.asr.prompt.build_prompt`).
      temperature: 0 for greedy or beam search, > 0 to sample (``best_of`` samples).
      stats: decoding counters to merge into.
      drafter: the greedy decode's drafter; by default :func:`~burble.asr.speculation.window_drafter`
        chooses one from ``options.speculative``.
      previous_hypothesis: an earlier decode of the same audio, a draft for ``speculative="auto"``.
      extra_processors: this caller's own processors (e.g. a stream's biasing).
      cross: the decoder's cross-attention K/V of ``audio_features`` per layer, if the caller
        keeps them (the cache-aware stream extends them by its new frames only).
      record_alignment: keep the alignment heads' scores of the decode's passes in
        ``result.record`` (word timing without a pass of its own, see
        :mod:`burble.asr.whisper.attention_record`).
      forced_prefix_length: the prompt's last tokens that are text the decode continues (a stream's
        committed words); beam search counts them in a hypothesis's length
        (``DecodingOptions.length_offset``).
    """
    text_model = whisper.text_model(audio_features, cross)
    if record_alignment:
        text_model.record = CrossAttentionRecord(heads_by_layer(whisper.model.alignment_heads))
    decoding = decoding_options(whisper, prompt, options, temperature, forced_prefix_length)
    chain = window_processors(whisper, prompt, options, extra_processors)
    prompt_tensor = torch.tensor([prompt], device=whisper.device)
    probe = prompt.index(whisper.tokenizer.sot)
    with torch.inference_mode():
        if decoding.beam_size > 1:
            result = beam_search(text_model, prompt_tensor, decoding, processors=chain, probe_index=probe)
        elif temperature > 0 and options.best_of > 1:
            result = generate(
                text_model, prompt_tensor.repeat(options.best_of, 1), decoding, processors=chain, probe_index=probe
            )
        else:
            if drafter is None and temperature == 0:
                drafter = window_drafter(
                    options, text_model, prompt, eos_token_id=whisper.tokenizer.eot,
                    previous_hypothesis=previous_hypothesis, draft_heads=whisper.draft_heads,
                    draft_layer=whisper.draft_layer,
                )
            if options.screen_logits and temperature == 0 and whisper.device.type == "cpu":
                text_model.logit_screen = logit_screen(whisper, text_model, chain)
            result = generate(text_model, prompt_tensor, decoding, processors=chain, drafter=drafter, probe_index=probe)
    if stats is not None:
        stats.merge(result.stats)
    best = best_of_rows(whisper, result, temperature)
    best.text_model, best.record = text_model, text_model.record
    return best
