"""Streaming sample-rate conversion (any rate -> 16 kHz) for audio that arrives in pieces.

Resampling each capture block independently would click at every block boundary, so the
converter keeps state: output sample ``n`` sits at input time ``n * in_rate / out_rate`` and is
a windowed-sinc (Kaiser) interpolation of the input around that time. For a rational ratio
``L / M`` the fractional positions repeat every ``L`` outputs, so the filter taps are a fixed
``(L, taps)`` polyphase table computed once. The kernel is centred (zero phase): output times
line up exactly with input times, which keeps word timestamps honest.

Feeding pieces gives exactly the samples a one-shot ``resample`` of the whole signal gives.
It runs in the consumer (event loop side), never in the capture callback.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np


def _kaiser_sinc_table(up: int, down: int, zero_crossings: int, rolloff: float, beta: float) -> tuple[np.ndarray, int]:
    """Polyphase table ``(up, 2 * half)`` and the half width ``half`` in input samples."""
    cutoff = min(1.0, up / down) * rolloff  # fraction of the input Nyquist frequency kept
    half = int(math.ceil(zero_crossings / cutoff))
    phases = np.arange(up, dtype=np.float64)[:, None] / up  # fractional input position per phase
    k = np.arange(2 * half, dtype=np.float64)[None, :]
    tau = phases + (half - 1) - k  # distance from output time to input tap, in input samples
    window = np.kaiser(2 * 1024 + 1, beta)  # sampled finely, interpolated below
    pos = np.clip(tau / (half + 1e-9), -1.0, 1.0)
    w = np.interp(pos, np.linspace(-1.0, 1.0, len(window)), window)
    w[np.abs(tau) >= half] = 0.0
    table = cutoff * np.sinc(cutoff * tau) * w
    table /= table.sum(axis=1, keepdims=True)  # unity gain at DC for every phase
    return table.astype(np.float32), half


class StreamingResampler:
    """Converts a mono stream from ``input_rate`` to ``output_rate`` piece by piece.

    Args:
      input_rate: rate of the audio given to ``process``.
      output_rate: rate of the audio it returns.
      zero_crossings: filter half-length in zero crossings of the lower rate (quality vs cost).
      rolloff: passband edge as a fraction of the lower Nyquist frequency.
      beta: Kaiser window shape.
    """

    def __init__(
        self,
        input_rate: int,
        output_rate: int = 16000,
        *,
        zero_crossings: int = 16,
        rolloff: float = 0.945,
        beta: float = 8.6,
    ) -> None:
        if input_rate <= 0 or output_rate <= 0:
            raise ValueError(f"sample rates must be > 0, got {input_rate} -> {output_rate}")
        self.input_rate = int(input_rate)
        self.output_rate = int(output_rate)
        g = math.gcd(self.input_rate, self.output_rate)
        self._up = self.output_rate // g
        self._down = self.input_rate // g
        self.identity = self._up == self._down
        if not self.identity:
            self._table, self._half = _kaiser_sinc_table(self._up, self._down, zero_crossings, rolloff, beta)
        else:
            self._table, self._half = np.ones((1, 1), np.float32), 0
        self.reset()

    def reset(self, input_index: int = 0) -> None:
        """Restart the stream at absolute input sample ``input_index`` (after a gap).

        Input before it counts as silence; the next output index is the first output whose time is
        at or after ``input_index``.
        """
        h = self._half
        # Buffer starts ``h`` zeros before the first input sample so early outputs have left context.
        self._buf = np.zeros(h, dtype=np.float32)
        self._buf_start = input_index - h  # absolute input index of self._buf[0]
        self._in_end = input_index  # absolute index one past the last input sample received
        self._next_out = -(-input_index * self._up // self._down)  # ceil

    @property
    def next_output_index(self) -> int:
        """Absolute output index of the next sample ``process`` will return."""
        return self._next_out

    def output_index(self, input_index: int) -> int:
        """The first output index at or after input index ``input_index``."""
        return -(-input_index * self._up // self._down)

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Add input samples; return every output sample that now has its full right context."""
        x = np.asarray(samples, dtype=np.float32)
        if x.ndim != 1:
            raise ValueError(f"expected mono 1-D audio, got shape {x.shape}")
        if self.identity:
            self._in_end += len(x)
            self._next_out += len(x)
            return x.copy()
        self._buf = np.concatenate([self._buf, x])
        self._in_end += len(x)
        return self._emit(self._in_end)

    def flush(self) -> np.ndarray:
        """End of stream: return the remaining outputs (the input is padded with silence)."""
        if self.identity:
            return np.zeros(0, dtype=np.float32)
        end = self._in_end
        self._buf = np.concatenate([self._buf, np.zeros(self._half, dtype=np.float32)])
        self._in_end += self._half
        out = self._emit(self._in_end, last_output=self.output_index(end))
        self._in_end = end
        return out

    def _emit(self, available_end: int, last_output: Optional[int] = None) -> np.ndarray:
        up, down, h = self._up, self._down, self._half
        # Output n reads inputs up to floor(n * down / up) + h, which must be < available_end:
        # floor(n * down / up) <= a  <=>  n <= ((a + 1) * up - 1) // down.
        a = available_end - 1 - h
        stop = ((a + 1) * up - 1) // down + 1
        if last_output is not None:
            stop = min(stop, last_output)
        n0 = self._next_out
        if stop <= n0:
            return np.zeros(0, dtype=np.float32)
        out = np.empty(stop - n0, dtype=np.float32)
        taps = np.arange(2 * h)
        block = 4096  # bounds the (outputs x taps) temporary
        for b0 in range(n0, stop, block):
            ns = np.arange(b0, min(stop, b0 + block), dtype=np.int64)
            pos = ns * down
            base, phase = pos // up, pos % up
            idx = (base - h + 1 - self._buf_start)[:, None] + taps[None, :]
            out[b0 - n0 : b0 - n0 + len(ns)] = np.einsum("ij,ij->i", self._buf[idx], self._table[phase])
        self._next_out = stop
        # Drop input no future output needs (keep from the next output's first tap).
        keep_from = (self._next_out * down) // up - h + 1
        cut = max(0, keep_from - self._buf_start)
        if cut:
            self._buf = self._buf[cut:]
            self._buf_start += cut
        return out


def resample(audio: np.ndarray, input_rate: int, output_rate: int = 16000) -> np.ndarray:
    """One-shot conversion of a whole mono signal (same filter as ``StreamingResampler``)."""
    r = StreamingResampler(input_rate, output_rate)
    if r.identity:
        return np.asarray(audio, dtype=np.float32).copy()
    return np.concatenate([r.process(audio), r.flush()])
