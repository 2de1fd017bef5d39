"""Whisper's audio encoder run block-causally over a stream, with per-layer K/V caches.

Whisper's encoder attends over a whole 30 s window, so the re-encoding streaming path pays for
1500 frames on every chunk. Here the encoder runs *block-causally*: the stream is cut into chunks
of ``C`` encoder frames (20 ms each); a chunk attends to every earlier (cached) frame, to itself
and to ``R`` frames of lookahead. Once computed, a chunk's per-layer keys and values are cached
and never recomputed; the lookahead frames are computed with the chunk (they attend to the cache,
the chunk and each other) but are not cached: the next step recomputes them as part of its own
chunk. The cost of a step therefore grows with the new audio, not with the window.

Frame bookkeeping. Encoder frame ``t`` is ``conv2`` (kernel 3, stride 2) over ``conv1`` outputs
``2t-1 .. 2t+1``, i.e. over mel frames ``2t-2 .. 2t+2``. A frame is *conv-ready* once mel frame
``2t+2`` has arrived, and each step recomputes the convolutions of its frames from the retained mel
(2 frames of left context, 1 of right context per ``conv1`` output), so streaming states equal the
full-sequence convolution exactly, including Whisper's zero padding at the start of the stream.

The decoder still needs Whisper's 30 s layout (content, then the encoder states of zero-mel
padding; without them it hallucinates). :meth:`StreamingEncoder.padding_tail` encodes the frames
after the cached content: the received frames that are not final yet, then "virtual" zero-mel
frames; they attend to the cache and to each other and nothing of them is cached. Only the
padding near the content depends on it much: with ``near_tail_frames`` set, the padding beyond
that many frames is not encoded per decode but read from :func:`padding_encoding`, the encoding
of padding alone, made once per model and shared by every stream (its states, and its keys and
values, which the near frames attend to as they would to the far frames of a tail encoded whole).

Positions. Whisper's positional embeddings are absolute and stop at 1500 frames, so a stream's
positions count frames since its last trim. The rule (see :meth:`StreamingEncoder.trim`):

* a caller (the recognizer) trims at points of its choosing: segment ends, VAD endpoints;
* as a backstop, a step that would push ``received frames + tail_frames`` past ``max_frames``
  first trims automatically, keeping the last ``trim_keep_frames`` final frames (cut on the chunk
  grid, so no final frame becomes pending again);
* a trim drops the frames before the cut and re-encodes what stays from the retained mel, as a
  fresh stream starting there (positions from 0, Whisper's left padding, the chunk grid anchored
  at the cut). The state after ``trim(state, k)`` is therefore the state a new stream fed with the
  mel from frame ``k`` on would have.

The exact reference for tests is :func:`burble.asr.whisper.block_causal.encode_block_causal`: one pass over the whole sequence with
the block-causal mask, the lookahead frames as Emformer-style right-context copies per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Optional, Union

import copy
import threading
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from burble.asr.frontend import TIME_PER_AUDIO_TOKEN
from burble.asr.whisper.model import AudioEncoder, ResidualAttentionBlock, Whisper
from burble.decoding.kv_cache import KVCache, thread_scratch
from burble.kernels.attention import attention
from burble.precision import native_bfloat16, torch_dtype

TailLength = Union[int, Literal["full"]]


@dataclass(frozen=True)
class StreamingEncoderOptions:
    """How a stream is cut and padded (all lengths in encoder frames of 20 ms).

    Args:
      chunk_frames: ``C``, frames finalised per chunk (50 = 1 s).
      lookahead_frames: ``R``, future frames each chunk sees (0, 12 = 0.24 s, 24 = 0.48 s...).
      tail_frames: zero-mel padding frames the decoder's features end with (256 = 5.12 s was
        enough on the dev clips; fewer loop on some). Also reserved in the position budget.
      max_frames: the position budget; ``None`` is the model's ``n_audio_ctx`` (1500).
      trim_keep_frames: final frames an automatic trim keeps (the backstop rule above).
      first_chunk_frames: the size of the first chunk after a new state or a trim (``None``:
        ``chunk_frames``). A stream that starts on speech (a VAD utterance, a trim at a sentence
        end) needs more context for its first word than one chunk and its lookahead give: with
        C = 1 s, R = 0.5 s tiny.en heard JFK's "Ask not" as "S-not" and "What your country" as
        "Like your country"; a 3 s first chunk got both right. The frames stay pending (in the
        tail, encoded every decode) until the first chunk is final, so this costs no latency.
      tail_precision: the dtype the padding tail is encoded in: ``None`` is the model's (exact),
        ``"auto"`` is bfloat16 for a float32 model on a CPU with native bfloat16 (the model's
        dtype elsewhere), or a precision name (``"bfloat16"``). The tail is half of a decode's
        cost and only tells the decoder where the audio ends; bfloat16 linears run ~2.4x faster
        on such CPUs (see :func:`tail_dtype`).
      near_tail_frames: of the padding frames, how many are encoded against the stream (``None``:
        all); the rest are the shared :func:`padding_encoding` at the same positions, whose
        keys/values the near frames also attend to (the far padding depends little on the
        content: its states have cosine ~0.9 to the encoded ones past ~150 frames, 0.43 in the
        first 100). The tail's linear layers shrink with it. Measured in ``CacheAwareOptions``.
    """

    chunk_frames: int = 50
    lookahead_frames: int = 0
    tail_frames: int = 256
    max_frames: Optional[int] = None
    trim_keep_frames: int = 500
    first_chunk_frames: Optional[int] = None
    tail_precision: Optional[str] = None
    near_tail_frames: Optional[int] = None

    def chunk_at(self, n_final: int) -> int:
        """Frames of the chunk that starts after ``n_final`` final frames."""
        if n_final == 0 and self.first_chunk_frames is not None:
            return self.first_chunk_frames
        return self.chunk_frames

    @classmethod
    def from_seconds(cls, chunk: float = 1.0, lookahead: float = 0.0, tail: float = 5.12, **kwargs: int) -> "StreamingEncoderOptions":
        """Options from durations in seconds, rounded to whole 20 ms frames."""
        frames = lambda seconds: int(round(seconds / TIME_PER_AUDIO_TOKEN))  # noqa: E731
        return cls(chunk_frames=frames(chunk), lookahead_frames=frames(lookahead), tail_frames=frames(tail), **kwargs)


@dataclass
class EncoderState:
    """One stream's (or several lockstep streams') encoder state; made by :meth:`StreamingEncoder.new_state`.

    Attributes:
      mel: ``(B, n_mels, capacity)`` buffer of the mel since the last trim; ``[:, :, :n_mel]`` is valid.
        It is kept whole because a trim re-encodes from it, and steps read their conv context from it.
      n_mel: mel frames received since the last trim.
      cache: per-layer self-attention K/V of the final frames (``cache.length`` of them); slots past
        the length hold the last step's lookahead frames and are overwritten (a tail's K/V go to
        a per-thread scratch).
      content: ``(B, max_frames, D)`` buffer of the final frames' encoder output (after ``ln_post``).
      offset: absolute encoder frame (since the stream began) of position 0.
      peak_position: the highest position ever encoded (tails included), for checks and metrics.
    """

    mel: torch.Tensor
    n_mel: int
    cache: KVCache
    content: torch.Tensor
    offset: int = 0
    peak_position: int = -1

    @property
    def n_final(self) -> int:
        """Final (cached) frames since the last trim."""
        return self.cache.length

    @property
    def n_received(self) -> int:
        """Encoder frames the received mel covers (final, lookahead and not yet conv-ready)."""
        return (self.n_mel + 1) // 2

    @property
    def batch_size(self) -> int:
        return self.mel.shape[0]

    def final_states(self) -> torch.Tensor:
        """``(B, n_final, D)`` encoder output of the cached content."""
        return self.content[:, : self.n_final]


@dataclass(frozen=True)
class EncoderOutput:
    """Encoder states of a span of positions ``[start, start + states.shape[1])``.

    Attributes:
      states: ``(B, T, D)`` encoder output (after ``ln_post``).
      start: position of the first state (since the last trim).
      layers: with ``return_layers``, each block's output ``(B, T, D)`` (before ``ln_post``).
      trimmed: frames an automatic trim dropped during this call (positions shifted by that much).
      shared_frames: the last states that are the shared :func:`padding_encoding`'s (a padding
        tail's far part), not encoded for this stream.
    """

    states: torch.Tensor
    start: int
    layers: Optional[list[torch.Tensor]] = None
    trimmed: int = 0
    shared_frames: int = 0


def conv_ready_frames(n_mel: int) -> int:
    """Encoder frames whose receptive field (mel ``2t-2 .. 2t+2``) lies within ``n_mel`` frames."""
    return max(0, (n_mel - 1) // 2)


def encoder_of(model: Union[Whisper, AudioEncoder]) -> AudioEncoder:
    return model.encoder if isinstance(model, Whisper) else model


def tail_dtype(precision: Optional[str], model_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype a padding tail is encoded in (see ``StreamingEncoderOptions.tail_precision``).

    ``"auto"`` picks bfloat16 only where it is fast: a float32 model on a CPU whose oneDNN has
    native bfloat16 (AVX512-BF16 or AMX). Without it bfloat16 is emulated and many times slower.
    """
    if precision is None:
        return model_dtype
    if precision == "auto":
        return torch.bfloat16 if model_dtype == torch.float32 and native_bfloat16(device) else model_dtype
    return torch_dtype(precision)


