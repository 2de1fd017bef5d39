"""Sample-rate conversion to 16 kHz, for whole signals and for audio that arrives in pieces: soxr.

Both paths run libsoxr's linear-phase "HQ" filter through ``soxr.ResampleStream``, and soxr's
output does not depend on how the input is cut, so feeding pieces gives exactly the samples
``resample`` gives for the whole signal. Linear phase with the delay compensated means output
sample ``n`` sits at input time ``n * in_rate / out_rate``: no shift, so word timestamps stay honest.

Why soxr rather than the Kaiser-sinc polyphase resampler burble used to carry, or torchaudio's
sinc (measured on this machine, one thread; SNR of the 16 kHz output against the exact
band-limited signal, LJ001-0001 speech band-limited to 7 kHz, 3.6 kHz for 8 kHz input):

==========  ==============  =======  ==========
input rate  hand-written    soxr HQ  torchaudio
==========  ==============  =======  ==========
48 kHz      47.9 dB         131.5    37.9
44.1 kHz    48.0 dB         84.3     37.9
8 kHz       49.9 dB         130.2    42.8
==========  ==============  =======  ==========

A 7 kHz tone from 48 kHz keeps 134 dB SNR through soxr (20 dB hand-written: its passband ended at
7.56 kHz); a 12 kHz tone (which would alias to 4 kHz) is left at -186 dBFS (-107 hand-written).
Streaming 60 s of 48 kHz audio in 20 ms blocks takes 0.025 s with soxr, 0.28 s hand-written.
The price is latency: soxr withholds about 33 ms of output at 48 kHz (89 ms at 8 kHz) until the
filter's right context has arrived, against about 1 ms for the shorter hand-written filter; that
is below one Whisper decode step, so quality and speed win.

Conversion runs in the consumer (event loop side), never in a capture callback.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from burble.audio import SAMPLE_RATE

_QUALITY = "HQ"  # 20-bit precision, linear phase: the measurements above


def _soxr_stream(input_rate: int, output_rate: int) -> Any:
    import soxr

    return soxr.ResampleStream(input_rate, output_rate, 1, dtype="float32", quality=_QUALITY)


def _mono_float32(samples: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected mono 1-D audio, got shape {x.shape}")
    return x


class StreamingResampler:
    """Converts a mono stream from ``input_rate`` to ``output_rate`` piece by piece.

    Indices are absolute: output index ``n`` is at input time ``n * input_rate / output_rate``.
    ``process`` returns what is ready; ``flush`` ends the stream (the input is padded with
    silence) and returns the outputs up to the last input sample's time.

    Args:
      input_rate: rate of the audio given to ``process``.
      output_rate: rate of the audio it returns.
    """

    def __init__(self, input_rate: int, output_rate: int = SAMPLE_RATE) -> None:
        if input_rate <= 0 or output_rate <= 0:
            raise ValueError(f"sample rates must be > 0, got {input_rate} -> {output_rate}")
        self.input_rate = int(input_rate)
        self.output_rate = int(output_rate)
        common = math.gcd(self.input_rate, self.output_rate)
        self._up = self.output_rate // common
        self._down = self.input_rate // common
        self.identity = self._up == self._down
        self._stream: Any = None if self.identity else _soxr_stream(self.input_rate, self.output_rate)
        self.reset()

    def reset(self, input_index: int = 0) -> None:
        """Restart the stream at absolute input sample ``input_index`` (after a gap).

        Input before it counts as silence; the next output index is the first output whose time is
        at or after ``input_index``.
        """
        self._in_end = input_index  # absolute index one past the last input sample received
        self._next_out = self.output_index(input_index)
        if self.identity:
            return
        self._stream.clear()
        # soxr's first output sits at its first input's time. Start it at the last input index at
        # or before ``input_index`` that falls exactly on an output time (a multiple of ``down``),
        # fed with silence up to ``input_index``, so outputs keep their absolute times; outputs
        # before ``_next_out`` (times before ``input_index``) are dropped as they come.
        aligned_start = (input_index // self._down) * self._down
        self._to_drop = self._next_out - aligned_start // self._down * self._up
        if input_index > aligned_start:
            self._take(self._stream.resample_chunk(np.zeros(input_index - aligned_start, np.float32)))

    @property
    def next_output_index(self) -> int:
        """Absolute output index of the next sample ``process`` will return."""
        return self._next_out

    def output_index(self, input_index: int) -> int:
        """The first output index at or after input index ``input_index``."""
        return -(-input_index * self._up // self._down)

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Add input samples; return every output sample that now has its full right context."""
        x = _mono_float32(samples)
        self._in_end += len(x)
        if self.identity:
            self._next_out += len(x)
            return x.copy()
        return self._take(self._stream.resample_chunk(x))

    def flush(self) -> np.ndarray:
        """End of stream: return the remaining outputs (the input is padded with silence).

        Afterwards the resampler continues as if ``reset`` at the end of the input.
        """
        if self.identity:
            return np.zeros(0, dtype=np.float32)
        end = self._in_end
        last_output = self.output_index(end)
        # soxr's final call rounds the output length to the nearest sample; enough trailing
        # silence makes it cover every output up to the last input sample's time, and the surplus
        # (outputs past the end of the input) is cut.
        silence = np.zeros(-(-self._down // self._up) + 1, np.float32)
        first = self._next_out
        produced = self._take(self._stream.resample_chunk(silence, last=True))
        self.reset(end)
        return produced[: max(0, last_output - first)]

    def _take(self, produced: np.ndarray) -> np.ndarray:
        """Account soxr's output: drop the alignment outputs, advance ``next_output_index``."""
        produced = np.asarray(produced, dtype=np.float32).reshape(-1)
        if self._to_drop:
            dropped = min(self._to_drop, len(produced))
            produced = produced[dropped:]
            self._to_drop -= dropped
        self._next_out += len(produced)
        return produced


def resample(audio: np.ndarray, input_rate: int, output_rate: int = SAMPLE_RATE) -> np.ndarray:
    """One-shot conversion of a whole mono signal (the same filter as ``StreamingResampler``).

    Returns:
      float32 1-D array of ``ceil(len(audio) * output_rate / input_rate)`` samples.
    """
    converter = StreamingResampler(input_rate, output_rate)
    if converter.identity:
        return _mono_float32(audio).copy()
    return np.concatenate([converter.process(audio), converter.flush()])
