"""Cache-aware streaming Whisper: encode each chunk once, re-decode only the uncommitted text.

:class:`~burble.streaming.recognizer.WhisperStreamingRecognizer` re-encodes its whole window,
zero-padded to 30 s, on every chunk. :class:`CacheAwareWhisperRecognizer` keeps the stream's
encoder state instead (issue 13, first opt-in version):

* **Features.** New samples go through the incremental log-mel frontend
  (:class:`~burble.asr.streaming_frontend.StreamingLogMel`) and the new mel frames through the
  block-causal encoder (:class:`~burble.asr.whisper.streaming_encoder.StreamingEncoder`): a chunk
  of ``C`` frames plus ``R`` lookahead frames is encoded once against the per-layer K/V cache, so
  the past is never re-encoded (only the ``R`` lookahead frames are computed twice).
* **Decoder input.** The decoder needs Whisper's 30 s layout (content, then the encoder states of
  zero-mel padding; without them it hallucinates), so each decode reads the cached content
  followed by a padding tail of ``tail_frames`` frames, computed against the cache and never
  cached. Streaming needs a longer tail than issue 13's whole-clip decodes (256 frames were
  enough there): re-decoding 1-3 s windows, a 256-frame tail looped on several dev clips
  (committed WER 0.105 over the 20 short clips) where 512 frames (10.24 s) gave 0.029 and 768
  gave 0.045 (offline greedy: 0.045; the re-encoding recognizer: 0.061). Only the first 256
  padding frames are encoded per decode (``near_tail_frames``); the other 256 are the shared
  encoding of padding alone (:func:`~burble.asr.whisper.streaming_encoder.padding_encoding`),
  whose keys/values the near frames attend to: a 256-frame tail loops because the decoder misses
  the far padding, not because it needs it encoded against this stream's audio (measured below).
* **Cross-attention K/V.** The decoder's keys and values of the final frames are projected once
  per layer (:class:`CrossKeysValues`) and extended by each chunk's new frames; a decode
  projects only its tail's own frames, kept for that decode alone (those of the shared padding
  are projected once per model). They restart with the encoder state (a trim or an endpoint).
* **Everything else is the re-encoding recognizer's**: the decode (``asr.decode_window`` with the
  previous hypothesis as the lossless speculative draft), LocalAgreement commits, word timing by
  DTW over the alignment heads, the trim rule (sentence ends, or a forced trim past
  ``max_window_seconds``), the prompt of committed text. This class subclasses it and replaces
  only where features come from and what a trim does.
* **Trims.** When the window is trimmed, the encoder state is trimmed at the same point (on the
  320-sample grid of encoder frames) and re-encodes only the frames that stay, so positions count
  from the window start and stay below 1500. Endpoints start a fresh frontend and encoder state.

The encoder's defaults are C = 1 s and R = 0.5 s. The lookahead adds no wait (the pending frames
are in every decode's tail, fully attended), only their compute; over all dev files at 0.9/1/1.1 s
chunks R = 0.5 s gave 3.53% committed WER and R = 1 s 3.47% (offline 3.85%), so the cheaper one is
the default (``RecognizerChoice``).
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
from torch import nn

from burble.asr.frontend import HOP_LENGTH
from burble.asr.batching import CrossKeysValuesOf
from burble.asr.pipeline import WhisperASR
from burble.asr.streaming_frontend import StreamingLogMel, StreamingLogMelOptions
from burble.asr.whisper.model import Whisper
from burble.asr.whisper.streaming_encoder import EncoderState, StreamingEncoder, StreamingEncoderOptions, padding_encoding
from burble.audio import SAMPLE_RATE
from burble.decoding.kv_cache import KVCache
from burble.kernels.attention import KeyValueSegments
from burble.streaming.events import StreamEvent
from burble.streaming.recognizer import RecognizerStats, StreamingOptions, WhisperStreamingRecognizer

# One encoder frame is conv2's stride (2) over mel hops of 160 samples.
SAMPLES_PER_FRAME = 2 * HOP_LENGTH


@dataclass(frozen=True)
class CacheAwareOptions:
    """How the cache-aware recognizer encodes (lengths in 20 ms encoder frames) and decodes.

    Args:
      chunk_frames: ``C``, frames encoded and cached per encoder step (50 = 1 s).
      lookahead_frames: ``R``, future frames each chunk sees (25 = 0.5 s); they are recomputed
        with the next chunk.
      tail_frames: zero-mel padding frames after the content in every decode's features (512 =
        10.24 s; 256 looped on several dev clips, see the module docstring). They are reserved
        in the 1500-position budget, so the window holds at most ``1500 - tail - 2C - R`` frames.
      first_chunk_frames: the first chunk of each utterance and after each trim (150 = 3 s;
        :class:`~burble.asr.whisper.streaming_encoder.StreamingEncoderOptions` says why). Over the
        20 short dev clips with AlignAtt, committed WER 0.038 with 50, 0.032 with 100, 0.029 with 150.
      tail_precision: the padding tail's precision (``StreamingEncoderOptions.tail_precision``):
        ``"auto"`` encodes it in bfloat16 on CPUs with native bfloat16: encoder ms per decode
        132 -> 81 in ``benchmarks/streaming.py``, and over 9 float32 / 7 bfloat16 streams of
        the 80 s dev file a mean committed WER of 4.3% / 4.6% (BENCHMARKS.md, 2026-12-04);
        ``None`` keeps the model's dtype.
      near_tail_frames: of the tail, the padding frames encoded against the stream every decode;
        the rest are shared (``StreamingEncoderOptions.near_tail_frames``). Committed WER over
        all 21 dev files x 0.9/1/1.1 s chunks (the pipeline without real time, as
        ``tests/streaming/test_recognizer.py``'s dev-set test; offline greedy 3.9%), 2026-12-04:
        all 512 encoded 4.88%; 256 4.95%, 384 4.95%; 256 whose near frames did not attend to the
        far ones 5.33%. Again on 2026-12-04 (later): 64 5.27%, 128 4.50%, 192 4.82%. 128 was not
        kept: in ``benchmarks/streaming.py`` (simulated real time) it took the 80 s file from
        3.4% to 5.4% and the joined clips from 5.4% to 7.6% for 20% less encoder time per call.
        Without the VAD: 512 4.43%, 256 4.30%. Encoder ms per decode in
        ``benchmarks/streaming.py``: 81 (512), 81 (384: the tail also holds the 50-100 pending
        frames), 53 (256). Without the shared far part a 256-frame tail gave 9.6% on the 20
        short clips.
      streaming: the decode and commit options shared with the re-encoding recognizer.
    """

    chunk_frames: int = 50
    lookahead_frames: int = 25
    tail_frames: int = 512
    first_chunk_frames: int = 150
    tail_precision: Optional[str] = "auto"
    near_tail_frames: Optional[int] = 256
    streaming: StreamingOptions = StreamingOptions()

    def __post_init__(self) -> None:
        if self.chunk_frames < 1 or self.lookahead_frames < 0 or self.tail_frames < 1 or self.first_chunk_frames < 1:
            raise ValueError("chunk_frames, first_chunk_frames and tail_frames must be >= 1, lookahead_frames >= 0")
        if self.near_tail_frames is not None and self.near_tail_frames < 0:
            raise ValueError("near_tail_frames must be >= 0")

    def encoder_options(self) -> StreamingEncoderOptions:
        """The streaming encoder's options (its automatic trim is a backstop the recognizer never reaches)."""
        return StreamingEncoderOptions(
            chunk_frames=self.chunk_frames, lookahead_frames=self.lookahead_frames, tail_frames=self.tail_frames,
            trim_keep_frames=0, first_chunk_frames=self.first_chunk_frames, tail_precision=self.tail_precision,
            near_tail_frames=self.near_tail_frames,
        )

    def encoded_frames(self, n_final: int) -> int:
        """Frames the encoder steps computed to make ``n_final`` frames final: each chunk plus its lookahead."""
        if n_final <= 0:
            return 0
        steps = 1 + max(0, n_final - self.first_chunk_frames) // self.chunk_frames
        return n_final + steps * self.lookahead_frames


# Decoder cross-attention K/V of a model's shared padding states: per decoder, per padding tensor
# (by id; the entry holds the tensor, so the id stays its own).
_padding_keys_values: "weakref.WeakKeyDictionary[nn.Module, dict[int, tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]]]" = (
    weakref.WeakKeyDictionary()
)
_padding_lock = threading.Lock()


def padding_keys_values(model: Whisper, padding: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every decoder layer's cross-attention K/V ``(1, H, T, d)`` of ``padding`` (the shared
    :func:`~burble.asr.whisper.streaming_encoder.padding_encoding`'s states), projected once and shared."""
    with _padding_lock:
        entry = _padding_keys_values.setdefault(model.decoder, {}).get(id(padding))
    if entry is None:
        with torch.inference_mode():
            entry = (padding, model.decoder.cross_kv(padding))
        with _padding_lock:
            entry = _padding_keys_values[model.decoder].setdefault(id(padding), entry)
    return entry[1]


class CrossKeysValues:
    """The decoder's cross-attention keys/values of one stream's audio features, per layer.

    The features are the encoder state's final frames (never recomputed until a trim or a new
    state) followed by a padding tail that changes every decode. Only the final frames' K/V are
    kept, in per-layer buffers, extended by the frames that became final since
    the last decode. A decode gets each layer's K/V in three segments
    (:class:`~burble.kernels.attention.KeyValueSegments`, attended to as one sequence): views of
    those buffers, the tail's own frames projected for this decode alone, and the tail's shared
    padding frames, views of :func:`padding_keys_values` (projected once per model). So between
    decodes a stream holds the K/V of its final frames only: a tail's (~600 frames, ~7 MB for
    tiny.en) live as long as its decode, not as long as the stream. The segments stay valid until
    the stream's next decode, so a compute engine can decode many streams' windows in one batch,
    each row reading its K/V where its stream keeps them (no copy into a batch).

    Args:
      model: the Whisper model whose decoder attends to the features.
      max_frames: the position budget (content + tail never exceed it); the buffers hold that
        many positions, uninitialised, resident only once written (as the encoder state's, see
        :meth:`~burble.asr.whisper.streaming_encoder.StreamingEncoder.new_state`).
      padding: the shared padding states a tail's last frames may come from (``None``: none).
    """

    def __init__(self, model: Whisper, max_frames: int, padding: Optional[torch.Tensor] = None) -> None:
        self.blocks = [block.cross_attn for block in model.decoder.blocks]
        dims = model.dims
        weight = model.decoder.token_embedding.weight
        self.buffers = KVCache.allocate(
            num_layers=len(self.blocks), batch_size=1, num_heads=dims.n_text_head,
            head_dim=dims.n_text_state // dims.n_text_head, max_length=max_frames,
            dtype=weight.dtype, device=weight.device,
        )
        self._padding = None if padding is None else padding_keys_values(model, padding)
        # Which state the buffers belong to, without keeping a replaced state (and its caches) alive.
        self._state: Callable[[], Optional[EncoderState]] = lambda: None
        self._offset = 0
        self.length = 0  # final frames whose K/V are in the buffers

    @torch.inference_mode()
    def of(self, state: EncoderState, features: torch.Tensor, shared_frames: int = 0) -> list[KeyValueSegments]:
        """K/V of ``features`` (``state``'s final frames, then a tail), per layer in segments of ``(1, H, T_i, d)``.

        The last ``shared_frames`` features must be the shared padding states at their positions.
        """
        if state is not self._state() or state.offset != self._offset or state.n_final < self.length:
            self._state, self._offset, self.length = weakref.ref(state), state.offset, 0  # a trim or a new state
        final, total = state.n_final, features.shape[1]
        own = total - shared_frames  # features projected here
        if features.shape[0] != 1 or total > self.buffers.max_length or not final <= own <= total:
            raise ValueError(f"features {tuple(features.shape)} do not fit one stream's {self.buffers.max_length} positions")
        if shared_frames and self._padding is None:
            raise ValueError("shared padding frames need the padding states (CrossKeysValues(padding=...))")
        new = features[:, self.length : final]  # frames that became final since the last call
        tail = features[:, final:own]
        layers = []
        for i, block in enumerate(self.blocks):
            parts = [self.buffers.write(i, self.length, *block.project_kv(new))] if final else []
            if own > final:  # contiguous: the scores' matmul reads every key of every head
                parts.append(tuple(t.contiguous() for t in block.project_kv(tail)))
            if shared_frames:
                k, v = self._padding[i]  # type: ignore[index]
                parts.append((k[:, :, own:total], v[:, :, own:total]))
            layers.append(KeyValueSegments(tuple(parts)))
        self.length = final
        return layers


@dataclass
class CacheAwareStats(RecognizerStats):
    """:class:`RecognizerStats` plus where the encoder's work goes.

    Attributes:
      encoder_frames: encoder frames computed by steps (each chunk's ``C + R``).
      tail_frames: encoder frames computed for padding tails (pending received frames + the padding
        encoded per decode; the shared padding is not counted).
      trim_frames: encoder frames re-encoded by trims (the frames that stayed, with lookahead).
      encoder_seconds: time in the frontend and encoder steps.
      tail_seconds: time computing padding tails.
      trim_seconds: time in encoder trims.
      peak_position: the highest encoder position used (must stay below 1500).
    """

    encoder_frames: int = 0
    tail_frames: int = 0
    trim_frames: int = 0
    encoder_seconds: float = 0.0
    tail_seconds: float = 0.0
    trim_seconds: float = 0.0
    peak_position: int = -1


class CacheAwareWhisperRecognizer(WhisperStreamingRecognizer):
    """The :class:`~burble.streaming.stages.Recognizer` over a cached block-causal encoder.

    One instance per stream; the model may be shared by many.

    Args:
      asr: the loaded recogniser (``burble.load_model(...)``).
      options: encoder chunking and the shared streaming options.
    """

    def __init__(self, asr: WhisperASR, options: CacheAwareOptions = CacheAwareOptions()) -> None:
        super().__init__(asr, options.streaming)
        self.cache_options = options
        self.stats: CacheAwareStats = CacheAwareStats()
        self.encoder = StreamingEncoder(asr.model, options.encoder_options())
        # The window may not outgrow the encoder's positions: received frames + tail < 1500.
        self._max_window_samples = (self.encoder.capacity - 2 * options.chunk_frames - options.lookahead_frames) * SAMPLES_PER_FRAME
        self._frontend = StreamingLogMel(StreamingLogMelOptions(n_mels=asr.model.dims.n_mels))
        self._state = self.encoder.new_state()
        self._cross = self._new_cross()
        self._shared_frames = 0  # the last tail's shared padding frames

    # -- Recognizer protocol -------------------------------------------------------------------

    def _append(self, audio: np.ndarray, start_sample: int) -> None:
        """Add audio starting at absolute ``start_sample`` to the window and encode its new chunks."""
        audio = np.asarray(audio, dtype=np.float32)
        end = self._window_start + len(self._audio)
        if not len(self._audio) and not self._frontend.n_samples:
            self._window_start = end = start_sample
        elif start_sample < end:
            audio = audio[end - start_sample :]  # overlap: keep only new samples
        self.stats.audio_seconds += len(audio) / SAMPLE_RATE
        if start_sample > end:
            # A short gap inside an utterance (VAD dropped a pause): keep the time axis by padding.
            audio = np.concatenate([np.zeros(start_sample - end, np.float32), audio])
        # Pieces of at most one window bound, each trimmed for before it is pushed, so the
        # encoder never runs out of positions (its own automatic trim would desync the window).
        for begin in range(0, len(audio), self._max_window_samples // 2):
            piece = audio[begin : begin + self._max_window_samples // 2]
            overflow = len(self._audio) + len(piece) - self._max_window_samples
            if overflow > 0:  # cut the oldest audio, as the re-encoding recognizer does past 29 s
                self._trim_to(self._window_start + overflow + SAMPLES_PER_FRAME)
            self._audio = np.concatenate([self._audio, piece])
            self._push(piece)

    def endpoint(self, at_sample: int) -> list[StreamEvent]:
        """The utterance ended: commit everything, then start a fresh frontend and encoder state."""
        events = super().endpoint(at_sample)
        self._frontend.reset()
        # Fresh, unwritten storage: the last utterance's goes back to the allocator (to the OS in `burble serve`).
        self._state = self.encoder.new_state()
        self._cross = self._new_cross()
        return events

    # -- internals -----------------------------------------------------------------------------

    def _new_cross(self) -> CrossKeysValues:
        shares = self.encoder.options.near_tail_frames is not None
        padding = padding_encoding(self.encoder).states if shares else None
        return CrossKeysValues(self.asr.model, self.encoder.max_frames, padding)

    @property
    def encoder_state(self) -> EncoderState:
        """The stream's encoder state (positions since the window start)."""
        return self._state

    def _push(self, audio: np.ndarray) -> None:
        """Frontend and encoder over the new samples: only the chunks that became final are encoded."""
        started = time.perf_counter()
        mel = self._frontend.push(audio)
        before = self._state.n_final
        output = self.encoder.step(self._state, mel)
        # The window bound in accept keeps the encoder's own automatic trim from ever running: it
        # would move position 0 away from the window start.
        assert output.trimmed == 0, "the encoder trimmed by itself; window and positions disagree"
        options = self.cache_options
        self.stats.encoder_frames += options.encoded_frames(self._state.n_final) - options.encoded_frames(before)
        self.stats.encoder_seconds += time.perf_counter() - started
        self._note_position()

    def _encode(self) -> tuple[torch.Tensor, int]:
        """The decoder's features (cached content + padding tail) and the window's real mel frames."""
        started = time.perf_counter()
        state = self._state
        tail = self.encoder.padding_tail(state)
        features = torch.cat([state.final_states(), tail.states], dim=1)
        self._shared_frames = tail.shared_frames
        self.stats.tail_frames += tail.states.shape[1] - tail.shared_frames
        self.stats.tail_seconds += time.perf_counter() - started
        self._note_position()
        # The window's samples have mel frames up to len // 160 (the frontend holds the last
        # <= 200 samples back); alignment reads encoder frames of the received audio only.
        frames = min(len(self._audio) // HOP_LENGTH, 2 * state.n_received)
        return features, frames

    def _cross_kv(self, features: torch.Tensor) -> list[KeyValueSegments]:
        """The decoder's cross-attention K/V of ``features`` (views of this stream's buffers, see :class:`CrossKeysValues`)."""
        return self._cross.of(self._state, features, self._shared_frames)

    def _cross_source(self, features: torch.Tensor) -> Optional[CrossKeysValuesOf]:
        return functools.partial(self._cross_kv, features)

    def _trim_to(self, sample: int) -> None:
        """Trim the window and the encoder state together, on the encoder's frame grid."""
        frames = max(0, sample - self._window_start) // SAMPLES_PER_FRAME
        frames = min(frames, self._state.n_received)
        if frames <= 0:
            return
        super()._trim_to(self._window_start + frames * SAMPLES_PER_FRAME)
        started = time.perf_counter()
        self.encoder.trim(self._state, frames)
        self.stats.trim_frames += self.cache_options.encoded_frames(self._state.n_final)
        self.stats.trim_seconds += time.perf_counter() - started

    def _note_position(self) -> None:
        self.stats.peak_position = max(self.stats.peak_position, self._state.peak_position)
