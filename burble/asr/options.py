"""Options of Whisper transcription (maps 1:1 onto ``burble transcribe`` flags)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class TranscribeOptions:
    """How to transcribe one input.

    Defaults follow faster-whisper / openai-whisper so results are comparable.

    Attributes:
      language: language code for multilingual models (``None``: English for now).
      task: ``"transcribe"`` or ``"translate"``.
      beam_size: 1 is greedy search; > 1 beam search at temperature 0.
      best_of: samples drawn per window at temperature > 0 (the best one is kept).
      patience: beam search patience factor.
      length_penalty: ``None`` ranks hypotheses by mean log-probability.
      temperatures: tried in order when a window fails the quality thresholds (fallback).
      compression_ratio_threshold: gzip ratio above which a window counts as repetitive.
      log_prob_threshold: average log-probability below which a window counts as failed.
      no_speech_threshold: no-speech probability above which a low-confidence window is silence.
      condition_on_previous_text: prompt each window with the text of the previous ones.
      prompt_reset_on_temperature: stop conditioning after a window needed this temperature.
      initial_prompt: text prompted before the first window.
      suppress_blank: forbid a blank first token.
      suppress_tokens: ``(-1,)`` is Whisper's default non-speech symbol set.
      without_timestamps: decode text only (one segment per window).
      max_initial_timestamp: the first timestamp of a window is at most this many seconds.
      word_timestamps: align words with cross-attention (DTW) and return them per segment.
      speculative: ``off``, ``ngram`` (prompt lookup), ``self`` (early-exit self-draft), ``mtp``
        (the model's trained draft heads), ``eagle`` (its trained one-layer draft model) or
        ``auto``: what measured fastest, i.e. the previous hypothesis as the draft when re-decoding
        audio (streaming), and offline the model's draft layer in 2-token chains where one ships
        (tiny.en), else plain decoding (:mod:`burble.asr.speculation`).
      draft_length: tokens per speculative draft (the depth of a draft tree).
      draft_layers: decoder layers the early-exit self-draft uses.
      draft_tree: shape of ``mtp`` drafts: ``chain`` (the heads' best tokens), ``static`` (a fixed
        Medusa-style tree) or ``dynamic`` (the most probable nodes under the heads); for ``eagle``
        any tree is the chain plus the first position's next-best guesses as leaves.
      max_new_tokens: per window (default: half of the text context, like CTranslate2).
      screen_logits: greedy windows on CPU project their logits through an int8 copy of the
        output embedding and recompute in float32 only what can decide the argmax (the same
        tokens, ~2 ms less per decoder pass; log-probabilities within ~1e-3 nats:
        :mod:`burble.kernels.screened_projection`). Off with biasing, sampling and beam search.
    """

    language: Optional[str] = None
    task: str = "transcribe"
    beam_size: int = 5
    best_of: int = 5
    patience: float = 1.0
    length_penalty: Optional[float] = None
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: Optional[float] = 2.4
    log_prob_threshold: Optional[float] = -1.0
    no_speech_threshold: Optional[float] = 0.6
    condition_on_previous_text: bool = True
    prompt_reset_on_temperature: float = 0.5
    initial_prompt: Optional[str] = None
    suppress_blank: bool = True
    suppress_tokens: tuple[int, ...] = (-1,)
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    word_timestamps: bool = False
    prepend_punctuations: str = "\"'“¿([{-"
    append_punctuations: str = "\"'.。,，!！?？:：”)]}、"
    speculative: str = "off"
    draft_length: int = 4
    draft_layers: int = 1
    draft_tree: str = "chain"
    max_new_tokens: Optional[int] = None
    screen_logits: bool = True

    def __post_init__(self) -> None:
        if self.beam_size < 1 or self.best_of < 1:
            raise ValueError("beam_size and best_of must be >= 1")
        if not self.temperatures:
            raise ValueError("give at least one temperature")
        if self.speculative not in ("off", "ngram", "self", "mtp", "eagle", "auto"):
            raise ValueError(f"speculative must be off, ngram, self, mtp, eagle or auto, not {self.speculative!r}")
        if self.draft_tree not in ("chain", "static", "dynamic"):
            raise ValueError(f"draft_tree must be chain, static or dynamic, not {self.draft_tree!r}")
        if self.task not in ("transcribe", "translate"):
            raise ValueError("task must be 'transcribe' or 'translate'")
