"""Preallocated, position-indexed key/value cache for autoregressive decoders.

The cache holds one ``(B, H, max_length, D)`` key and value tensor per layer. Writing a chunk of
``T`` new positions stores it at ``[length, length + T)``; attention then reads ``[0, length + T)``.
Because positions are indices, rolling back rejected speculative tokens is just ``truncate(n)``
(nothing is copied), and beam search reorders rows with ``reorder(index)``.

Nothing ever reads a position at or beyond ``length + T``: :meth:`KVCache.write` hands attention
views of ``[0, length + T)`` only (SDPA and the Triton kernels see a ``Tk`` of exactly that, and the
kernels mask their loads to ``Tk``). So the storage is allocated uninitialised (``torch.empty``)
and ``reorder`` copies only the filled positions; the rest is garbage that is overwritten before
it is read.

Cross-attention keys/values (computed once from the encoder output) live beside the self-attention
cache in ``cross`` so that a model's state for one request is a single object.

A cache allocated with ``initial_length`` starts that small and grows its storage on demand (in
steps of ``GROWTH_STEP`` positions, at least by a quarter) up to ``max_length``: a per-thread
scratch then holds what the largest call on its thread needed. A long-lived stream's caches are
allocated whole instead (uninitialised blocks that glibc maps, resident only where written; see
``StreamingEncoder.new_state``): growing them fragmented the heap.

:func:`thread_scratch` hands out per-thread caches for K/V that live only within one call (a
streaming decode's padding tail): every stream that runs on a thread shares them, so a stream's own
storage holds only what it keeps between calls.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

import torch

from burble.kernels.attention import KeysValues

GROWTH_STEP = 128  # positions: storage grows in multiples of this


@dataclass
class KVCache:
    """Self-attention cache of a decoder (and its cross-attention keys/values, if any).

    Attributes:
      keys: per layer ``(B, H, capacity, D)`` (``capacity == max_length`` unless the cache grows).
      values: per layer ``(B, H, capacity, D)``.
      length: number of valid positions (the same for every batch row).
      cross: per layer ``(k, v)`` cross-attention tensors ``(B, H, S, D)`` (or batch 1 in
        segments, a stream's: :class:`~burble.kernels.attention.KeyValueSegments`), or empty.
      cross_rows: per row, per layer ``(k, v)`` ``(1, H, S_b, D)`` instead of ``cross`` when the
        rows attend to sources of their own lengths (different streams' audio), each read where
        its stream keeps it; ``None``: ``cross``.
      limit: positions the storage may grow to (``None``: the storage is allocated whole).
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    length: int = 0
    cross: list[KeysValues] = field(default_factory=list)
    cross_rows: Optional[list[list[KeysValues]]] = None
    limit: Optional[int] = None

    @classmethod
    def allocate(
        cls,
        *,
        num_layers: int,
        batch_size: int,
        num_heads: int,
        head_dim: int,
        max_length: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        initial_length: Optional[int] = None,
    ) -> "KVCache":
        """Storage for ``max_length`` positions, or for ``initial_length`` growing on demand to it."""
        grows = initial_length is not None and initial_length < max_length
        shape = (batch_size, num_heads, initial_length if grows else max_length, head_dim)
        # Uninitialised: zero-filling ~1-5 MB per decode was measurable, and no position is read
        # before it is written (see the module docstring).
        keys = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        values = [torch.empty(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        return cls(keys=keys, values=values, limit=max_length if grows else None)

    @property
    def batch_size(self) -> int:
        return self.keys[0].shape[0]

    @property
    def max_length(self) -> int:
        """Positions the cache can hold (its storage may be smaller and grow to it)."""
        return self.limit if self.limit is not None else self.keys[0].shape[2]

    @property
    def capacity(self) -> int:
        """Positions the storage holds now."""
        return self.keys[0].shape[2]

    def reserve(self, positions: int) -> None:
        """Make the storage hold at least ``positions`` (everything stored is kept)."""
        if positions <= self.capacity:
            return
        if positions > self.max_length:
            raise ValueError(f"KV cache overflow: {positions} positions > capacity {self.max_length}")
        wanted = max(positions, self.capacity + self.capacity // 4)
        grown = min(self.max_length, -(-wanted // GROWTH_STEP) * GROWTH_STEP)
        for storages in (self.keys, self.values):
            for i, old in enumerate(storages):
                new = old.new_empty((*old.shape[:2], grown, old.shape[3]))
                new[:, :, : old.shape[2]] = old  # slots past ``length`` too: a caller's scratch
                storages[i] = new

    @property
    def num_layers(self) -> int:
        return len(self.keys)

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k``/``v`` ``(B, H, T, D)`` at positions ``[start, start+T)`` of ``layer``.

        Returns views of all valid keys and values ``[0, start+T)`` for attention.
        """
        end = start + k.shape[2]
        self.reserve(end)
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def write_rows(self, layer: int, starts: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store row ``b`` of ``k``/``v`` ``(B, H, T, D)`` at positions ``[starts[b], starts[b]+T)``.

        Rows of a batch whose speculative drafts were accepted to different lengths (ragged
        acceptance) continue from different positions. Returns views of ``[0, max(starts)+T)``:
        the caller masks each row to its own positions (a row's slots past them hold stale or
        zero keys, never read unmasked).
        """
        steps = k.shape[2]
        end = int(starts.max()) + steps
        self.reserve(end)
        index = starts.to(self.keys[layer].device)[:, None] + torch.arange(steps, device=self.keys[layer].device)
        index = index[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
        self.keys[layer].scatter_(2, index, k.to(self.keys[layer].dtype))
        self.values[layer].scatter_(2, index, v.to(self.values[layer].dtype))
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def zero_(self) -> None:
        """Zero the storage. A ragged batch masks each row's unused slots, but attention still
        multiplies them by a zero weight: an uninitialised NaN or inf there would poison the row."""
        for storage in (*self.keys, *self.values):
            storage.zero_()

    def load_prefix(self, source: "KVCache", length: int) -> None:
        """Become a copy of ``source``'s first ``length`` positions (every layer, in this cache's
        dtype); ``length`` is set."""
        self.reserve(length)
        for mine, theirs in ((self.keys, source.keys), (self.values, source.values)):
            for target, stored in zip(mine, theirs):
                target[:, :, :length] = stored[:, :, :length]
        self.length = length

    def truncate(self, length: int) -> None:
        """Forget every position from ``length`` on (speculative rollback)."""
        if length < 0 or length > self.length:
            raise ValueError(f"cannot truncate a cache of length {self.length} to {length}")
        self.length = length

    def compact(self, destination: int, sources: list[int]) -> None:
        """Move positions ``sources`` (increasing) to ``destination, destination + 1, ...``.

        After tree verification the accepted path's nodes sit at scattered positions; this puts
        them where the next pass expects them (then :meth:`truncate` drops the rest).
        """
        if not sources or sources == list(range(destination, destination + len(sources))):
            return
        src = torch.tensor(sources, device=self.keys[0].device)
        for storage in (*self.keys, *self.values):
            # Gather first: a source may be overwritten by an earlier destination otherwise.
            storage[:, :, destination : destination + len(sources)] = storage.index_select(2, src)

    def reorder(self, index: torch.Tensor) -> None:
        """Select batch rows (beam search): row ``i`` becomes old row ``index[i]``."""
        index = index.to(self.keys[0].device)
        for i in range(len(self.keys)):
            self.keys[i] = self._select_filled(self.keys[i], index)
            self.values[i] = self._select_filled(self.values[i], index)
        # Cross K/V with batch 1 are shared by every row (one audio) and broadcast in attention;
        # rows of different audio carry their own and move with the row.
        if self.cross and isinstance(self.cross[0], tuple) and self.cross[0][0].shape[0] > 1:
            self.cross = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.cross]  # type: ignore[misc]
        if self.cross_rows is not None:
            self.cross_rows = [self.cross_rows[i] for i in index.tolist()]

    def _select_filled(self, storage: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Rows ``index`` of ``storage`` in new full-capacity storage; only ``[0, length)`` is copied."""
        batch, heads, capacity, head_dim = storage.shape
        selected = storage.new_empty((index.shape[0], heads, capacity, head_dim))
        # Gather into a compact temporary, then copy: measured 2x faster on CPU than
        # ``index_select(..., out=<strided view>)``.
        selected[:, :, : self.length] = storage[:, :, : self.length].index_select(0, index)
        return selected


_scratch = threading.local()


def thread_scratch(name: str, like: KVCache, positions: int, dtype: Optional[torch.dtype] = None) -> KVCache:
    """This thread's scratch cache ``name``, shaped like ``like``, holding ``positions``, length 0.

    For K/V that are computed, read and dropped within one call on one thread (the streaming
    encoder's padding tail): a compute engine's few worker
    threads each keep one, instead of every stream keeping its own between calls. What a caller
    reads from it must not outlive its call: the next call on the thread overwrites it.

    Args:
      name: which scratch (two kinds alive in one call need two names).
      like: the cache whose layers, rows, heads, head size, dtype, device and limit it copies.
      positions: positions the storage must hold now (it grows, up to ``like.max_length``).
      dtype: the scratch's dtype (``None``: ``like``'s).
    """
    pool: dict[tuple, KVCache] = _scratch.__dict__.setdefault("caches", {})
    k = like.keys[0]
    dtype = k.dtype if dtype is None else dtype
    key = (name, like.num_layers, *k.shape[:2], k.shape[3], dtype, k.device, like.max_length)
    cache = pool.get(key)
    if cache is None:
        cache = pool[key] = KVCache.allocate(
            num_layers=like.num_layers, batch_size=k.shape[0], num_heads=k.shape[1], head_dim=k.shape[3],
            max_length=like.max_length, dtype=dtype, device=k.device, initial_length=min(positions, like.max_length),
        )
    cache.length = 0
    cache.reserve(positions)
    return cache
