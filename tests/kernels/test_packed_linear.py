"""``kernels.linear``: multi-row CPU inference through oneDNN equals ``F.linear``; training and single
rows take ``F.linear`` itself; a changed weight is repacked."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from burble.kernels import linear as linear_module
from burble.kernels.linear import MAX_PACKED_ROWS, linear

pytestmark = pytest.mark.skipif(not linear_module._packing_available(), reason="no oneDNN linear in this torch build")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [2, 3, 5, 8, MAX_PACKED_ROWS])
def test_multi_row_inference_matches_f_linear(rows, bias):
    torch.manual_seed(rows)
    layer = nn.Linear(256, 768, bias=bias)
    x = torch.randn(1, rows, 256)
    with torch.inference_mode():
        out = linear(x, layer)
        ref = F.linear(x, layer.weight, layer.bias)
    assert out.shape == ref.shape
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    assert getattr(layer, linear_module._PACKED_ATTR, None) is not None  # it did take the packed path


def test_single_rows_training_and_large_inputs_are_f_linear_exactly():
    torch.manual_seed(0)
    layer = nn.Linear(64, 32)
    for x in (torch.randn(1, 1, 64), torch.randn(1, MAX_PACKED_ROWS + 1, 64)):
        with torch.inference_mode():
            assert torch.equal(linear(x, layer), F.linear(x, layer.weight, layer.bias))
    x = torch.randn(4, 64)
    out = linear(x, layer)  # grad enabled, trainable weight: autograd must see it
    assert torch.equal(out, F.linear(x, layer.weight, layer.bias))
    out.sum().backward()
    assert layer.weight.grad is not None
    assert getattr(layer, linear_module._PACKED_ATTR, None) is None


def test_a_changed_weight_is_repacked():
    torch.manual_seed(1)
    layer = nn.Linear(32, 16)
    x = torch.randn(3, 32)
    with torch.inference_mode():
        before = linear(x, layer)
    with torch.no_grad():
        layer.weight.mul_(2.0)  # in place: same storage, new version
    with torch.inference_mode():
        after = linear(x, layer)
    assert torch.allclose(after, F.linear(x, layer.weight, layer.bias), atol=1e-5)
    assert not torch.allclose(after, before, atol=1e-3)  # a stale packed weight would give `before`


@pytest.mark.parametrize("rows", [2, 16])
def test_weight_linear_projects_onto_a_tied_embedding(rows):
    torch.manual_seed(rows)
    embedding = nn.Embedding(1000, 64)  # Whisper's logits: hidden @ token_embedding.weight.T
    x = torch.randn(1, rows, 64)
    with torch.inference_mode():
        out = linear_module.weight_linear(x, embedding)
    assert torch.allclose(out, x @ embedding.weight.T, atol=1e-5, rtol=1e-5)
    assert getattr(embedding, linear_module._PACKED_ATTR, None) is not None
