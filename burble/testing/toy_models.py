"""Tiny, exact autoregressive models for testing the decoding core.

:class:`TableModel` is an n-gram language model whose next-token logits come from a random table
over a small vocabulary. It implements :class:`burble.decoding.model.AutoregressiveModel` with a real
:class:`~burble.decoding.kv_cache.KVCache`: every forward pass *writes* its tokens into the cache and
*reads* the context back from the cache, never from a Python list. A decoding loop that forgets to roll
back rejected speculative positions (or writes them at the wrong offset) therefore produces
different outputs, exactly as a transformer would.

:func:`sequence_distribution` enumerates the exact probability of every output sequence of a given
length by brute force (a fresh cache per level, no incremental decoding), which is the ground
truth of the statistical losslessness tests of speculative sampling.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from burble.decoding.kv_cache import KVCache
from burble.decoding.logits import LogitsProcessor, apply_processors, warp


class TableModel:
    """An n-gram model over ``vocab_size`` tokens, driven through a KV cache.

    The logits at position ``t`` depend on the tokens at positions ``t - order + 2 .. t`` (a bigram
    model looks at the current token, a trigram model at the current and the previous one);
    positions before the start read as a padding index ``vocab_size``.

    Args:
      vocab_size: number of tokens (6-10 keeps exact enumeration cheap).
      order: n-gram order, >= 1 (1: context-free, 2: bigram, 3: trigram, ...).
      seed: seed of the random table.
      scale: standard deviation of the random logits (larger: peakier distributions).
      table: explicit logits of shape ``(vocab_size + 1,) * (order - 1) + (vocab_size,)``
        instead of a random one.
      dtype: dtype of the table, of the cache and of the returned logits (fp64 for exact tests).
    """

    def __init__(
        self,
        vocab_size: int = 8,
        order: int = 3,
        *,
        seed: int = 0,
        scale: float = 2.0,
        table: Optional[torch.Tensor] = None,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        if vocab_size < 2:
            raise ValueError("vocab_size must be >= 2")
        if order < 1:
            raise ValueError("order must be >= 1")
        shape = (vocab_size + 1,) * (order - 1) + (vocab_size,)
        if table is None:
            gen = torch.Generator().manual_seed(seed)
            table = torch.randn(shape, generator=gen, dtype=torch.float64) * scale
        elif tuple(table.shape) != shape:
            raise ValueError(f"table must have shape {shape}, got {tuple(table.shape)}")
        self.vocab_size = vocab_size
        self.order = order
        self.table = table.to(dtype)
        self.dtype = dtype
        # Row ``c`` holds the logits of the context whose base-(V+1) digits are its tokens.
        self._flat = self.table.reshape(-1, vocab_size)
        self.forward_calls = 0

    def perturbed(self, noise: float, seed: int) -> "TableModel":
        """A different but correlated model (a draft model): the table plus Gaussian noise."""
        gen = torch.Generator().manual_seed(seed)
        extra = torch.randn(self.table.shape, generator=gen, dtype=torch.float64) * noise
        return TableModel(
            self.vocab_size, self.order, table=self.table.double() + extra, dtype=self.dtype
        )

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        # One layer, one head, head_dim 1: the "keys" are the token ids themselves.
        return KVCache.allocate(
            num_layers=1, batch_size=batch_size, num_heads=1, head_dim=1, max_length=max_length, dtype=self.dtype
        )

    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Write ``tokens`` ``(B, T)`` into ``cache`` and return logits ``(B, T, V)``."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (B, T), got shape {tuple(tokens.shape)}")
        if tokens.shape[0] != cache.batch_size:
            raise ValueError(f"batch {tokens.shape[0]} does not match the cache's {cache.batch_size}")
        rows = tokens.tolist()  # tiny tensors: Python lists are cheaper than several torch ops
        if any(t < 0 or t >= self.vocab_size for row in rows for t in row):
            raise ValueError(f"token ids must be in [0, {self.vocab_size})")
        self.forward_calls += 1
        start = cache.length
        as_kv = torch.tensor(rows, dtype=self.dtype)[:, None, :, None]
        keys, _ = cache.write(0, start, as_kv, as_kv)
        cache.length = start + tokens.shape[1]
        return self._logits_from_cache(keys, [start] * len(rows), tokens.shape[1])

    def forward_rows(self, tokens: torch.Tensor, cache: KVCache, starts: torch.Tensor) -> torch.Tensor:
        """Like :meth:`forward`, row ``b`` at positions ``[starts[b], starts[b] + T)`` (ragged
        speculative acceptance: :class:`burble.decoding.model.RaggedModel`)."""
        if tokens.shape[0] != cache.batch_size or tuple(starts.shape) != (tokens.shape[0],):
            raise ValueError("one start per row of the cache's batch")
        if any(t < 0 or t >= self.vocab_size for row in tokens.tolist() for t in row):
            raise ValueError(f"token ids must be in [0, {self.vocab_size})")
        self.forward_calls += 1
        as_kv = tokens.to(self.dtype)[:, None, :, None]
        keys, _ = cache.write_rows(0, starts, as_kv, as_kv)
        cache.length = keys.shape[2]
        return self._logits_from_cache(keys, [int(s) for s in starts.tolist()], tokens.shape[1])

    def _logits_from_cache(self, keys: torch.Tensor, starts: list[int], steps: int) -> torch.Tensor:
        """Logits of ``steps`` positions per row from ``starts[b]`` on, reading each position's
        context back from the cache (not from the tokens fed): a stale or misplaced position
        changes the output. Positions before 0 read as the padding index."""
        batch = len(starts)
        if self.order == 1:
            return self.table.expand(batch, steps, self.vocab_size).clone()
        width = self.order - 1
        rows_index = []
        for b, start in enumerate(starts):
            first = start - width + 1
            read = keys[b, 0, max(first, 0) : start + steps, 0].tolist()
            context = [self.vocab_size] * max(-first, 0) + [int(x) for x in read]
            for t in range(steps):
                flat = 0
                for token in context[t : t + width]:
                    flat = flat * (self.vocab_size + 1) + token
                rows_index.append(flat)
        picked = self._flat.index_select(0, torch.tensor(rows_index))
        return picked.view(batch, steps, self.vocab_size)

    def forward_tree(self, tokens: torch.Tensor, cache: KVCache, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Score a draft tree: row ``t`` reads its context from the cache positions ``mask[t]``
        lets it attend to (in order), so a wrong mask or a stale position changes the output."""
        if tokens.shape[0] != 1:
            raise ValueError("tree passes are batch 1")
        start = cache.length
        steps = tokens.shape[1]
        if tuple(mask.shape) != (steps, start + steps):
            raise ValueError(f"mask must be ({steps}, {start + steps}), got {tuple(mask.shape)}")
        as_kv = tokens.to(self.dtype)[:, None, :, None]
        keys, _ = cache.write(0, start, as_kv, as_kv)
        cache.length = start + steps
        self.forward_calls += 1
        stored = [int(x) for x in keys[0, 0, :, 0].tolist()]
        width = max(self.order - 1, 0)
        rows = []
        for t in range(steps):
            visible = [stored[j] for j in range(start + steps) if bool(mask[t, j])]
            # Positions must agree with the number of visible tokens (a node at depth d sees d + start + 1).
            if int(positions[t]) != len(visible) - 1:
                raise ValueError(f"row {t}: position {int(positions[t])} but {len(visible)} visible tokens")
            context = ([self.vocab_size] * width + visible)[-width:] if width else []
            flat = 0
            for token in context:
                flat = flat * (self.vocab_size + 1) + token
            rows.append(flat)
        return self._flat.index_select(0, torch.tensor(rows))[None]


