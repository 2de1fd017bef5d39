"""``WhisperASR``: a loaded Whisper checkpoint + tokenizer, decoding windows through the shared core.

This is the object ``burble.load_model()`` returns. It owns the Whisper-specific parts of decoding
(prompt layout, suppression lists, the timestamp grammar, no-speech probability) and hands the
search itself to :mod:`burble.decoding` (greedy/sampling/speculative in ``generate``, beam search in
``beam_search``). Extra logits processors (shallow fusion, phrase boosting) are added per call.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional, Sequence

import torch

from burble.asr.frontend import AudioInput
from burble.asr.options import TranscribeOptions
from burble.asr.results import TranscriptionResult
from burble.asr.speculation import window_drafter
from burble.asr.tokenizer import TIME_PRECISION, WhisperTokenizer
from burble.asr.transcribe import WindowResult, compression_ratio, transcribe
from burble.asr.whisper.loading import Checkpoint, load_checkpoint
from burble.asr.whisper.model import Whisper, WhisperTextModel
from burble.asr.whisper.rules import TimestampRules
from burble.decoding.beam import beam_search
from burble.decoding.generate import GenerationResult, generate
from burble.decoding.logits import LogitsProcessor, SuppressAtBegin, SuppressTokens
from burble.decoding.options import DecodingOptions
from burble.decoding.speculative import Drafter
from burble.decoding.stats import SpeculativeStats

# Builds extra processors for one window, given the prompt length (sample_begin).
ProcessorFactory = Callable[[int], Sequence[LogitsProcessor]]


class WhisperASR:
    """A ready-to-use Whisper recogniser.

    Args:
      checkpoint: loaded weights, tokenizer path and config.
      device: torch device to run on.
    """

    def __init__(self, checkpoint: Checkpoint, *, device: str | torch.device = "cpu") -> None:
        self.name = checkpoint.name
        self.model: Whisper = checkpoint.model.to(device)
        dims = self.model.dims
        self.tokenizer = WhisperTokenizer(checkpoint.tokenizer_path, multilingual=dims.multilingual)
        if checkpoint.alignment_heads:
            self.model.alignment_heads = [tuple(h) for h in checkpoint.alignment_heads]  # type: ignore[misc]
        self.suppress_ids = checkpoint.suppress_ids
        self.suppress_ids_begin = checkpoint.suppress_ids_begin or [self.tokenizer.encode(" ")[0], self.tokenizer.eot]
        self.extra_processors: Optional[ProcessorFactory] = None

    @property
    def device(self) -> torch.device:
        return self.model.device

    # -- one window ------------------------------------------------------------------------------

    @torch.inference_mode()
    def encode(self, mel: torch.Tensor) -> torch.Tensor:
        """Encoder states ``(B, 1500, D)`` of ``(n_mels, 3000)`` or ``(B, n_mels, 3000)`` features."""
        if mel.dim() == 2:
            mel = mel.unsqueeze(0)
        return self.model.embed_audio(mel.to(self.device))

    def build_prompt(self, previous_tokens: list[int], options: TranscribeOptions, prefix: Optional[str] = None) -> list[int]:
        """``[<|startofprev|> previous...] <|startoftranscript|> [lang task] [<|notimestamps|>]``."""
        tokenizer = self.tokenizer
        if options.language is not None:
            tokenizer.language = options.language if tokenizer.multilingual else None
        elif tokenizer.multilingual:
            tokenizer.language = "en"
        tokenizer.task = options.task
        max_prompt = self.model.dims.n_text_ctx // 2 - 1
        prompt: list[int] = []
        if previous_tokens:
            prompt.append(tokenizer.sot_prev)
            prompt.extend(previous_tokens[-max_prompt:])
        prompt.extend(tokenizer.sot_sequence)
        if options.without_timestamps:
            prompt.append(tokenizer.no_timestamps)
        if prefix:
            if not options.without_timestamps:
                prompt.append(tokenizer.timestamp_begin)
            prompt.extend(tokenizer.encode(" " + prefix.strip())[:max_prompt])
        return prompt

    def suppressed_tokens(self, options: TranscribeOptions) -> list[int]:
        ids: set[int] = set()
        for token in options.suppress_tokens:
            if token >= 0:
                ids.add(token)
            elif token == -1:
                ids.update(self.suppress_ids or self.tokenizer.non_speech_tokens)
        t = self.tokenizer
        ids.update([t.transcribe, t.translate, t.sot, t.sot_prev, t.special.get("<|startoflm|>"), t.no_speech])
        return sorted(i for i in ids if i is not None)

    def processors(
        self, prompt: list[int], options: TranscribeOptions, extra: Optional[ProcessorFactory] = None
    ) -> list[LogitsProcessor]:
        """The logits chain for one window: suppression, blank rule, timestamp grammar, extras.

        Extras come from ``self.extra_processors`` (the model-wide biasing, e.g. of a batch job) and
        from ``extra`` (one caller's, e.g. a stream's own hotwords); both get the prompt length.
        """
        sample_begin = len(prompt)
        chain: list[LogitsProcessor] = [SuppressTokens(self.suppressed_tokens(options))]
        if options.suppress_blank:
            chain.append(SuppressAtBegin(self.suppress_ids_begin, sample_begin))
        if prompt[-1] != self.tokenizer.no_timestamps and not options.without_timestamps:
            index = round(options.max_initial_timestamp / TIME_PRECISION)
            chain.append(TimestampRules(self.tokenizer, sample_begin, index))
        for factory in (self.extra_processors, extra):
            if factory is not None:
                chain.extend(factory(sample_begin))
        return chain

    def decode_window(
        self,
        audio_features: torch.Tensor,
        prompt: list[int],
        options: TranscribeOptions,
        *,
        temperature: float = 0.0,
        stats: Optional[SpeculativeStats] = None,
        drafter: Optional[Drafter] = None,
        extra_processors: Optional[ProcessorFactory] = None,
    ) -> WindowResult:
        """Decode one 30 s window's text tokens (timestamps included, end-of-text excluded).

        ``extra_processors`` adds a caller's own processors (e.g. a stream's biasing) to the chain.
        """
        text_model = WhisperTextModel(self.model, audio_features)
        decoding = self._decoding_options(prompt, options, temperature)
        chain = self.processors(prompt, options, extra_processors)
        prompt_tensor = torch.tensor([prompt], device=self.device)
        probe = prompt.index(self.tokenizer.sot)
        with torch.inference_mode():
            if decoding.beam_size > 1:
                result = beam_search(text_model, prompt_tensor, decoding, processors=chain, probe_index=probe)
            elif temperature > 0 and options.best_of > 1:
                result = generate(
                    text_model, prompt_tensor.repeat(options.best_of, 1), decoding, processors=chain, probe_index=probe
                )
            else:
                if drafter is None and temperature == 0:
                    drafter = window_drafter(options, text_model, prompt, eos_token_id=self.tokenizer.eot)
                result = generate(text_model, prompt_tensor, decoding, processors=chain, drafter=drafter, probe_index=probe)
        if stats is not None:
            stats.merge(result.stats)
        best = self._best(result, temperature)
        best.text_model = text_model
        return best

    def decode_windows(
        self,
        audio_features: torch.Tensor,
        prompt: list[int],
        options: TranscribeOptions,
        *,
        temperature: float = 0.0,
        stats: Optional[SpeculativeStats] = None,
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
        """
        batch = audio_features.shape[0]
        sequential = (temperature == 0 and (options.beam_size > 1 or options.speculative != "off"))
        if batch == 1 or sequential:
            return [
                self.decode_window(audio_features[i : i + 1], prompt, options, temperature=temperature, stats=stats)
                for i in range(batch)
            ]
        samples = options.best_of if temperature > 0 else 1
        if samples > 1:
            audio_features = audio_features.repeat_interleave(samples, dim=0)
        text_model = WhisperTextModel(self.model, audio_features)
        decoding = replace(self._decoding_options(prompt, options, temperature), beam_size=1)
        prompts = torch.tensor([prompt], device=self.device).repeat(batch * samples, 1)
        with torch.inference_mode():
            result = generate(
                text_model, prompts, decoding, processors=self.processors(prompt, options),
                probe_index=prompt.index(self.tokenizer.sot),
            )
        if stats is not None:
            stats.merge(result.stats)
        return [self._best(result, temperature, rows=range(i * samples, (i + 1) * samples)) for i in range(batch)]

    def _decoding_options(self, prompt: list[int], options: TranscribeOptions, temperature: float) -> DecodingOptions:
        n_ctx = self.model.dims.n_text_ctx
        max_new = options.max_new_tokens or min(n_ctx // 2, n_ctx - max(len(prompt) - 1, 0))
        return DecodingOptions(
            max_new_tokens=min(max_new, n_ctx - len(prompt)),
            eos_token_id=self.tokenizer.eot,
            temperature=temperature,
            beam_size=options.beam_size if temperature == 0 else 1,
            patience=options.patience,
            length_penalty=options.length_penalty,
            draft_length=options.draft_length,
        )

    def _best(self, result: GenerationResult, temperature: float, rows: Optional[range] = None) -> WindowResult:
        """The best of ``rows`` (default: all rows) by average log-probability."""
        assert result.probe_logits is not None
        rows = rows if rows is not None else range(len(result.tokens))
        no_speech = float(torch.softmax(result.probe_logits[rows[0]].float(), dim=-1)[self.tokenizer.no_speech])
        # avg log-prob as the reference: sum over generated tokens (end-of-text included) / (len + 1).
        scored = [(sum(result.token_logprobs[r]) / (len(result.tokens[r]) + 1), result.tokens[r]) for r in rows]
        avg_logprob, tokens = max(scored, key=lambda s: s[0])
        text = self.tokenizer.decode(tokens)
        return WindowResult(
            tokens=list(tokens),
            avg_logprob=avg_logprob,
            no_speech_prob=no_speech,
            temperature=temperature,
            compression_ratio=compression_ratio(text.strip()),
        )

    # -- whole inputs ----------------------------------------------------------------------------

    def transcribe(
        self,
        audio: AudioInput,
        options: Optional[TranscribeOptions] = None,
        *,
        progress: Optional[Callable[[float], None]] = None,
        **overrides,
    ) -> TranscriptionResult:
        """Transcribe a file path or 16 kHz mono samples of any length.

        Keyword overrides are :class:`TranscribeOptions` fields, e.g. ``beam_size=1``.
        """
        options = options or TranscribeOptions()
        if overrides:
            options = replace(options, **overrides)
        return transcribe(self, audio, options, progress=progress)


def load_model(name: str = "tiny.en", *, device: str | torch.device = "cpu", threads: Optional[int] = None) -> WhisperASR:
    """Load a Whisper recogniser: ``"tiny.en"`` (embedded default), ``"base"``, or a checkpoint path."""
    if threads:
        torch.set_num_threads(threads)
    return WhisperASR(load_checkpoint(name), device=device)
