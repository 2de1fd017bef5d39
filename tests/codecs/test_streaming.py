"""``burble.codecs.streaming``: causal layers, whole-sequence and piece by piece.

Two properties, each with a negative control that shows the check can fail:

* causality: changing input at time >= t never changes an output that reads only times < t (a
  centred ``nn.Conv1d`` fails the same check);
* streaming == whole: inside ``streaming(model)``, pieces of any size (empty ones included) give
  the whole-sequence output, within 1e-6 (float32 rounding of differently sized convolutions).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import burble.codecs.streaming as streaming_module
from burble.codecs.streaming import FEW_OUTPUTS, CausalConv1d, StreamingGRU, conv1d, conv_transpose1d, streaming
from codec_helpers import random_pieces


def outputs_changed_before(layer: nn.Module, x: torch.Tensor, t: int, upto: int) -> bool:
    """Whether adding noise to ``x[..., t:]`` changes any of the outputs ``[..., :upto]``."""
    with torch.no_grad():
        base = layer(x)
        y = x.clone()
        y[..., t:] += torch.randn_like(y[..., t:])
        return not torch.equal(layer(y)[..., :upto], base[..., :upto])


def streamed(layer: nn.Module, x: torch.Tensor, pieces: list[slice]) -> torch.Tensor:
    with torch.no_grad(), streaming(layer):
        return torch.cat([layer(x[..., p]) for p in pieces], dim=2)


CONVS = [(3, 1, 1), (3, 1, 3), (4, 2, 1), (7, 1, 2), (5, 3, 1)]  # kernel, stride, dilation


@pytest.mark.parametrize("kernel,stride,dilation", CONVS)
def test_causal_conv_never_reads_the_future(kernel, stride, dilation):
    torch.manual_seed(0)
    conv = CausalConv1d(4, 5, kernel, stride=stride, dilation=dilation)
    x = torch.randn(2, 4, 60)
    assert conv(x).shape == (2, 5, 60 // stride)
    for j in (0, 5, 11):
        # output j reads inputs up to j * stride + stride - 1
        assert not outputs_changed_before(conv, x, (j + 1) * stride, upto=j + 1)
        assert outputs_changed_before(conv, x, j * stride + stride - 1, upto=j + 1)  # its last input does count


def test_negative_control_a_centred_conv_fails_the_causality_check():
    torch.manual_seed(0)
    centred = nn.Conv1d(4, 5, 3, padding=1)
    assert outputs_changed_before(centred, torch.randn(2, 4, 60), 20, upto=20)


@pytest.mark.parametrize("kernel,stride,dilation", CONVS)
@pytest.mark.parametrize("seed", range(3))
def test_causal_conv_streamed_in_pieces_equals_whole(kernel, stride, dilation, seed):
    torch.manual_seed(seed)
    conv = CausalConv1d(4, 5, kernel, stride=stride, dilation=dilation)
    x = torch.randn(2, 4, 97)
    pieces = random_pieces(97, np.random.default_rng(seed), largest=7)
    whole = conv(x)
    out = streamed(conv, x, pieces)
    assert out.shape == whole.shape
    assert (out - whole).abs().max() <= 1e-6


def test_gru_streamed_in_pieces_equals_whole_and_is_causal():
    torch.manual_seed(0)
    gru = StreamingGRU(6)
    x = torch.randn(2, 6, 50)
    whole = gru(x)
    for seed in range(3):
        out = streamed(gru, x, random_pieces(50, np.random.default_rng(seed), largest=6))
        assert (out - whole).abs().max() <= 1e-6
    assert not outputs_changed_before(gru, x, 20, upto=20)
    assert outputs_changed_before(gru, x, 19, upto=20)


def test_negative_control_a_stream_without_state_differs():
    """Outside ``streaming`` each call starts afresh: pieces then do not add up to the whole."""
    torch.manual_seed(0)
    model = nn.Sequential(CausalConv1d(3, 3, 3), StreamingGRU(3))
    x = torch.randn(1, 3, 40)
    with torch.no_grad():
        stateless = torch.cat([model(x[..., :20]), model(x[..., 20:])], dim=2)
        assert (stateless - model(x)).abs().max() > 1e-3
        assert (streamed(model, x, [slice(0, 20), slice(20, 40)]) - model(x)).abs().max() <= 1e-6


def test_streaming_state_starts_empty_in_every_block():
    torch.manual_seed(0)
    model = nn.Sequential(CausalConv1d(3, 3, 4, stride=2), StreamingGRU(3))
    x = torch.randn(1, 3, 30)
    first = streamed(model, x, [slice(0, 11), slice(11, 30)])
    again = streamed(model, x, [slice(0, 30)])  # a new block: nothing left over from the first
    assert first.shape == (1, 3, 15) and (first - again).abs().max() <= 1e-6
    assert not model[0].streaming_active and model[0]._buffer is None and model[1]._hidden is None
    with torch.no_grad():
        assert (model(x) - first).abs().max() <= 1e-6  # and whole-sequence mode works as before


@pytest.mark.parametrize(("kernel", "stride", "dilation"), [(3, 1, 1), (3, 1, 9), (4, 2, 1), (7, 1, 1), (1, 1, 1)])
@pytest.mark.parametrize("outputs", [1, 5, FEW_OUTPUTS, FEW_OUTPUTS + 9, 300])
def test_conv1d_equals_torch_for_few_and_many_outputs(kernel, stride, dilation, outputs):
    torch.manual_seed(0)
    weight, bias = torch.randn(6, 5, kernel), torch.randn(6)
    x = torch.randn(2, 5, (outputs - 1) * stride + dilation * (kernel - 1) + 1)
    expected = F.conv1d(x, weight, bias, stride=stride, dilation=dilation)
    got = conv1d(x, weight, bias, stride=stride, dilation=dilation)
    assert got.shape == expected.shape == (2, 6, outputs)
    assert torch.allclose(got, expected, atol=1e-5)
    # Negative control: the taps in the other order (kernel-major) are another convolution.
    if kernel > 1 and outputs <= FEW_OUTPUTS:
        taps = x.transpose(1, 2).unfold(1, dilation * (kernel - 1) + 1, stride)[..., ::dilation]
        wrong = F.linear(taps.transpose(2, 3).reshape(2, outputs, -1), weight.reshape(6, -1), bias).transpose(1, 2)
        assert not torch.allclose(wrong, expected, atol=1e-3)


def test_conv1d_takes_one_matrix_product_for_few_outputs(monkeypatch):
    calls, real = [], F.conv1d
    monkeypatch.setattr(streaming_module.F, "conv1d", lambda *a, **k: calls.append(1) or real(*a, **k))
    weight = torch.randn(4, 4, 3)
    conv1d(torch.randn(1, 4, FEW_OUTPUTS + 2), weight, None)
    assert calls == []
    conv1d(torch.randn(1, 4, FEW_OUTPUTS + 3), weight, None)
    assert calls == [1]


def test_conv1d_gathers_a_long_dilated_conv_in_float32_only(monkeypatch):
    calls, real = [], F.conv1d
    monkeypatch.setattr(streaming_module.F, "conv1d", lambda *a, **k: calls.append(1) or real(*a, **k))
    weight, x = torch.randn(4, 4, 3), torch.randn(1, 4, 400)
    conv1d(x, weight, None, dilation=3)
    assert calls == []
    conv1d(x, weight, None)  # undilated: ATen's kernel is faster
    conv1d(x.bfloat16(), weight.bfloat16(), None, dilation=3)  # bfloat16 keeps ATen's accumulation
    assert calls == [1, 1]


@pytest.mark.parametrize(("kernel", "stride"), [(16, 8), (4, 2), (3, 2), (2, 2)])
@pytest.mark.parametrize("steps", [1, 3, 40, 200])
def test_conv_transpose1d_equals_torch(kernel, stride, steps):
    torch.manual_seed(0)
    weight, bias = torch.randn(5, 6, kernel), torch.randn(6)
    x = torch.randn(1, 5, steps)
    expected = F.conv_transpose1d(x, weight, bias, stride=stride)
    got = conv_transpose1d(x, weight, bias, stride=stride)
    assert got.shape == expected.shape == (1, 6, (steps - 1) * stride + kernel)
    assert torch.allclose(got, expected, atol=1e-5)
    # Negative control: the kernel taps reversed are another transposed convolution.
    if kernel > stride:
        assert not torch.allclose(conv_transpose1d(x, weight.flip(2), bias, stride=stride), expected, atol=1e-3)


def test_conv_transpose1d_takes_one_matrix_product_for_few_float32_inputs(monkeypatch):
    calls, real = [], F.conv_transpose1d
    monkeypatch.setattr(streaming_module.F, "conv_transpose1d", lambda *a, **k: calls.append(1) or real(*a, **k))
    weight = torch.randn(4, 3, 16)
    conv_transpose1d(torch.randn(1, 4, 3), weight, None, stride=8)
    assert calls == []
    conv_transpose1d(torch.randn(1, 4, 3).bfloat16(), weight.bfloat16(), None, stride=8)  # bfloat16: ATen
    conv_transpose1d(torch.randn(1, 4, 3), torch.randn(4, 3, 5), None, stride=2)  # kernel not whole strides
    assert calls == [1, 1]
