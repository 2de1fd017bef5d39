"""Whisper's one-token decoder step at static shapes, replayed from a CUDA graph (gpt-fast style).

A decoder step at batch 1 on a GPU is launch-bound: tiny.en runs dozens of small kernels per
token (a dozen or so per layer), each a few microseconds of work behind Python and launch overhead. Capturing the step
once in a CUDA graph and replaying it removes that overhead, but a graph replays fixed addresses
and fixed shapes. So everything a step touches lives in buffers allocated once: the token ids,
the per-row positions, the KV-cache storage at full capacity (Whisper's 448 text positions), the
cross-attention keys/values, and the outputs. Self-attention reads the whole capacity and masks
each row to its own length (``kv_lengths``, which the Triton decode kernel and the SDPA fallback
both take), instead of slicing the cache to the current length, which would change shapes.

:class:`StaticWhisperTextModel` is an :class:`~burble.decoding.model.AutoregressiveModel` like
:class:`~burble.asr.whisper.model.WhisperTextModel`, so the one decoding loop drives it unchanged:
single-token passes go through the static step (a graph replay on CUDA), and multi-token passes
(the prompt, speculative verification) run the ordinary dynamic forward into the same cache
storage. Beam search reorders cache rows into new storage; those passes then run eagerly (the
graph's storage is no longer the cache's), which stays correct. On CPU the static step runs
eagerly, which is how its equivalence with the dynamic path is tested without a GPU.

The step holds per-decode state, so one :class:`StaticDecoderStep` serves one decode at a time:
:class:`StaticWhisperTextModel` keeps one per thread and batch size.
"""

from __future__ import annotations

import threading
from typing import Optional

import torch

from burble.decoding.kv_cache import KVCache
from burble.kernels.attention import KeysValues, KeyValueSegments, attention
from burble.asr.whisper.model import Whisper, WhisperTextModel


