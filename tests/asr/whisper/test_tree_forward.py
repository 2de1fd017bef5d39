"""Whisper's decoder scores a draft tree in one pass exactly as it scores each path on its own."""

from __future__ import annotations

import torch

from burble.asr.whisper.model import WhisperTextModel
from burble.decoding.tree import DraftTree


def _path_logits(text_model: WhisperTextModel, prefix: list[int], path: list[int]) -> torch.Tensor:
    cache = text_model.new_cache(1, 64)
    return text_model.forward(torch.tensor([prefix + path]), cache)[0, -1]


def test_tree_pass_equals_each_path_decoded_alone(text_model):
    prefix = [50257, 50363, 383, 1271]  # <|sot|> <|0.00|> " The" " number"
    tree = DraftTree(tokens=(290, 286, 3891, 319, 11, 3891), parents=(-1, -1, 0, 0, 1, 2))
    cache = text_model.new_cache(1, 64)
    text_model.forward(torch.tensor([prefix[:-1]]), cache)
    start = cache.length
    inputs = torch.tensor([[prefix[-1], *tree.tokens]])
    logits = text_model.forward_tree(inputs, cache, tree.positions(start), tree.attention_mask(start))[0]
    # The recorded hidden states are the tree rows (what an MTP drafter reads next).
    recorded_start, hidden = text_model.last_hidden_states()
    assert recorded_start == start and hidden.shape[1] == 1 + len(tree)
    torch.testing.assert_close(logits[0], _path_logits(text_model, prefix, []), atol=2e-4, rtol=1e-4)
    for node in range(len(tree)):
        path = [tree.tokens[n] for n in tree.path_to(node)]
        torch.testing.assert_close(logits[1 + node], _path_logits(text_model, prefix, path), atol=2e-4, rtol=1e-4)


def test_a_causal_mask_instead_of_the_tree_mask_differs(text_model):
    """Negative control: scoring the nodes as one sequence (causal) gives other logits for siblings."""
    prefix = [50257, 50363, 383, 1271]
    tree = DraftTree(tokens=(290, 286), parents=(-1, -1))
    cache = text_model.new_cache(1, 64)
    text_model.forward(torch.tensor([prefix[:-1]]), cache)
    logits = text_model.forward(torch.tensor([[prefix[-1], *tree.tokens]]), cache)[0]
    assert not torch.allclose(logits[2], _path_logits(text_model, prefix, [286]), atol=1e-3)
