"""``kernels.linear``: multi-row CPU inference through oneDNN and one-row inference of a widening
layer through its transposed copy equal ``F.linear``; training, other single rows and large inputs
take ``F.linear`` itself; a changed weight is repacked; fused layers equal the layers one by one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from burble.kernels import linear as linear_module
from burble.kernels.linear import MAX_PACKED_ROWS, fused_linear, linear

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


@pytest.mark.parametrize("bias", [True, False])
def test_one_row_of_a_widening_layer_uses_the_transposed_copy(bias):
    torch.manual_seed(3)
    layer = nn.Linear(64, 256, bias=bias)
    x = torch.randn(1, 1, 64)
    with torch.inference_mode():
        out = linear(x, layer)
    torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    cached = getattr(layer, linear_module._TRANSPOSED_ATTR, None)
    assert cached is not None and torch.equal(cached[1], layer.weight.T)
    with torch.no_grad():
        layer.weight.mul_(2.0)
    with torch.inference_mode():
        # Negative control: a stale transposed copy would give `out` again.
        torch.testing.assert_close(linear(x, layer), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    narrowing = nn.Linear(256, 64)
    with torch.inference_mode():
        linear(torch.randn(1, 256), narrowing)
    assert getattr(narrowing, linear_module._TRANSPOSED_ATTR, None) is None  # F.linear's own GEMV there


@pytest.mark.parametrize("rows", [1, 3, MAX_PACKED_ROWS + 1])
def test_fused_layers_equal_the_layers_one_by_one(rows):
    torch.manual_seed(rows)
    owner = nn.Module()
    layers = [nn.Linear(48, 48), nn.Linear(48, 48, bias=False), nn.Linear(48, 32)]
    x = torch.randn(1, rows, 48)
    with torch.inference_mode():
        fused = fused_linear(x, owner, layers)
        separate = [F.linear(x, layer.weight, layer.bias) for layer in layers]
    assert [f.shape for f in fused] == [s.shape for s in separate]
    for f, s in zip(fused, separate):
        torch.testing.assert_close(f, s, atol=1e-5, rtol=1e-5)
    assert getattr(owner, linear_module._FUSED_ATTR, None) is not None
    with torch.no_grad():
        layers[1].weight.add_(1.0)  # a part changed: the stacked weight is remade
    with torch.inference_mode():
        again = fused_linear(x, owner, layers)
    torch.testing.assert_close(again[1], F.linear(x, layers[1].weight), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(again[1], fused[1], atol=1e-3)  # negative control: a stale stack gives `fused`


def test_fused_layers_under_autograd_are_the_layers_themselves():
    torch.manual_seed(5)
    owner = nn.Module()
    layers = [nn.Linear(16, 16), nn.Linear(16, 8)]
    outputs = fused_linear(torch.randn(2, 16), owner, layers)
    sum(o.sum() for o in outputs).backward()
    assert all(layer.weight.grad is not None for layer in layers)
    assert getattr(owner, linear_module._FUSED_ATTR, None) is None