# The encoder blocks in a tail dtype, one copy per encoder module (every stream of a model shares it).
_tail_blocks: "weakref.WeakKeyDictionary[AudioEncoder, dict[torch.dtype, nn.ModuleList]]" = weakref.WeakKeyDictionary()
_tail_blocks_lock = threading.Lock()


def blocks_in(encoder: AudioEncoder, dtype: torch.dtype) -> nn.ModuleList:
    """``encoder.blocks`` in ``dtype``: the blocks themselves, or a copy made once and shared."""
    if encoder.conv1.weight.dtype == dtype:
        return encoder.blocks
    with _tail_blocks_lock:
        copies = _tail_blocks.setdefault(encoder, {})
        if dtype not in copies:
            copies[dtype] = copy.deepcopy(encoder.blocks).to(dtype).eval()
        return copies[dtype]


# The encoding of padding alone, per encoder module and (tail dtype, positions): shared by every stream.
_padding: "weakref.WeakKeyDictionary[AudioEncoder, dict[tuple[torch.dtype, int], PaddingEncoding]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class PaddingEncoding:
    """A stream that received nothing, padded to every position: its states ``(1, max_frames, D)``
    and each block's self-attention keys and values ``(1, H, max_frames, d)`` (in the tail dtype)."""

    states: torch.Tensor
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


