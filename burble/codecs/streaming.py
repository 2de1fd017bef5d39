"""Causal layers with an explicit streaming state, moshi-style: ``with streaming(model): ...``.

Outside a ``streaming`` block a layer processes a whole sequence (left zero padding, nothing of
the future). Inside one, each call takes the next piece of the sequence and returns the outputs
it determines; what the layer needs from the past (a convolution's last inputs, a GRU's hidden
state) is kept on the layer until the block ends. Feeding a sequence piece by piece therefore
gives the whole-sequence output, and new input can never change past output.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn


FEW_OUTPUTS = 16  # a convolution with at most this many outputs runs as one matrix product
MAX_TAPS = 1 << 20  # a dilated one does so while its gathered taps hold at most this many values
FEW_INPUTS = 64  # a transposed one with at most this many inputs too (at 40, ATen's kernel is as fast)


def conv1d(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], *, stride: int = 1,
           dilation: int = 1) -> torch.Tensor:
    """``F.conv1d`` without padding, fast for the few outputs of a streamed piece.

    A convolution call costs 0.1-0.5 ms on one thread however short its input (oneDNN's fixed
    cost; a dilated float32 one goes to ATen's ``slow_conv_dilated2d``), so a streamed code frame,
    a few outputs per layer, paid mostly that. For up to ``FEW_OUTPUTS`` outputs the taps are
    gathered into ``(outputs, in_channels * kernel)`` rows and multiplied by the weight as one
    ``F.linear``: 1.5-7x faster at those sizes (a 256-channel, kernel-3, dilation-3 layer over 8
    outputs: 462 -> 66 us in float32), the same result up to float rounding. A dilated one takes
    that path at any length while the taps stay under ``MAX_TAPS`` values (float32 on the CPU):
    ATen's dilated kernel is 2-3x slower than the gather at the few hundred outputs of a streamed
    vocoder layer.
    """
    span = dilation * (weight.shape[2] - 1) + 1
    count = (x.shape[2] - span) // stride + 1
    long_gather = dilation > 1 and count * weight.shape[1] * weight.shape[2] <= MAX_TAPS and _float32_cpu(x)
    gather = count <= FEW_OUTPUTS or long_gather
    if count <= 0 or not gather:
        return F.conv1d(x, weight, bias, stride=stride, dilation=dilation)
    taps = x.transpose(1, 2).unfold(1, span, stride)[..., ::dilation]  # (batch, count, in, kernel)
    rows = taps.reshape(x.shape[0], count, -1)
    return F.linear(rows, weight.reshape(weight.shape[0], -1), bias).transpose(1, 2)


def conv_transpose1d(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], *,
                     stride: int) -> torch.Tensor:
    """``F.conv_transpose1d`` (no padding), fast for the few inputs of a streamed piece.

    ATen's CPU transposed convolution costs ~4 ms for 3 frames of a 512 -> 256 channel, kernel-16
    layer. When the kernel is a whole number ``m`` of strides, each input instead becomes
    ``m * stride`` outputs through one matrix product, and neighbouring inputs' outputs overlap
    and add: ~8x faster there, the same result up to float rounding. Float32 on the CPU only: in
    bfloat16 each input's share would be rounded before the sum (-23 dB against the convolution).
    """
    in_channels, out_channels, kernel = weight.shape
    steps = x.shape[2]
    if kernel % stride or x.shape[0] != 1 or not 0 < steps <= FEW_INPUTS or not _float32_cpu(x):
        return F.conv_transpose1d(x, weight, bias, stride=stride)
    m = kernel // stride
    # (steps, out, m, stride): what input t writes to outputs stride * (t + r) + j
    pieces = F.linear(x[0].T, weight.reshape(in_channels, -1).T).reshape(steps, out_channels, m, stride)
    out = x.new_zeros(out_channels, steps + m - 1, stride)
    for r in range(m):
        out[:, r:r + steps] += pieces[:, :, r].transpose(0, 1)
    out = out.reshape(out_channels, -1)
    return (out if bias is None else out + bias[:, None])[None]


def _float32_cpu(x: torch.Tensor) -> bool:
    return x.dtype == torch.float32 and x.device.type == "cpu"


class PointwiseConv1d(nn.Conv1d):
    """A kernel-1 ``nn.Conv1d`` (same weights and state dict) that takes the fast path of
    :func:`conv1d` on the few frames of a streamed piece."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv1d(x, self.weight, self.bias)


class StreamingLayer(nn.Module):
    """A layer whose state is cleared on entering and leaving ``streaming``."""

    streaming_active: bool = False

    def reset_streaming(self) -> None:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError


@contextlib.contextmanager
def streaming(model: nn.Module) -> Iterator[None]:
    """Run ``model``'s streaming layers statefully inside the block (states start empty)."""
    layers = [m for m in model.modules() if isinstance(m, StreamingLayer)]
    for layer in layers:
        layer.reset_streaming()
        layer.streaming_active = True
    try:
        yield
    finally:
        for layer in layers:
            layer.streaming_active = False
            layer.reset_streaming()


class CausalConv1d(StreamingLayer):
    """``Conv1d`` that sees only the present and past: output ``t`` reads inputs up to ``t * stride + stride - 1``.

    Args:
        in_channels, out_channels, kernel_size, stride, dilation: as for ``nn.Conv1d``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *, stride: int = 1,
                 dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, dilation=dilation)
        self.stride = stride
        self.span = (kernel_size - 1) * dilation + 1  # inputs one output reads
        self._buffer: Optional[torch.Tensor] = None

    def reset_streaming(self) -> None:
        self._buffer = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, in, T)`` -> ``(batch, out, T // stride)`` (streaming: as many outputs as complete)."""
        if not self.streaming_active:
            return self.conv(F.pad(x, (self.span - self.stride, 0)))
        if self._buffer is None:
            self._buffer = x.new_zeros(x.shape[0], x.shape[1], self.span - self.stride)
        x = torch.cat([self._buffer, x], dim=2)
        count = (x.shape[2] - self.span) // self.stride + 1 if x.shape[2] >= self.span else 0
        self._buffer = x[:, :, count * self.stride:]
        if count == 0:
            return x.new_zeros(x.shape[0], self.conv.out_channels, 0)
        return conv1d(x[:, :, : (count - 1) * self.stride + self.span], self.conv.weight, self.conv.bias,
                      stride=self.stride, dilation=self.conv.dilation[0])


class StreamingGRU(StreamingLayer):
    """A single-layer ``nn.GRU`` over ``(batch, channels, T)`` that carries its hidden state while streaming."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gru = nn.GRU(channels, channels, batch_first=True)
        self._hidden: Optional[torch.Tensor] = None

    def reset_streaming(self) -> None:
        self._hidden = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[2] == 0:
            return x
        y, hidden = self.gru(x.transpose(1, 2), self._hidden if self.streaming_active else None)
        if self.streaming_active:
            self._hidden = hidden
        return y.transpose(1, 2)
