"""Whisper's log-mel features computed incrementally: samples in as they arrive, final frames out.

:func:`burble.asr.frontend.log_mel_spectrogram` sees the whole input: its STFT is centred
(frame ``k`` covers samples ``160k - 200 .. 160k + 199``, reflect-padded at both ends) and its
dynamic-range clamp is relative to the maximum over the whole input. :class:`StreamingLogMel`
computes the same frames causally:

* **Framing.** A frame is emitted as soon as its 400-sample window has arrived, i.e. with 200
  samples (12.5 ms) of right context; frame 0 also needs sample 200, the far end of the start's
  reflect padding. :meth:`StreamingLogMel.flush` ends the stream with the offline edge handling:
  reflect padding at the end, and the last STFT frame dropped, so a stream of ``L`` samples
  yields ``L // 160`` frames, as offline. Streams of at most 200 samples yield none (offline
  refuses them: reflect padding needs more samples than it pads).
* **Clamp.** Emitted frames are final: they are never revised. With ``clamp="running"`` (the
  default) each frame is clamped at 8 (log10 units) below the running maximum of every frame
  seen so far, including itself. The running maximum never decreases, so the result equals the
  offline features whenever the stream's loudest frame comes early (the usual case for speech
  after a short pause); a frame emitted before a louder one keeps a lower floor than offline
  would give it (only values more than 8 below the later maximum differ, i.e. near-silence).
  ``clamp="none"`` skips the clamp (the scaling stays), for callers that clamp themselves.
  Measured on the 21 dev recordings (10 ms pushes): 2.7% of values differ from offline, in the
  14.7% of frames before each recording's loudest frame, by at most 0.96 (scaled units); greedy
  tiny.en through the streaming encoder gave the same text from streaming and offline features
  on all 20 short clips.
* **Cost.** The state keeps only the samples of windows not emitted yet (fewer than 400 plus the
  pushed block), so a push costs O(new samples) and never recomputes the past.

Usage::

    frontend = StreamingLogMel()
    for block in blocks:                  # 16 kHz samples, any block size
        mel = frontend.push(block)        # (n_mels, n_new) final frames
    mel = frontend.flush()                # the last frames; reset() starts the next stream
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from burble.asr.frontend import HOP_LENGTH, N_FFT, log_mel_from_power, power_spectrum, scale_log_mel

ClampMode = Literal["running", "none"]

# Reflect padding of the centred STFT: N_FFT // 2 samples mirrored about each end sample (the
# end sample itself not repeated), so padding one end needs PAD + 1 samples.
PAD = N_FFT // 2


@dataclass(frozen=True)
class StreamingLogMelOptions:
    """How the streaming features are computed.

    Args:
      n_mels: 80 (or 128 for large-v3).
      clamp: ``"running"`` clamps each frame at 8 below the running maximum (see the module
        docstring for how that differs from offline); ``"none"`` emits the scaled log-mel unclamped.
    """

    n_mels: int = 80
    clamp: ClampMode = "running"


class StreamingLogMel:
    """One stream's incremental log-mel frontend.

    Args:
      options: mel bins and clamp mode.

    Attributes:
      n_samples: samples pushed since the last reset.
      n_frames: frames emitted since the last reset.
      peak: the running maximum of the unclamped log10 mel (``-inf`` before the first frame).
      finished: whether :meth:`flush` has ended the stream.
    """

    def __init__(self, options: StreamingLogMelOptions | None = None) -> None:
        self.options = options or StreamingLogMelOptions()
        if self.options.clamp not in ("running", "none"):
            raise ValueError(f"unknown clamp mode {self.options.clamp!r}")
        self.reset()

    def reset(self) -> None:
        """Forget the stream: the next push starts a new one."""
        self.n_samples = 0
        self.n_frames = 0
        self.peak = float("-inf")
        self.finished = False
        # Samples of the *padded* signal (reflect padding, then the audio) from the first sample
        # of frame n_frames on; before the start padding exists (fewer than PAD + 1 samples) it
        # holds the raw samples.
        self._buffer = torch.zeros(0, dtype=torch.float32)
        self._padded = False

    @property
    def buffered_samples(self) -> int:
        """Samples held for windows not emitted yet (fewer than 400 between pushes)."""
        return self._buffer.numel()

    def push(self, samples: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Append 16 kHz samples and return the frames whose windows became complete.

        Args:
          samples: 1-D samples (any length, including 0).

        Returns:
          ``(n_mels, n_new)`` final frames, in order after those returned before.
        """
        if self.finished:
            raise RuntimeError("the stream was flushed; call reset() to start another")
        new = torch.as_tensor(samples, dtype=torch.float32)
        if new.dim() != 1:  # flattening (n, channels) would interleave channels silently
            raise ValueError(f"expected 1-D mono samples, got shape {tuple(new.shape)}")
        self.n_samples += new.numel()
        self._buffer = torch.cat([self._buffer, new])
        if not self._padded:
            if self.n_samples <= PAD:
                return self._empty()
            # The start padding: samples PAD .. 1 mirrored before sample 0, as torch.stft's reflect.
            self._buffer = torch.cat([self._buffer[1 : PAD + 1].flip(0), self._buffer])
            self._padded = True
        return self._emit(self._buffer, self._complete_frames(self._buffer.numel()))

    def flush(self) -> torch.Tensor:
        """End the stream: the remaining frames with reflect padding at the end.

        Returns:
          ``(n_mels, n_left)`` frames; with those pushed before, ``n_samples // 160`` in all
          (none for streams of at most 200 samples).
        """
        if self.finished:
            raise RuntimeError("the stream was already flushed; call reset() to start another")
        self.finished = True
        if not self._padded:
            return self._empty()
        # The buffer ends with at least PAD + 1 real samples (it holds >= 240 padded samples
        # of which at most PAD are start padding, or the whole short stream), so the end
        # padding mirrors samples L-2 .. L-PAD-1 of the stream.
        end = self._buffer[-(PAD + 1) : -1].flip(0)
        padded = torch.cat([self._buffer, end])
        left = self.n_samples // HOP_LENGTH - self.n_frames  # Whisper drops the last STFT frame
        return self._emit(padded, left)

    # -- internals -------------------------------------------------------------------------------

    def _complete_frames(self, buffered: int) -> int:
        """Frames whose whole window lies in ``buffered`` samples from the buffer's start."""
        return 0 if buffered < N_FFT else 1 + (buffered - N_FFT) // HOP_LENGTH

    def _emit(self, padded: torch.Tensor, count: int) -> torch.Tensor:
        """Compute ``count`` frames from the start of ``padded`` and drop their hops from the buffer."""
        if count <= 0:
            return self._empty()
        span = padded[: (count - 1) * HOP_LENGTH + N_FFT]
        log_spec = log_mel_from_power(power_spectrum(span, center=False), self.options.n_mels)
        self.n_frames += count
        # Frame n_frames starts count hops further on; its window may overlap the emitted ones.
        self._buffer = self._buffer[count * HOP_LENGTH :].clone()
        if self.options.clamp == "none":
            return scale_log_mel(log_spec, float("-inf"))
        # Each frame's floor counts itself and every earlier frame: the running max per frame.
        running = torch.cummax(log_spec.amax(dim=0), dim=0).values.clamp(min=self.peak)
        self.peak = float(running[-1])
        return scale_log_mel(log_spec, running)

    def _empty(self) -> torch.Tensor:
        return torch.zeros(self.options.n_mels, 0, dtype=torch.float32)
