"""Which streaming recognizer a command or the server builds: cache-aware or re-encoding.

``burble stream``, ``burble listen``, ``burble serve`` and the benchmarks all build their
recognizers here, so one switch (:class:`RecognizerChoice`) selects the encoder path everywhere:

* ``"cache-aware"``: :class:`~burble.streaming.cache_aware.CacheAwareWhisperRecognizer`, which
  encodes each chunk once against a per-layer K/V cache.
* ``"re-encode"``: :class:`~burble.streaming.recognizer.WhisperStreamingRecognizer`, which
  re-encodes its window zero-padded to 30 s every chunk.

The commit policy (LocalAgreement-2 or AlignAtt) is a :class:`StreamingOptions` field and works
with either encoder.

This module imports no torch (the recognizers are imported by :meth:`RecognizerChoice.build`), so
the commands' ``--help`` can show :class:`RecognizerChoice`'s defaults and stay fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from burble.asr.pipeline import WhisperASR
    from burble.streaming.cache_aware import CacheAwareOptions
    from burble.streaming.recognizer import StreamingOptions, WhisperStreamingRecognizer

ENCODERS = ("cache-aware", "re-encode")
# StreamingOptions.policy's values (burble.streaming.recognizer.COMMIT_POLICIES, which imports
# torch), for the commands' --policy choices; tests/commands/test_stream_flags.py keeps them equal.
COMMIT_POLICIES = ("local-agreement", "alignatt")
FRAME_SECONDS = 0.02  # one Whisper encoder frame


@dataclass(frozen=True)
class RecognizerChoice:
    """The encoder path of a stream's recognizer.

    Attributes:
      encoder: ``"cache-aware"`` or ``"re-encode"``.
      lookahead_seconds: the cache-aware encoder's right context per chunk (``R``; multiples of
        20 ms). Ignored by ``"re-encode"``.
      encoder_chunk_seconds: the cache-aware encoder's chunk (``C``), independent of how often the
        pipeline calls the recognizer. Ignored by ``"re-encode"``.
    """

    # The default since the pause commit, the 15 s window and the 2026-12-04 commit rules (tiny.en,
    # VAD on, 1 s chunks; BENCHMARKS.md). Committed WER over all 21 dev files through the pipeline,
    # pooled over 0.9/1/1.1 s chunks (where chunks fall moves one run by 1-2 points): 3.53% with
    # R = 0.5 s and 3.47% with R = 1 s (offline 3.85%). The lookahead's pending frames are encoded
    # in every decode's tail, so R = 0.5 s costs less per decode: in the full grid of 2026-12-04 its
    # end-of-utterance latency was 0.20 / 0.28 / 0.28 s (short clips / 80 s file / joined clips)
    # against 0.29 / 0.33 / 0.37 s with R = 1 s, at compute RTF 0.15-0.21 against 0.17-0.24.
    encoder: str = "cache-aware"
    lookahead_seconds: float = 0.5
    encoder_chunk_seconds: float = 1.0

    def __post_init__(self) -> None:
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}, not {self.encoder!r}")
        if not 0.0 <= self.lookahead_seconds <= 2.0:
            raise ValueError("lookahead_seconds must be in [0, 2]")
        if not FRAME_SECONDS <= self.encoder_chunk_seconds <= 4.0:
            raise ValueError("encoder_chunk_seconds must be in [0.02, 4]")

    def cache_aware_options(self, streaming: Optional[StreamingOptions] = None) -> CacheAwareOptions:
        """The cache-aware recognizer's options for these seconds (rounded to encoder frames)."""
        from burble.streaming.cache_aware import CacheAwareOptions
        from burble.streaming.recognizer import StreamingOptions

        if streaming is None:
            streaming = StreamingOptions()
        return CacheAwareOptions(
            chunk_frames=max(1, round(self.encoder_chunk_seconds / FRAME_SECONDS)),
            lookahead_frames=round(self.lookahead_seconds / FRAME_SECONDS),
            streaming=streaming,
        )

    def build(self, asr: WhisperASR, streaming: Optional[StreamingOptions] = None) -> WhisperStreamingRecognizer:
        """A new recognizer (one per stream) over the shared loaded model.

        Args:
          asr: the loaded model (``burble.load_model``), shared read-only by the streams.
          streaming: decode and commit options (``None``: :class:`StreamingOptions`' defaults).
        """
        from burble.streaming.recognizer import StreamingOptions, WhisperStreamingRecognizer

        if streaming is None:
            streaming = StreamingOptions()
        if self.encoder == "cache-aware":
            from burble.streaming.cache_aware import CacheAwareWhisperRecognizer

            return CacheAwareWhisperRecognizer(asr, self.cache_aware_options(streaming))
        return WhisperStreamingRecognizer(asr, streaming)