class CountingModel:
    """Wraps an :class:`AutoregressiveModel` and counts forward passes and fed tokens."""

    def __init__(self, model) -> None:
        self.model = model
        self.vocab_size = model.vocab_size
        self.calls = 0
        self.tokens_fed = 0

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        return self.model.new_cache(batch_size, max_length)

    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        self.calls += 1
        self.tokens_fed += tokens.numel()
        return self.model.forward(tokens, cache)


def sequence_distribution(
    model,
    prompt: Sequence[int],
    length: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    processors: Sequence[LogitsProcessor] = (),
    eos_token_id: Optional[int] = None,
) -> dict[tuple[int, ...], float]:
    """Exact probability of every output of ``generate(model, prompt, max_new_tokens=length)``.

    Brute force: every prefix is re-run from scratch through a fresh cache, the processor chain and
    :func:`burble.decoding.logits.warp` (in the model's dtype, fp64 for :class:`TableModel`).

    Args:
      model: an :class:`AutoregressiveModel` (small vocabulary: ``V ** length`` outputs).
      prompt: prompt token ids (at least one).
      length: number of generated tokens (``max_new_tokens``).
      temperature, top_k, top_p: the sampling warpers; temperature 0 gives the greedy output.
      processors: the logits-processor chain.
      eos_token_id: generating it ends a sequence early; it is kept as the last element of the
        key so that ``(a, eos)`` and ``(a,)`` (length limit) stay distinct outcomes.

    Returns:
      ``{output tokens: probability}`` over the outcomes of non-zero probability (sums to 1).
    """
    if not prompt:
        raise ValueError("the prompt needs at least one token")
    if length < 1:
        raise ValueError("length must be >= 1")
    done: dict[tuple[int, ...], float] = {}
    frontier: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        if not frontier:  # every sequence has ended
            break
        prefixes = list(frontier)
        rows = torch.tensor([list(prompt) + list(p) for p in prefixes], dtype=torch.long)
        cache = model.new_cache(rows.shape[0], rows.shape[1])
        logits = model.forward(rows, cache)[:, -1].clone()
        apply_processors(processors, logits, rows)
        if temperature == 0:
            probs = torch.zeros_like(logits)
            probs.scatter_(1, logits.argmax(dim=1, keepdim=True), 1.0)
        else:
            probs = warp(logits, temperature=temperature, top_k=top_k, top_p=top_p)
        following: dict[tuple[int, ...], float] = {}
        for prefix, row in zip(prefixes, probs.tolist()):
            mass = frontier[prefix]
            for token, p in enumerate(row):
                if p <= 0.0:
                    continue
                key = prefix + (token,)
                if eos_token_id is not None and token == eos_token_id:
                    done[key] = mass * p
                else:
                    following[key] = mass * p
        frontier = following
    done.update(frontier)
    return done