def padding_encoding(encoder: "StreamingEncoder") -> PaddingEncoding:
    """The encoding of padding alone, computed once per model, tail dtype and position budget
    (~0.3 s and ~12 MB for tiny.en), then shared: a padding tail's far part (``near_tail_frames``)
    reads its states and its keys/values from here."""
    key = (encoder.tail_dtype, encoder.max_frames)
    with _tail_blocks_lock:
        cached = _padding.setdefault(encoder.encoder, {}).get(key)
    if cached is None:
        state = encoder.new_state()
        frames = encoder.max_frames
        states = encoder.padding_tail(state, frames, near_frames=frames).states
        # The tail's K/V are still in this thread's scratch (the same one padding_tail used).
        scratch = thread_scratch("streaming-encoder-tail", state.cache, frames, dtype=encoder.tail_dtype)
        cached = PaddingEncoding(
            states=states,
            keys=[k[:, :, :frames].clone() for k in scratch.keys],
            values=[v[:, :, :frames].clone() for v in scratch.values],
        )
        with _tail_blocks_lock:
            cached = _padding[encoder.encoder].setdefault(key, cached)
    return cached


def encoder_block(
    block: ResidualAttentionBlock,
    x: torch.Tensor,
    keys_values: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """One encoder block, as ``ResidualAttentionBlock.forward_encoder``, with the attended K/V
    supplied by ``keys_values(k, v)`` (the cache in streaming, identity in the masked reference)."""
    attn = block.attn
    h = block.attn_ln(x)
    q, k, v = (attn.split_heads(p(h)) for p in (attn.query, attn.key, attn.value))
    k, v = keys_values(k, v)
    x = x + attn.out(attn.merge_heads(attention(q, k, v, mask=mask)))
    return x + block.mlp(block.mlp_ln(x))


def _conv_frames(encoder: AudioEncoder, mel: torch.Tensor, n_mel: int, start: int, end: int) -> torch.Tensor:
    """``gelu(conv2(gelu(conv1(mel))))`` for encoder frames ``[start, end)`` as ``(B, T, D)``.

    Mel frames outside ``[0, n_mel)`` count as zeros (Whisper's padding of the 30 s window, and
    conv1's own zero padding); conv2's left padding is a zero *conv1 output*, not conv1 of zero mel,
    so that position is zeroed after conv1.
    """
    low, high = 2 * start - 2, 2 * end + 1  # mel frames 2t-2 .. 2t+2 of every frame t in range
    piece = mel[:, :, max(low, 0) : min(high, n_mel)]
    piece = F.pad(piece, (max(0, -low), max(0, high - n_mel)))
    hidden = F.gelu(F.conv1d(piece, encoder.conv1.weight, encoder.conv1.bias))  # conv1 outputs 2start-1 .. 2end-1
    if start == 0:
        hidden[:, :, 0] = 0
    out = F.gelu(F.conv1d(hidden, encoder.conv2.weight, encoder.conv2.bias, stride=2))
    return out.transpose(1, 2)


class StreamingEncoder:
    """Block-causal streaming over a loaded Whisper encoder's own modules (weights are shared).

    Args:
      model: a ``Whisper`` model or its ``AudioEncoder``.
      options: chunking, lookahead, tail and position budget.

    Usage::

        encoder = StreamingEncoder(asr.model, StreamingEncoderOptions.from_seconds(1.0, 0.48))
        state = encoder.new_state()
        for mel_piece in mel_pieces:            # (n_mels, n) log-mel frames, any n
            new = encoder.step(state, mel_piece) # states of the frames that became final
            features = encoder.audio_features(state)  # content + tail, for the decoder
    """

    def __init__(self, model: Union[Whisper, AudioEncoder], options: Optional[StreamingEncoderOptions] = None) -> None:
        self.encoder = encoder_of(model)
        self.options = options or StreamingEncoderOptions()
        o = self.options
        n_ctx = self.encoder.positional_embedding.shape[0]
        self.max_frames = o.max_frames or n_ctx
        if self.max_frames > n_ctx:
            raise ValueError(f"max_frames {self.max_frames} exceeds the encoder's {n_ctx} positions")
        if o.chunk_frames < 1 or o.lookahead_frames < 0 or o.tail_frames < 0:
            raise ValueError("chunk_frames must be >= 1, lookahead_frames and tail_frames >= 0")
        if o.first_chunk_frames is not None and o.first_chunk_frames < 1:
            raise ValueError("first_chunk_frames must be >= 1")
        if o.near_tail_frames is not None and o.near_tail_frames < 0:
            raise ValueError("near_tail_frames must be >= 0")
        # Frames a stream may receive before it must trim: the tail's positions are reserved.
        self.capacity = self.max_frames - o.tail_frames
        # An automatic trim must free at least one chunk (see the module docstring's rule): at
        # overflow at least capacity - 2C - R frames are final.
        first = o.chunk_at(0)
        if o.trim_keep_frames < 0 or o.trim_keep_frames > self.capacity - 2 * o.chunk_frames - max(first, o.chunk_frames) - o.lookahead_frames:
            raise ValueError(
                f"trim_keep_frames={o.trim_keep_frames} leaves no room to trim within {self.capacity} frames "
                f"(chunk {o.chunk_frames}, lookahead {o.lookahead_frames})"
            )
        weight = self.encoder.conv1.weight
        self.dtype, self.device = weight.dtype, weight.device
        self.tail_dtype = tail_dtype(o.tail_precision, self.dtype, self.device)
        self.n_mels = weight.shape[1]
        block = self.encoder.blocks[0]
        self.n_state = self.encoder.positional_embedding.shape[1]
        self.n_head = block.attn.n_head

    def new_state(self, batch_size: int = 1) -> EncoderState:
        """A fresh stream (``batch_size`` streams fed in lockstep share one state).

        Its storage holds every position at once, uninitialised (only ``[:n_mel]`` and
        ``[:n_final]`` are ever read): blocks this size (a layer's keys: 2.3 MB for tiny.en in
        float32) are the kernel's pages (glibc's mmap; ``burble serve`` fixes its threshold at 1
        MiB, ``burble.heap``), resident only once written, so a stream holds the memory of its
        window, not of 30 s. K/V storage that started at the first chunk and grew with the window
        (``KVCache``'s ``initial_length``) was reallocated and copied as it grew, and its sub-MiB
        blocks fragmented glibc's heap: 4.3 MiB more per added server stream
        (``benchmarks/server_load.py``, 8 vs 1 clients, 2026-12-05).
        """
        cache = KVCache.allocate(
            num_layers=len(self.encoder.blocks),
            batch_size=batch_size,
            num_heads=self.n_head,
            head_dim=self.n_state // self.n_head,
            max_length=self.max_frames,
            dtype=self.dtype,
            device=self.device,
        )
        # The mel and the content share one block: the mel alone (0.6 MB for tiny.en in float32) is
        # below that threshold, and a stream would take it from the heap and leave a hole there at
        # every endpoint (15.3 against 17.0 MiB per added server stream, 2026-12-05).
        mel_size = self.n_mels * 2 * self.capacity
        block = torch.empty(batch_size, mel_size + self.max_frames * self.n_state, dtype=self.dtype, device=self.device)
        mel = block[:, :mel_size].unflatten(1, (self.n_mels, 2 * self.capacity))
        content = block[:, mel_size:].unflatten(1, (self.max_frames, self.n_state))
        return EncoderState(mel=mel, n_mel=0, cache=cache, content=content)

    # -- streaming -------------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self, state: EncoderState, new_mel: torch.Tensor, *, return_layers: bool = False) -> EncoderOutput:
        """Append log-mel frames and encode every chunk that became final.

        Args:
          state: the stream's state (updated in place).
          new_mel: ``(n_mels, n)`` or ``(B, n_mels, n)`` frames, any ``n`` (including 0).
          return_layers: also return each block's output for the new final frames.

        Returns:
          The states of the frames that became final, from position ``start``. If an automatic
          trim ran, ``trimmed`` says how many frames it dropped and positions refer to after it.
        """
        mel = self._as_batch(new_mel, state.batch_size)
        trimmed, first = 0, state.n_final
        pieces: list[EncoderOutput] = []
        taken = 0
        while taken < mel.shape[-1]:
            room = 2 * self.capacity - state.n_mel
            if room == 0:
                keep_from = self._auto_trim_point(state)
                self.trim(state, keep_from)
                trimmed += keep_from
                first, pieces = state.n_final, []  # earlier pieces are re-encoded at new positions
                continue
            count = min(room, mel.shape[-1] - taken)
            state.mel[:, :, state.n_mel : state.n_mel + count] = mel[:, :, taken : taken + count]
            state.n_mel += count
            taken += count
            pieces.extend(self._encode_ready(state, return_layers))
        return self._joined(pieces, first, trimmed, state, return_layers)

    @torch.inference_mode()
    def padding_tail(
        self, state: EncoderState, n_frames: Optional[TailLength] = None, *, return_layers: bool = False,
        near_frames: Optional[int] = None,
    ) -> EncoderOutput:
        """States of everything after the cached content: pending received frames, then zero-mel frames.

        The pending frames and the first ``near_frames`` padding frames attend to the cache, to
        each other and to the far padding frames; nothing of them is cached. The far padding
        frames are the shared :func:`padding_encoding` at the same positions (its keys/values
        for that attention, its states in the output; ``shared_frames`` says how many).

        Args:
          state: the stream's state (its cache slots past ``n_final`` are used as scratch).
          n_frames: zero-mel padding frames after the received ones; ``None`` is
            ``options.tail_frames``, ``"full"`` pads to ``max_frames`` (Whisper's whole 30 s layout).
          return_layers: also return each block's output (only for a tail without shared frames).
          near_frames: padding frames encoded against the stream; ``None`` is
            ``options.near_tail_frames`` (``None`` there: all).

        Raises:
          ValueError: the tail would exceed the position budget.
        """
        received = state.n_received
        pad = self.options.tail_frames if n_frames is None else (self.max_frames - received if n_frames == "full" else n_frames)
        if pad < 0 or received + pad > self.max_frames:
            raise ValueError(f"{received} received + {pad} tail frames exceed {self.max_frames} positions")
        near = self.options.near_tail_frames if near_frames is None else near_frames
        near = pad if near is None else min(pad, near)
        if return_layers and near < pad:
            raise ValueError("the shared padding states keep no layers: pass near_frames >= the tail")
        # The tail's K/V live in this thread's scratch, after a copy of the content's: a stream's
        # own cache holds only its final frames (and a chunk's lookahead) between calls, so an
        # added stream costs its window's memory, not 512 more frames in each of its caches.
        # Before the scratch is taken: the first call computes the padding encoding in it.
        padding = padding_encoding(self) if near < pad else None
        scratch = thread_scratch("streaming-encoder-tail", state.cache, received + pad, dtype=self.tail_dtype)
        scratch.load_prefix(state.cache, state.n_final)
        if padding is not None:  # the near frames also attend to the far ones, as in a tail encoded whole
            for layer, (k, v) in enumerate(zip(padding.keys, padding.values)):
                far = slice(received + near, received + pad)
                scratch.write(layer, far.start, k[:, :, far].expand(state.batch_size, -1, -1, -1), v[:, :, far].expand(state.batch_size, -1, -1, -1))
        output = self._encode_span(state, state.n_final, received + near, cache_frames=0, return_layers=return_layers,
                                   cache=scratch, dtype=self.tail_dtype, attend_until=received + pad)
        if near == pad:
            return output
        assert padding is not None
        shared = padding.states[:, received + near : received + pad]
        states = torch.cat([output.states, shared.expand(state.batch_size, -1, -1)], dim=1)
        state.peak_position = max(state.peak_position, received + pad - 1)
        return EncoderOutput(states=states, start=output.start, shared_frames=pad - near)

    def audio_features(self, state: EncoderState, tail_frames: Optional[TailLength] = None) -> torch.Tensor:
        """The decoder's audio features: cached content followed by :meth:`padding_tail`, ``(B, T, D)``."""
        tail = self.padding_tail(state, tail_frames).states
        return torch.cat([state.final_states(), tail], dim=1)

    @torch.inference_mode()
    def trim(self, state: EncoderState, keep_from_frame: int) -> None:
        """Drop the frames before ``keep_from_frame`` and re-encode what stays from the kept mel.

        Afterwards the state equals that of a fresh stream fed with the mel from encoder frame
        ``keep_from_frame`` on (mel frame ``2 * keep_from_frame``): positions restart at 0 and the
        chunk grid is anchored at the cut. Cutting on the chunk grid (a multiple of
        ``chunk_frames``) keeps every final frame final; elsewhere up to ``chunk_frames - 1`` of
        them become pending again. ``state.offset`` advances by ``keep_from_frame``.

        Args:
          state: the stream's state (updated in place).
          keep_from_frame: position (since the last trim) of the first frame to keep.
        """
        if not 0 <= keep_from_frame <= state.n_received:
            raise ValueError(f"trim point {keep_from_frame} outside the {state.n_received} received frames")
        cut = min(2 * keep_from_frame, state.n_mel)
        kept = state.n_mel - cut
        state.mel[:, :, :kept] = state.mel[:, :, cut : state.n_mel].clone()
        state.n_mel = kept
        state.cache.truncate(0)
        state.offset += keep_from_frame
        self._encode_ready(state, return_layers=False)

    # -- internals -------------------------------------------------------------------------------

    def _as_batch(self, mel: torch.Tensor, batch_size: int) -> torch.Tensor:
        if mel.dim() == 2:
            mel = mel.unsqueeze(0)
        if mel.dim() != 3 or mel.shape[0] != batch_size or mel.shape[1] != self.n_mels:
            raise ValueError(f"expected mel ({batch_size}, {self.n_mels}, n), got {tuple(mel.shape)}")
        return mel.to(device=self.device, dtype=self.dtype)

    def _auto_trim_point(self, state: EncoderState) -> int:
        chunk, first = self.options.chunk_frames, self.options.chunk_at(0)
        # On the chunk grid: the first chunk, then whole chunks.
        keep_from = first + (state.n_final - self.options.trim_keep_frames - first) // chunk * chunk
        assert keep_from > 0, "options validation guarantees room to trim"
        return keep_from

    def _encode_ready(self, state: EncoderState, return_layers: bool) -> list[EncoderOutput]:
        """Encode every chunk whose frames and lookahead are conv-ready, one chunk per pass.

        Chunks go one at a time (a chunk-level loop, never a frame-level one): each pass is the
        same-shaped tensor program, which is what lets states of several streams stack later.
        """
        lookahead = self.options.lookahead_frames
        ready = conv_ready_frames(state.n_mel)
        outputs: list[EncoderOutput] = []
        while state.n_final + self.options.chunk_at(state.n_final) + lookahead <= ready:
            start, chunk = state.n_final, self.options.chunk_at(state.n_final)
            outputs.append(self._encode_span(state, start, start + chunk + lookahead, chunk, return_layers))
        return outputs

    def _encode_span(
        self, state: EncoderState, start: int, end: int, cache_frames: int, return_layers: bool, cache: Optional[KVCache] = None,
        dtype: Optional[torch.dtype] = None, attend_until: Optional[int] = None,
    ) -> EncoderOutput:
        """Run positions ``[start, end)`` against the cache; keep the first ``cache_frames`` as final.

        ``start`` must be ``state.n_final``. All frames of the span attend to the cache and to the
        whole span (the chunk and its lookahead, or the tail), so no mask is needed. ``cache`` is
        where the span's K/V go (``None``: the state's own; the tail passes a scratch copy).
        ``dtype`` runs the blocks in another precision (the tail's; ``cache`` must hold it); the
        states come back in the model's.
        """
        encoder = self.encoder
        state.peak_position = max(state.peak_position, end - 1)
        x = _conv_frames(encoder, state.mel, state.n_mel, start, end)
        x = x + encoder.positional_embedding[start:end].to(x.dtype)
        layers: list[torch.Tensor] = []
        cache = state.cache if cache is None else cache
        dtype = self.dtype if dtype is None else dtype
        x = x.to(dtype)
        until = end if attend_until is None else attend_until

        def keys_values(k: torch.Tensor, v: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            cache.write(i, start, k, v)
            return cache.keys[i][:, :, :until], cache.values[i][:, :, :until]

        for index, block in enumerate(blocks_in(encoder, dtype)):
            # Lookahead K/V (a tail's, in its scratch copy) land past cache.length: slots the next write overwrites.
            x = encoder_block(block, x, lambda k, v, i=index: keys_values(k, v, i))
            if return_layers:
                layers.append(x[:, :cache_frames] if cache_frames else x)
        out = encoder.ln_post(x.to(self.dtype))
        if cache_frames:
            out = out[:, :cache_frames]
            state.content[:, start : start + cache_frames] = out
            cache.length = start + cache_frames
        return EncoderOutput(states=out, start=start, layers=layers if return_layers else None)

    def _joined(self, pieces: list[EncoderOutput], first: int, trimmed: int, state: EncoderState, return_layers: bool) -> EncoderOutput:
        if not pieces:
            empty = state.content[:, first:first]
            return EncoderOutput(states=empty, start=first, layers=[empty] * len(self.encoder.blocks) if return_layers else None, trimmed=trimmed)
        states = torch.cat([p.states for p in pieces], dim=1)
        layers = None
        if return_layers:
            layers = [torch.cat([p.layers[i] for p in pieces], dim=1) for i in range(len(self.encoder.blocks))]  # type: ignore[index]
        return EncoderOutput(states=states, start=first, layers=layers, trimmed=trimmed)
