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


def random_layer(seed: int, hidden: int = D, heads: int = HEADS, vocab: int = VOCAB, feature_layers: tuple[int, ...] = ()) -> EagleLayer:
    torch.manual_seed(seed)
    config = EagleConfig(hidden_size=hidden, num_attention_heads=heads, mlp_size=2 * hidden, draft_vocab_size=vocab,
                         feature_layers=feature_layers)
    layer = EagleLayer(config, torch.randperm(vocab))
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(std=0.5)
    return layer.eval()


class FeatureModel:
    """A stand-in target whose "passes" expose given rows of a fixed feature table (and, for fused
    layers, of a table of block outputs ``(T, blocks, D)``)."""

    def __init__(self, features: torch.Tensor, embedding: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor],
                 blocks: Optional[torch.Tensor] = None) -> None:
        self.features, self.embedding, self.memory, self.blocks = features, embedding, memory, blocks
        self._last: tuple[int, Optional[torch.Tensor]] = (0, None)
        self.kept: tuple[int, ...] = ()
        self._last_layers: Optional[torch.Tensor] = None

    def ran(self, start: int, stop: int) -> None:
        self._last = (start, self.features[None, start:stop])
        if self.blocks is not None and self.kept:
            self._last_layers = self.blocks[None, start:stop][:, :, list(self.kept)]

    def keep_layer_states(self, layers: tuple[int, ...]) -> None:
        self.kept = tuple(layers)

    def last_layer_states(self) -> Optional[torch.Tensor]:
        return self._last_layers

    def last_hidden_states(self) -> tuple[int, Optional[torch.Tensor]]:
        return self._last

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embedding[tokens]

    def draft_memory(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.memory


def setup(seed: int, length: int = 10, feature_layers: tuple[int, ...] = ()) -> tuple[EagleLayer, FeatureModel, list[int]]:
    layer = random_layer(seed, feature_layers=feature_layers)
    gen = torch.Generator().manual_seed(seed + 100)
    features = torch.randn(length, D, generator=gen)
    embedding = torch.randn(VOCAB, D, generator=gen)
    memory = (torch.randn(1, HEADS, 7, D // HEADS, generator=gen), torch.randn(1, HEADS, 7, D // HEADS, generator=gen))
    blocks = torch.randn(length, 3, D, generator=gen)  # three target blocks' outputs per position
    layer.init_projection(embedding)
    tokens = torch.randint(0, VOCAB, (length + 1,), generator=gen).tolist()
    return layer, FeatureModel(features, embedding, memory, blocks), tokens


@pytest.mark.parametrize("feature_layers", [(), (0, 2)])  # the final-norm feature alone, or fused with block outputs
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_drafting_equals_the_unrolled_training_chain(seed: int, feature_layers: tuple[int, ...]):
    """A chain drafted after two passes (the cache filled in two steps) is what pass ``s`` of
    ``unrolled`` predicts at row ``last + s``, given the drafted tokens as the ones that follow
    (and, for a fused layer, the fused features of the verified positions, as training feeds it)."""
    layer, model, tokens = setup(seed, feature_layers=feature_layers)
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
    if feature_layers:
        assert model.kept == feature_layers  # the drafter asked the target to keep them
        features = layer.features(features, model.blocks[None, :rows][:, :, list(feature_layers)])
    embeddings = model.embedding[torch.tensor(following[:rows])][None]
    memory = model.memory
    outputs = layer.unrolled(features, embeddings, memory, passes=k)
    ids = layer.draft_ids.tolist()
    expected = [ids[int(layer.logits(outputs[s][0, last + s]).argmax())] for s in range(k)]
    assert draft == expected
    # Negative control: the chain at another position is another chain.
    shifted = [ids[int(layer.logits(outputs[s][0, last - 1 + s]).argmax())] for s in range(k)]
    assert shifted != draft


def test_a_fresh_fusion_drafts_like_the_layer_without_one():
    """``init_fuse`` starts as the identity on the final-norm feature: until training moves it, the
    block outputs change nothing; once its block part is set, they do (the negative control)."""
    layer, model, _ = setup(5, feature_layers=(1,))
    layer.init_fuse(torch.tensor([0.3, 7.0]))
    final, blocks = model.features[None], model.blocks[None][:, :, [1]]
    assert torch.allclose(layer.features(final, blocks), final, atol=1e-5)
    with torch.no_grad():
        layer.fuse.weight[:, :D] = torch.eye(D)
    assert not torch.allclose(layer.features(final, blocks), final, atol=1e-2)


def test_a_fused_layer_needs_a_target_that_keeps_block_outputs():
    layer = random_layer(6, hidden=8, heads=2, vocab=8, feature_layers=(0,))
    with pytest.raises(ValueError, match="keeps none"):
        EagleDrafter(HiddenTableModel(8), layer)


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


@pytest.mark.parametrize("first_candidates", [1, 3])  # a chain, and a chain with first-position leaves (a tree)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_decoding_with_a_random_draft_layer_is_lossless(seed: int, first_candidates: int):
    model = HiddenTableModel(8, seed=seed)
    layer = random_layer(seed, hidden=8, heads=2, vocab=8)
    layer.init_projection(torch.eye(8))
    options = DecodingOptions(max_new_tokens=30, draft_length=3)
    prompt = torch.tensor([[1, 2]])
    plain = generate(model, prompt, options)
    result = generate(model, prompt, options, drafter=EagleDrafter(model, layer, first_candidates=first_candidates))
    assert result.tokens == plain.tokens
    assert result.stats.drafted > 0


@pytest.mark.parametrize("feature_layers", [(), (0, 2)])
def test_save_and_load_round_trip(tmp_path, feature_layers: tuple[int, ...]):
    layer, _, _ = setup(4, feature_layers=feature_layers)
    path = tmp_path / "layer.safetensors"
    layer.save(path)
    loaded = EagleLayer.load(path)
    assert loaded.config == layer.config
    if feature_layers:
        assert loaded.fuse is not None and torch.equal(loaded.fuse.weight, layer.fuse.weight.half())
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


class TreeFeatureModel(FeatureModel):
    """A :class:`FeatureModel` that scores trees: the drafter then adds first-position leaves."""

    def forward_tree(self, *args: object) -> None:  # never called: the tests hand over the pass's rows
        raise AssertionError

    def ran_rows(self, start: int, rows: torch.Tensor) -> None:
        self._last = (start, rows[None])


def test_first_candidates_make_a_tree_of_the_chain_and_the_next_best_leaves():
    layer, model, tokens = setup(6)
    chain = EagleDrafter(model, layer)
    model.ran(0, 6)
    expected = chain.propose(tokens[:7], 2, rule=lambda logits, prefix: logits).tokens
    tree_model = TreeFeatureModel(model.features, model.embedding, model.memory)
    drafter = EagleDrafter(tree_model, layer, first_candidates=3)
    tree_model.ran(0, 6)
    draft = drafter.propose(tokens[:7], 2, rule=lambda logits, prefix: logits)
    assert draft.tokens[:2] == expected and draft.parents == [-1, 0, -1, -1]
    assert len(set(draft.tokens[:1] + draft.tokens[2:])) == 3  # three different first tokens
    # Without forward_tree the loop could not verify a tree: the drafter keeps to the chain.
    assert EagleDrafter(model, layer, first_candidates=3).propose(tokens[:7], 2, rule=lambda l, p: l).parents is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_after_a_leaf_is_accepted_the_drafter_reads_that_leafs_row(seed: int):
    """A tree pass over [root, c1, c2, a1, a2] that accepted leaf a2 holds the true feature of its
    position in its last row: the next chain must be the one drafted from a chain pass over the
    same accepted tokens."""
    layer, model, tokens = setup(seed, length=12)
    rule = lambda logits, prefix: logits  # noqa: E731
    tree_model = TreeFeatureModel(model.features, model.embedding, model.memory)
    drafter = EagleDrafter(tree_model, layer, first_candidates=3)
    tree_model.ran(0, 6)
    draft = drafter.propose(tokens[:7], 2, rule)
    leaf = draft.tokens[3]
    after = tokens[:7] + [leaf, tokens[8]]  # the leaf accepted, then the verifier's own token
    garbage = torch.randn(5, D, generator=torch.Generator().manual_seed(seed))
    rows = garbage.clone()
    rows[0], rows[4] = model.features[6], model.features[7]  # the root's and the leaf's true features
    tree_model.ran_rows(6, rows)
    got = drafter.propose(after, 3, rule).tokens[:3]

    reference = EagleDrafter(model, layer)
    model.ran(0, 6)
    reference.propose(tokens[:7], 2, rule)
    model.ran(6, 8)  # a chain pass whose rows are positions 6 and 7
    assert got == reference.propose(after, 3, rule).tokens
    # Negative control: the leaf's feature in the chain's row instead, where it is not read.
    misplaced = garbage.clone()
    misplaced[0], misplaced[1] = model.features[6], model.features[7]
    control = EagleDrafter(tree_model, layer, first_candidates=3)
    tree_model.ran(0, 6)
    control.propose(tokens[:7], 2, rule)
    tree_model.ran_rows(6, misplaced)
    assert control.propose(after, 3, rule).tokens[:3] != got