class HiddenTableModel(TableModel):
    """A bigram :class:`TableModel` that also exposes hidden states, for MTP-drafter tests.

    The hidden state of position ``t`` is the one-hot vector of the token there (``D = V``) and
    the token embedding is the identity, so draft heads over it can be built by hand: a head's
    projection row ``a`` decides what it drafts after a state of token ``a``.
    """

    def __init__(self, vocab_size: int = 8, *, seed: int = 0, scale: float = 2.0) -> None:
        super().__init__(vocab_size, order=2, seed=seed, scale=scale, dtype=torch.float32)
        self._last: tuple[int, Optional[torch.Tensor]] = (0, None)

    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        start = cache.length
        logits = super().forward(tokens, cache)
        self._last = (start, torch.nn.functional.one_hot(tokens, self.vocab_size).float())
        return logits

    def forward_tree(self, tokens: torch.Tensor, cache: KVCache, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        start = cache.length
        logits = super().forward_tree(tokens, cache, positions, mask)
        self._last = (start, torch.nn.functional.one_hot(tokens, self.vocab_size).float())
        return logits

    def last_hidden_states(self) -> tuple[int, Optional[torch.Tensor]]:
        return self._last

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(tokens, self.vocab_size).float()

    def draft_memory(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed random memory ``(1, 2, 5, V / 2)`` for memory-attending heads."""
        gen = torch.Generator().manual_seed(7)
        shape = (1, 2, 5, self.vocab_size // 2)
        return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)

    def greedy_next(self, token: int) -> int:
        """The token greedy decoding emits after ``token``."""
        return int(self.table[token].argmax())
