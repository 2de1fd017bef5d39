"""The KV cache never reads a position it has not written: storage is uninitialised, and beam
``reorder`` copies only the filled positions. Poisoning everything else with NaN must not change
any output of an attention decoder, and poisoning one filled position must (the negative control)."""

from __future__ import annotations

import pytest
import torch

from burble.decoding.beam import beam_search
from burble.decoding.drafters import PromptLookupDrafter
from burble.decoding.generate import generate
from burble.decoding.kv_cache import KVCache
from burble.decoding.options import DecodingOptions
from burble.kernels.attention import attention

V, D, EOS = 11, 8, 0


class TinyAttentionDecoder:
    """One causal self-attention layer over a KV cache, through burble's attention dispatch."""

    def __init__(self, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.embedding = torch.randn(V, D, generator=gen, dtype=torch.float64)
        self.position = torch.randn(64, D, generator=gen, dtype=torch.float64)
        self.wq, self.wk, self.wv = (torch.randn(D, D, generator=gen, dtype=torch.float64) for _ in range(3))
        self.out = torch.randn(D, V, generator=gen, dtype=torch.float64) * 3
        self.vocab_size = V

    def new_cache(self, batch_size: int, max_length: int) -> KVCache:
        return KVCache.allocate(
            num_layers=1, batch_size=batch_size, num_heads=1, head_dim=D, max_length=max_length, dtype=torch.float64
        )

    def forward(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        start = cache.length
        x = self.embedding[tokens] + self.position[start : start + tokens.shape[1]]
        q, k, v = (x @ w for w in (self.wq, self.wk, self.wv))
        keys, values = cache.write(0, start, k[:, None], v[:, None])
        cache.length = start + tokens.shape[1]
        return (attention(q[:, None], keys, values, is_causal=True)[:, 0] + x) @ self.out


def _outputs(model: TinyAttentionDecoder) -> list:
    prompts = [[3, 5], [7, 1, 2], [4]]
    results = []
    for prompt in prompts:
        prompt_tensor = torch.tensor([prompt])
        greedy = DecodingOptions(max_new_tokens=12, eos_token_id=EOS)
        spec = DecodingOptions(max_new_tokens=12, eos_token_id=EOS, draft_length=3)
        beam = DecodingOptions(max_new_tokens=12, eos_token_id=EOS, beam_size=4)
        for result in (
            generate(model, prompt_tensor, greedy),
            generate(model, prompt_tensor, spec, drafter=PromptLookupDrafter(hint_tokens=[5, 6, 7, 8, 9, 10])),
            beam_search(model, prompt_tensor, beam),
        ):
            results.append((result.tokens, result.token_logprobs))
    return results


def _poisoning(monkeypatch: pytest.MonkeyPatch, filled_too: bool) -> None:
    """NaN in every unwritten position of fresh and reordered storage (and, optionally, the last
    filled position of reordered storage, which attention does read)."""
    real_allocate = KVCache.allocate.__func__

    def nan_allocate(cls, **kwargs) -> KVCache:
        cache = real_allocate(cls, **kwargs)
        for storage in cache.keys + cache.values:
            storage.fill_(float("nan"))
        return cache

    monkeypatch.setattr(KVCache, "allocate", classmethod(nan_allocate))
    real_select = KVCache._select_filled

    def select_and_poison(self: KVCache, storage: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        selected = real_select(self, storage, index)
        selected[:, :, self.length :] = float("nan")
        if filled_too and self.length:
            selected[:, :, self.length - 1] = float("nan")
        return selected

    monkeypatch.setattr(KVCache, "_select_filled", select_and_poison)


def test_unwritten_positions_are_never_read(monkeypatch):
    model = TinyAttentionDecoder()
    clean = _outputs(model)
    _poisoning(monkeypatch, filled_too=False)
    assert _outputs(model) == clean


def test_the_poison_is_seen_when_a_filled_position_is_read(monkeypatch):
    """Negative control: the same poison one position lower changes the beam outputs."""
    model = TinyAttentionDecoder()
    clean = _outputs(model)
    _poisoning(monkeypatch, filled_too=True)
    assert _outputs(model) != clean


def test_reorder_copies_rows_of_the_filled_positions():
    cache = KVCache.allocate(num_layers=2, batch_size=3, num_heads=2, head_dim=4, max_length=10)
    for layer in range(2):
        cache.write(layer, 0, torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 4))
    cache.length = 6
    before = [(k[:, :, :6].clone(), v[:, :, :6].clone()) for k, v in zip(cache.keys, cache.values)]
    index = torch.tensor([2, 0, 0, 1])
    cache.reorder(index)
    assert cache.batch_size == 4 and cache.max_length == 10
    for layer, (k, v) in enumerate(before):
        assert torch.equal(cache.keys[layer][:, :, :6], k[index])
        assert torch.equal(cache.values[layer][:, :, :6], v[index])


def test_a_growing_cache_keeps_what_it_stored_and_stops_at_its_limit():
    """Storage that starts small grows on demand (in GROWTH_STEP multiples) and keeps every
    position, the scratch past ``length`` included; decoding through it gives the same outputs."""
    from burble.decoding.kv_cache import GROWTH_STEP

    cache = KVCache.allocate(num_layers=2, batch_size=1, num_heads=2, head_dim=4, max_length=1000, initial_length=10)
    assert cache.capacity == 10 and cache.max_length == 1000
    written = []
    for start in range(0, 300, 30):
        k, v = torch.randn(1, 2, 30, 4), torch.randn(1, 2, 30, 4)
        written.append((k, v))
        keys, values = cache.write(1, start, k, v)
        assert keys.shape[2] == start + 30
    assert cache.capacity % GROWTH_STEP == 0 and 300 <= cache.capacity < 1000
    assert torch.equal(cache.keys[1][:, :, :300], torch.cat([k for k, _ in written], dim=2))
    assert torch.equal(cache.values[1][:, :, :300], torch.cat([v for _, v in written], dim=2))
    with pytest.raises(ValueError, match="overflow"):
        cache.write(0, 990, torch.randn(1, 2, 20, 4), torch.randn(1, 2, 20, 4))
    fixed = KVCache.allocate(num_layers=1, batch_size=1, num_heads=1, head_dim=4, max_length=50)
    assert fixed.capacity == fixed.max_length == 50 and fixed.limit is None


def test_decoding_through_a_growing_cache_gives_the_same_outputs(monkeypatch):
    model = TinyAttentionDecoder()
    clean = _outputs(model)
    real_allocate = KVCache.allocate.__func__
    monkeypatch.setattr(KVCache, "allocate", classmethod(lambda cls, **kw: real_allocate(cls, **kw, initial_length=1)))
    assert _outputs(model) == clean


def test_thread_scratch_is_one_cache_per_thread_and_name_shaped_like_its_model():
    import threading

    from burble.decoding.kv_cache import thread_scratch

    like = KVCache.allocate(num_layers=2, batch_size=1, num_heads=2, head_dim=4, max_length=100, initial_length=8)
    first = thread_scratch("test-a", like, 10)
    assert first.length == 0 and first.capacity >= 10 and first.max_length == 100
    assert (first.num_layers, first.batch_size, first.keys[0].shape[1], first.keys[0].shape[3]) == (2, 1, 2, 4)
    first.length = 7
    again = thread_scratch("test-a", like, 60)  # the same storage, grown, length back at 0
    assert again is first and again.length == 0 and again.capacity >= 60
    assert thread_scratch("test-b", like, 10) is not first  # two kinds alive in one call
    other: list[KVCache] = []
    thread = threading.Thread(target=lambda: other.append(thread_scratch("test-a", like, 10)))
    thread.start()
    thread.join()
    assert other[0] is not first  # a second worker never writes into this thread's scratch
    with pytest.raises(ValueError, match="overflow"):
        thread_scratch("test-a", like, 101)


def test_load_prefix_copies_the_filled_positions_of_every_layer():
    source = KVCache.allocate(num_layers=2, batch_size=1, num_heads=2, head_dim=4, max_length=50)
    for layer in range(2):
        source.write(layer, 0, torch.randn(1, 2, 9, 4), torch.randn(1, 2, 9, 4))
    target = KVCache.allocate(num_layers=2, batch_size=1, num_heads=2, head_dim=4, max_length=50, initial_length=2)
    target.load_prefix(source, 6)
    assert target.length == 6 and target.capacity >= 6
    for layer in range(2):
        assert torch.equal(target.keys[layer][:, :, :6], source.keys[layer][:, :, :6])
        assert torch.equal(target.values[layer][:, :, :6], source.values[layer][:, :, :6])
