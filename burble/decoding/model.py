"""The protocol through which any autoregressive model plugs into the shared decoding core.

ASR (a Whisper text decoder bound to one audio's encoder output) and TTS (a codec language model)
both implement :class:`AutoregressiveModel`; :mod:`burble.decoding.generate` and
:mod:`burble.decoding.beam` never know which one they drive.
"""

from __future__ import annotations

from typing import Protocol

import torch

from burble.decoding.kv_cache import KVCache


class AutoregressiveModel(Protocol):
    """A decoder that extends a KV cache by ``T`` tokens and returns their next-token logits."""

    vocab_size: int

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        """Allocate an empty cache (with any cross-attention state already filled in)."""
        ...

    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run ``tokens`` ``(B, T)`` at positions ``[cache.length, cache.length + T)``.

        Writes their keys/values into ``cache``, advances ``cache.length`` by ``T`` and returns
        float32 logits ``(B, T, V)``: row ``t`` is the distribution of the token after ``tokens[:, t]``.
        """
        ...


class PrefillModel(AutoregressiveModel, Protocol):
    """A model that can extend its cache without projecting every row to the vocabulary.

    A prompt's logits are not needed except at a probe position (Whisper's no-speech
    probability), and projecting each prompt row onto a large vocabulary costs as much as a
    decoding step (tiny.en: 52k x 384 per row). :func:`burble.decoding.generate.prefill` uses this
    method when a model has it and :meth:`AutoregressiveModel.forward` otherwise.
    """

    def prefill(self, tokens: torch.Tensor, cache: KVCache, rows: list[int]) -> torch.Tensor:
        """Like ``forward``, but return logits ``(B, len(rows), V)`` of the given rows of ``tokens`` only."""
        ...


class TreeModel(AutoregressiveModel, Protocol):
    """A model that can score a draft tree in one pass (explicit positions and attention mask)."""

    def forward_tree(self, tokens: torch.Tensor, cache: KVCache, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Like ``forward``, with ``tokens[:, t]`` at absolute position ``positions[t]`` and
        ``mask`` ``(T, cache.length + T)`` (True = attend) instead of the causal mask."""
        ...


class RaggedModel(AutoregressiveModel, Protocol):
    """A model whose batch rows may stand at different lengths (batched speculative decoding:
    each row accepts its own number of drafted tokens)."""

    def forward_rows(self, tokens: torch.Tensor, cache: KVCache, starts: torch.Tensor) -> torch.Tensor:
        """Like ``forward``, with row ``b`` of ``tokens`` at positions ``[starts[b], starts[b] + T)``:
        it attends to its own positions ``[0, starts[b] + t]`` only (whatever the cache holds past
        them is masked). Sets ``cache.length`` to ``max(starts) + T``."""
        ...