class StaticDecoderStep:
    """One token per row through the whole decoder, every tensor at a fixed address and shape.

    Args:
      model: the Whisper model (its device and dtype are the buffers').
      batch_size: rows per step.
      graph: capture the step in a CUDA graph on first use (CUDA only; ``None``: on CUDA).
    """

    def __init__(self, model: Whisper, batch_size: int, *, graph: Optional[bool] = None) -> None:
        dims = model.dims
        device, dtype = model.device, model.dtype
        self.model = model
        self.batch_size = batch_size
        self.use_graph = device.type == "cuda" if graph is None else graph
        if self.use_graph and device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA model")
        head_dim = dims.n_text_state // dims.n_text_head
        self.cache = KVCache.allocate(
            num_layers=dims.n_text_layer, batch_size=batch_size, num_heads=dims.n_text_head,
            head_dim=head_dim, max_length=dims.n_text_ctx, dtype=dtype, device=device,
        )  # fmt: skip
        # Zeroed (unlike a dynamic cache): a masked position still enters the kernels' arithmetic,
        # and garbage NaNs there would survive a zero softmax weight (0 * NaN = NaN).
        for storage in (*self.cache.keys, *self.cache.values):
            storage.zero_()
        # The graph's storage; beam search's reorder swaps the cache's tensors for new ones.
        self._keys, self._values = list(self.cache.keys), list(self.cache.values)
        cross_shape = (batch_size, dims.n_text_head, dims.n_audio_ctx, head_dim)
        self.cross = [
            (torch.zeros(cross_shape, dtype=dtype, device=device), torch.zeros(cross_shape, dtype=dtype, device=device))
            for _ in range(dims.n_text_layer)
        ]
        self.cache.cross = list(self.cross)
        self.tokens = torch.zeros((batch_size, 1), dtype=torch.long, device=device)
        self.positions = torch.zeros((batch_size,), dtype=torch.long, device=device)
        self.rows = torch.arange(batch_size, device=device)
        self.hidden: Optional[torch.Tensor] = None  # (B, 1, D) final-norm states of the last step
        self.logits: Optional[torch.Tensor] = None  # (B, 1, V) float32
        self._graph: Optional["torch.cuda.CUDAGraph"] = None

    def bind(self, cross: list[KeysValues]) -> KVCache:
        """Copy one decode's cross-attention keys/values in and return the (emptied) cache."""
        if len(cross) != len(self.cross):
            raise ValueError(f"{len(cross)} cross-attention layers for a {len(self.cross)}-layer step")
        for (k_static, v_static), source in zip(self.cross, cross):
            k, v = source.joined() if isinstance(source, KeyValueSegments) else source
            k_static.copy_(k.expand_as(k_static))
            v_static.copy_(v.expand_as(v_static))
        self.cache.keys, self.cache.values = list(self._keys), list(self._values)
        self.cache.cross = list(self.cross)
        self.cache.length = 0
        return self.cache

    def owns(self, cache: KVCache) -> bool:
        """Whether ``cache`` still is this step's storage (beam search may have replaced it)."""
        return cache is self.cache and cache.keys[0] is self._keys[0]

    @torch.inference_mode()
    def run(self) -> None:
        """The step itself: ``self.tokens`` at ``self.positions`` -> ``self.hidden``, ``self.logits``."""
        decoder = self.model.decoder
        x = decoder.token_embedding(self.tokens) + decoder.positional_embedding[self.positions][:, None]
        lengths = self.positions + 1
        for layer, block in enumerate(decoder.blocks):
            h = block.attn_ln(x)
            q = block.attn.split_heads(block.attn.query(h))
            k, v = block.attn.project_kv(h)
            # Row r's new key goes to its own position (rows may differ: the engine's ragged batch).
            self._keys[layer][self.rows, :, self.positions] = k[:, :, 0]
            self._values[layer][self.rows, :, self.positions] = v[:, :, 0]
            out = attention(q, self._keys[layer], self._values[layer], kv_lengths=lengths)
            x = x + block.attn.out(block.attn.merge_heads(out))
            h = block.cross_attn_ln(x)
            q = block.cross_attn.split_heads(block.cross_attn.query(h))
            ck, cv = self.cross[layer]
            x = x + block.cross_attn.out(block.cross_attn.merge_heads(attention(q, ck, cv)))
            x = x + block.mlp(block.mlp_ln(x))
        hidden = decoder.ln(x)
        logits = decoder.project_logits(hidden)
        if self.hidden is None or self.logits is None:
            self.hidden, self.logits = hidden, logits
        else:
            self.hidden.copy_(hidden)
            self.logits.copy_(logits)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor | int) -> torch.Tensor:
        """Run ``tokens`` ``(B, 1)`` at ``positions`` (``(B,)`` or one int); returns logits ``(B, 1, V)``.

        The returned tensor is the step's output buffer: the next step overwrites it.
        """
        self.tokens.copy_(tokens)
        if isinstance(positions, int):
            self.positions.fill_(positions)
        else:
            self.positions.copy_(positions)
        if not self.use_graph:
            self.run()
        elif self._graph is None:
            self._capture()
        else:
            self._graph.replay()
        assert self.logits is not None
        return self.logits

    def _capture(self) -> None:
        """Warm up on a side stream (as CUDA graph capture requires), then capture one step.

        Capture runs the step, so the first call's outputs are real: the warm-up writes the same
        cache positions with the same values.
        """
        stream = torch.cuda.Stream(device=self.tokens.device)
        stream.wait_stream(torch.cuda.current_stream(self.tokens.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.run()
        torch.cuda.current_stream(self.tokens.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.run()
        self._graph = graph
        graph.replay()


class StaticWhisperTextModel(WhisperTextModel):
    """:class:`WhisperTextModel` whose single-token passes run a :class:`StaticDecoderStep`.

    Args:
      model: the Whisper model.
      audio_features: ``(1 or B, 1500, D)`` encoder output.
      steps: the per-thread steps to draw from (:func:`static_steps`; one set per loaded model).
      graph: capture CUDA graphs (``None``: on CUDA).
    """

    def __init__(
        self, model: Whisper, audio_features: torch.Tensor, steps: "StaticSteps", *, graph: Optional[bool] = None,
        cross: Optional[list[KeysValues]] = None,
    ) -> None:
        super().__init__(model, audio_features, cross=cross)
        self._steps = steps
        self._graph = graph
        self._step: Optional[StaticDecoderStep] = None

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        self._step = self._steps.get(self.model, batch_size, graph=self._graph)
        return self._step.bind(self._cross)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        step = self._step
        # A drafter that fuses block outputs (keep_layer_states) reads what only the dynamic pass keeps.
        if tokens.shape[1] != 1 or step is None or not step.owns(cache) or self._kept_layers:
            return super().forward(tokens, cache)
        start = cache.length
        if start >= cache.max_length:
            raise ValueError(f"text context is limited to {cache.max_length} tokens")
        logits = step.step(tokens, start).clone()
        cache.length = start + 1
        assert step.hidden is not None
        self._last_hidden = (start, step.hidden.clone())
        self._last_layers = None
        return logits


class StaticSteps:
    """One :class:`StaticDecoderStep` per (thread, batch size): a step holds one decode's state, and
    the server decodes several streams at once from different threads."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, model: Whisper, batch_size: int, *, graph: Optional[bool] = None) -> StaticDecoderStep:
        steps: dict[int, StaticDecoderStep] = getattr(self._local, "steps", None) or {}
        self._local.steps = steps
        step = steps.get(batch_size)
        if step is None or step.model is not model:
            step = steps[batch_size] = StaticDecoderStep(model, batch_size, graph=graph)
        return step
