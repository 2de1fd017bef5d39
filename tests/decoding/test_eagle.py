"""The EAGLE-style draft layer: drafting equals the unrolled training chain, decoding stays lossless."""

from __future__ import annotations

from typing import Optional

import pytest
import torch

from burble.decoding.eagle import EagleConfig, EagleDrafter, EagleLayer, chain_acceptance
from burble.decoding.generate import generate
from burble.decoding.options import DecodingOptions
from burble.testing.toy_models import HiddenTableModel

D, HEADS, VOCAB = 16, 4, 64


def random_layer(seed: int, hidden: int = D, heads: int = HEADS, vocab: int = VOCAB) -> EagleLayer:
    torch.manual_seed(seed)
    layer = EagleLayer(EagleConfig(hidden_size=hidden, num_attention_heads=heads, mlp_size=2 * hidden, draft_vocab_size=vocab),
                       torch.randperm(vocab))
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(std=0.5)
    return layer.eval()


class FeatureModel:
    """A stand-in target whose "passes" expose given rows of a fixed feature table."""

    def __init__(self, features: torch.Tensor, embedding: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor]) -> None:
        self.features, self.embedding, self.memory = features, embedding, memory
        self._last: tuple[int, Optional[torch.Tensor]] = (0, None)

    def ran(self, start: int, stop: int) -> None:
        self._last = (start, self.features[None, start:stop])

    def last_hidden_states(self) -> tuple[int, Optional[torch.Tensor]]:
        return self._last

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embedding[tokens]

    def draft_memory(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.memory


def setup(seed: int, length: int = 10) -> tuple[EagleLayer, FeatureModel, list[int]]:
    layer = random_layer(seed)
    gen = torch.Generator().manual_seed(seed + 100)
    features = torch.randn(length, D, generator=gen)
    embedding = torch.randn(VOCAB, D, generator=gen)
    memory = (torch.randn(1, HEADS, 7, D // HEADS, generator=gen), torch.randn(1, HEADS, 7, D // HEADS, generator=gen))
    layer.init_projection(embedding)
    tokens = torch.randint(0, VOCAB, (length + 1,), generator=gen).tolist()
    return layer, FeatureModel(features, embedding, memory), tokens


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_drafting_equals_the_unrolled_training_chain(seed: int):
    """A chain drafted after two passes (the cache filled in two steps) is what pass ``s`` of
    ``unrolled`` predicts at row ``last + s``, given the drafted tokens as the ones that follow."""
    layer, model, tokens = setup(seed)
    last, k = 5, 3
    drafter = EagleDrafter(model, layer)
    model.ran(0, 1)  # the prompt's pass: position 0 only
    drafter.propose(tokens[:2], 1, rule=lambda logits, prefix: logits)
    model.ran(1, last + 1)  # a pass over positions 1 .. last
    draft = drafter.propose(tokens[: last + 2], k, rule=lambda logits, prefix: logits).tokens
    assert len(draft) == k
    following = tokens[1 : last + 2] + draft[:-1]  # x_1 .. x_{last+1}, then the drafted tokens
    rows = last + k
    features = model.features[None, :rows]
    embeddings = model.embedding[torch.tensor(following[:rows])][None]
    memory = model.memory
    outputs = layer.unrolled(features, embeddings, memory, passes=k)
    ids = layer.draft_ids.tolist()
    expected = [ids[int(layer.logits(outputs[s][0, last + s]).argmax())] for s in range(k)]
    assert draft == expected
    # Negative control: the chain at another position is another chain.
    shifted = [ids[int(layer.logits(outputs[s][0, last - 1 + s]).argmax())] for s in range(k)]
    assert shifted != draft


def test_unrolled_pass_zero_is_causal():
    """Changing a later feature never changes an earlier row's prediction (of any pass)."""
    layer, model, tokens = setup(3)
    features = model.features[None].clone()
    embeddings = model.embedding[torch.tensor(tokens[1:])][None]
    before = layer.unrolled(features, embeddings, model.memory, passes=3)
    features[0, 6] += 5.0
    after = layer.unrolled(features, embeddings, model.memory, passes=3)
    for s in range(3):
        assert torch.allclose(before[s][0, :6], after[s][0, :6], atol=1e-5)
        assert not torch.allclose(before[s][0, 6 + s], after[s][0, 6 + s], atol=1e-3)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_decoding_with_a_random_draft_layer_is_lossless(seed: int):
    model = HiddenTableModel(8, seed=seed)
    layer = random_layer(seed, hidden=8, heads=2, vocab=8)
    layer.init_projection(torch.eye(8))
    options = DecodingOptions(max_new_tokens=30, draft_length=3)
    prompt = torch.tensor([[1, 2]])
    plain = generate(model, prompt, options)
    result = generate(model, prompt, options, drafter=EagleDrafter(model, layer))
    assert result.tokens == plain.tokens
    assert result.stats.drafted > 0


def test_save_and_load_round_trip(tmp_path):
    layer, _, _ = setup(4)
    path = tmp_path / "layer.safetensors"
    layer.save(path)
    loaded = EagleLayer.load(path)
    assert loaded.config == layer.config
    assert torch.equal(loaded.draft_ids, layer.draft_ids)
    assert loaded.fc.weight.dtype == torch.float16 and torch.equal(loaded.fc.weight, layer.fc.weight.half())
    with pytest.raises(ValueError, match="not a draft-layer file"):
        from safetensors.torch import save_file

        save_file({"x": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
        EagleLayer.load(tmp_path / "other.safetensors")


def test_chain_acceptance_counts_the_run_of_correct_passes():
    correct = [torch.tensor([True, True, False, True]), torch.tensor([True, False, True, True]), torch.tensor([False, True, True, True])]
    assert chain_acceptance(correct).tolist() == [3.0, 2.0, 1.0, 4.0]


def test_min_probability_cuts_the_chain_after_the_first_token():
    layer, model, tokens = setup(5)
    chains = {}
    for threshold in (0.0, 1.01):
        drafter = EagleDrafter(model, layer, min_probability=threshold)
        model.ran(0, 6)
        chains[threshold] = drafter.propose(tokens[:7], 4, rule=lambda logits, prefix: logits).tokens
    assert len(chains[0.0]) == 4
    assert chains[1.01] == chains[0.0][:1]  # nothing is that sure: only the first token, which is always drafted


def test_max_tokens_caps_the_chain_whatever_k_the_loop_asks_for():
    layer, model, tokens = setup(5)
    chains = {}
    for cap in (None, 2):
        drafter = EagleDrafter(model, layer, max_tokens=cap)
        model.ran(0, 6)
        chains[cap] = drafter.propose(tokens[:7], 4, rule=lambda logits, prefix: logits).tokens
    assert len(chains[None]) == 4 and chains[2] == chains[None][:2]
