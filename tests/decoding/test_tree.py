"""Draft trees: structure, greedy tree verification, and lossless tree decoding in the shared loop."""

from __future__ import annotations

import random
from typing import Sequence

import pytest
import torch

from burble.decoding.generate import generate
from burble.decoding.kv_cache import KVCache
from burble.decoding.options import DecodingOptions
from burble.decoding.speculative import Draft
from burble.decoding.tree import DraftTree, first_chain, pruned, verify_greedy_tree
from burble.testing.toy_models import TableModel

#            0  1  2  3  4
TREE = DraftTree(tokens=(5, 6, 7, 8, 9), parents=(-1, -1, 0, 0, 2))


def test_tree_structure():
    assert TREE.depths == [1, 1, 2, 2, 3]
    assert TREE.path_to(4) == [0, 2, 4]
    assert TREE.positions(10).tolist() == [10, 11, 11, 12, 12, 13]
    mask = TREE.attention_mask(2)
    assert mask.shape == (6, 8)
    assert mask[:, :3].all()  # cache and root
    # node 4 (row 5) sees nodes 0, 2 and itself; node 1 (row 2) only itself
    assert mask[5, 3:].tolist() == [True, False, True, False, True]
    assert mask[2, 3:].tolist() == [False, True, False, False, False]
    assert first_chain(TREE) == [5, 7, 9]
    assert pruned(TREE, 1) == DraftTree((5, 6), (-1, -1))
    with pytest.raises(ValueError):
        DraftTree((1, 2), (1, -1))  # a parent after its child


def _logits_preferring(rows: Sequence[int], vocab: int = 12) -> torch.Tensor:
    logits = torch.zeros(len(rows), vocab)
    for i, token in enumerate(rows):
        logits[i, token] = 1.0
    return logits


def test_greedy_tree_verification_follows_the_matching_child():
    # root -> 5 (node 0) -> 7 (node 2) -> wants 3: path [0, 2], then 3.
    logits = _logits_preferring([5, 7, 0, 3, 0, 0])
    assert verify_greedy_tree(TREE, logits) == ([0, 2], 3)
    # root wants 6: the second child; after it nothing is drafted.
    assert verify_greedy_tree(TREE, _logits_preferring([6, 0, 4, 0, 0, 0])) == ([1], 4)
    assert verify_greedy_tree(TREE, _logits_preferring([1, 0, 0, 0, 0, 0])) == ([], 1)


class RandomTreeDrafter:
    """Proposes random trees that contain the true greedy path to a random depth, plus decoys."""

    def __init__(self, model: TableModel, seed: int, nodes: int = 7) -> None:
        self.model, self.rng, self.nodes = model, random.Random(seed), nodes

    def _greedy_path(self, tokens: list[int], depth: int) -> list[int]:
        path, context = [], list(tokens)
        for _ in range(depth):
            ctx = ([self.model.vocab_size] * 2 + context)[-(self.model.order - 1):]
            flat = 0
            for t in ctx:
                flat = flat * (self.model.vocab_size + 1) + t
            nxt = int(self.model._flat[flat].argmax())
            path.append(nxt)
            context.append(nxt)
        return path

    def propose(self, tokens, k, rule) -> Draft:
        depth = self.rng.randint(0, k)
        # tokens[-1] is the root; the greedy path after it
        truth = self._greedy_path(list(tokens), depth)
        node_tokens, parents = [], []
        previous = -1
        for token in truth:
            node_tokens.append(token)
            parents.append(previous)
            previous = len(node_tokens) - 1
        while len(node_tokens) < self.nodes:
            parent = self.rng.randint(-1, len(node_tokens) - 1)
            depth_of = 0 if parent < 0 else len(DraftTree(tuple(node_tokens), tuple(parents)).path_to(parent))
            if depth_of >= k:
                continue
            node_tokens.append(self.rng.randrange(self.model.vocab_size))
            parents.append(parent)
        return Draft(node_tokens, parents=parents)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("order", [2, 3, 4])
def test_tree_decoding_gives_the_plain_greedy_tokens(seed: int, order: int):
    model = TableModel(vocab_size=8, order=order, seed=seed, dtype=torch.float32)
    options = DecodingOptions(max_new_tokens=30, draft_length=4, eos_token_id=7)
    prompt = torch.tensor([[1, 2, 3]])
    plain = generate(model, prompt, options)
    drafter = RandomTreeDrafter(model, seed)
    result = generate(model, prompt, options, drafter=drafter)
    assert result.tokens == plain.tokens
    assert result.token_logprobs[0] == pytest.approx(plain.token_logprobs[0], abs=1e-5)
    if len(plain.tokens[0]) > 4:
        assert result.stats.accepted > 0 and result.stats.target_passes < plain.stats.target_passes


def test_without_compaction_tree_decoding_goes_wrong(monkeypatch):
    """Negative control: the accepted path must be moved to consecutive cache positions."""
    monkeypatch.setattr(KVCache, "compact", lambda self, destination, sources: None)
    wrong = 0
    for seed in range(5):
        model = TableModel(vocab_size=8, order=3, seed=seed, dtype=torch.float32)
        options = DecodingOptions(max_new_tokens=30, draft_length=4)
        prompt = torch.tensor([[1, 2, 3]])
        plain = generate(model, prompt, options)
        result = generate(model, prompt, options, drafter=RandomTreeDrafter(model, seed))
        wrong += result.tokens != plain.tokens
    assert wrong > 0


def test_sampling_drafts_the_trees_best_path_as_a_chain(monkeypatch):
    model = TableModel(vocab_size=8, order=3, seed=0, dtype=torch.float32)
    options = DecodingOptions(max_new_tokens=20, draft_length=4, temperature=1.0)
    prompt = torch.tensor([[1, 2, 3]])
    tree_passes = []
    original = TableModel.forward_tree
    monkeypatch.setattr(TableModel, "forward_tree", lambda self, *a: tree_passes.append(1) or original(self, *a))
    drafter = RandomTreeDrafter(model, 0)
    result = generate(model, prompt, options, drafter=drafter, generator=torch.Generator().manual_seed(0))
    assert result.stats.drafted > 0  # a chain was verified
    assert not tree_passes  # sampling never scores a tree (its verification rule is the chain one)
    # Negative control: the same drafter under greedy decoding does score trees.
    generate(model, prompt, DecodingOptions(max_new_tokens=20, draft_length=4), drafter=RandomTreeDrafter(model, 0))
    assert tree_passes
