"""Audio sources: where the pipeline's 16 kHz mono float32 audio comes from.

Every source has the same small interface (``AudioSource``): ``await open()``, then
``await read()`` returns the next ``AudioChunk`` (samples plus their absolute 16 kHz start index)
until it returns ``None`` at the end of the stream; ``stop()`` asks it to end (Ctrl-C), and
``await close()`` releases it. Chunk indices are contiguous except where audio was lost: then the
next chunk's ``start`` jumps past the gap, so audio time stays wall-clock time.

- ``PushSource``: a producer (any thread or task) pushes audio at any rate with ``push``; the
  consumer reads it resampled to 16 kHz. The capture side is a ``RingBuffer`` (bounded memory,
  overflow drops the oldest audio and counts it). The WebSocket server's network source is a
  ``PushSource`` fed by the connection task.
- ``MicrophoneSource``: a ``PushSource`` fed by a sounddevice/PortAudio ``InputStream`` callback.
  The callback only down-mixes and copies into the ring buffer; resampling happens in ``read``.
- ``FileSource`` / ``ArraySource``: a recording, paced in real time (``realtime=True``, optionally
  ``speed`` times faster) or as fast as the consumer takes it (``realtime=False``).

``live`` tells the pipeline whether a source can wait: live audio (microphone, network, paced
file) is never blocked, so a slow consumer loses the oldest audio; a non-live source is simply
read more slowly (back-pressure) and nothing is lost.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import numpy as np

from burble.audio import SAMPLE_RATE
from burble.audio.resample import StreamingResampler
from burble.streaming.ring_buffer import RingBuffer, to_float32

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AudioChunk:
    """Contiguous 16 kHz mono float32 samples starting at absolute sample index ``start``."""

    samples: np.ndarray
    start: int

    @property
    def end(self) -> int:
        return self.start + len(self.samples)

    def __len__(self) -> int:
        return len(self.samples)


def downmix(block: np.ndarray) -> np.ndarray:
    """``(frames,)`` or ``(frames, channels)`` -> mono ``(frames,)`` (channel mean)."""
    block = np.asarray(block)
    if block.ndim == 1:
        return block
    if block.ndim != 2:
        raise ValueError(f"expected (frames,) or (frames, channels) audio, got shape {block.shape}")
    if block.shape[1] == 1:
        return block[:, 0]
    if block.dtype == np.int16:
        return block.mean(axis=1).astype(np.int16)
    return block.mean(axis=1, dtype=np.float32)


class AudioSource(ABC):
    """Base of all sources (see the module docstring).

    Attributes:
      sample_rate: rate of the chunks ``read`` returns (always 16 kHz).
      live: True if audio arrives in real time and cannot wait for the consumer.
      start_time: ``time.monotonic()`` at which sample 0 was captured (``None`` before that).
    """

    sample_rate: int = SAMPLE_RATE
    live: bool = True

    def __init__(self) -> None:
        self.start_time: Optional[float] = None
        self._stop = threading.Event()

    async def open(self) -> None:
        """Acquire the device / file. Called once before the first ``read``."""

    @abstractmethod
    async def read(self) -> Optional[AudioChunk]:
        """The next chunk of audio, waiting for it if needed; ``None`` at the end of the stream."""

    async def close(self) -> None:
        """Release the device / file. Safe to call more than once."""

    def stop(self) -> None:
        """Ask the source to end: ``read`` returns what is buffered, then ``None``. Thread-safe."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def dropped_seconds(self) -> float:
        """Audio the source itself lost (capture overflow), in seconds."""
        return 0.0

    async def __aenter__(self) -> "AudioSource":
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class PushSource(AudioSource):
    """Audio pushed by a producer at ``input_rate``, read by the consumer at 16 kHz.

    Args:
      input_rate: sample rate of pushed audio.
      buffer_seconds: capture buffer size; if the consumer falls further behind, the oldest audio
        is dropped and counted (``dropped_seconds``).
      block_seconds: ``read`` waits until at least this much audio is buffered (or the end).
      poll_seconds: how often ``read`` checks for new audio while waiting.
      name: used in log messages.
    """

    def __init__(
        self,
        input_rate: int = SAMPLE_RATE,
        *,
        buffer_seconds: float = 5.0,
        block_seconds: float = 0.05,
        poll_seconds: float = 0.005,
        name: str = "push source",
    ) -> None:
        super().__init__()
        self.input_rate = int(input_rate)
        self.name = name
        self.ring = RingBuffer.from_seconds(buffer_seconds, sample_rate=self.input_rate, name=f"{name} capture buffer")
        self._resampler = StreamingResampler(self.input_rate, SAMPLE_RATE)
        self._block = max(1, int(block_seconds * self.input_rate))
        self._poll = poll_seconds
        self._ended = threading.Event()
        self._next_input = 0  # input index the resampler expects next
        self._out: deque[AudioChunk] = deque()
        self._done = False

    # ------------------------------------------------------------------------------- producer
    def push(self, samples: np.ndarray) -> None:
        """Add audio (producer side; any thread). Mono or ``(frames, channels)``, float or int16."""
        if self.start_time is None:
            self.start_time = time.monotonic() - len(samples) / self.input_rate
        self.ring.write(downmix(samples))

    def end(self) -> None:
        """The producer has no more audio (e.g. the network peer closed the stream)."""
        self._ended.set()

    # ------------------------------------------------------------------------------- consumer
    @property
    def dropped_seconds(self) -> float:
        return self.ring.dropped_seconds

    @property
    def finished(self) -> bool:
        return self._ended.is_set() or self._stop.is_set()

    async def read(self) -> Optional[AudioChunk]:
        while True:
            if self._out:
                return self._out.popleft()
            if self._done:
                return None
            while self.ring.pending < self._block and not self.finished:
                await asyncio.sleep(self._poll)
            finished = self.finished  # read before consuming: all audio pushed before end() is in
            start, block = self.ring.consume()
            if start > self._next_input:
                # The capture buffer overflowed: finish the audio before the gap and restart the
                # resampler after it, so 16 kHz indices keep matching capture time.
                self._emit(self._resampler.flush())
                self._resampler.reset(start)
            if len(block):
                self._emit(self._resampler.process(block))
                self._next_input = start + len(block)
            if finished:
                # Audio pushed after end()/stop() (a microphone runs until closed) is ignored.
                self._emit(self._resampler.flush())
                self._done = True

    def _emit(self, samples: np.ndarray) -> None:
        # The resampler has already advanced: its next index is one past these samples.
        if len(samples):
            self._out.append(AudioChunk(samples, self._resampler.next_output_index - len(samples)))

    async def close(self) -> None:
        self.end()


# ------------------------------------------------------------------------------------ microphone
@dataclass(frozen=True)
class InputDevice:
    """A capture device as PortAudio reports it."""

    index: int
    name: str
    max_input_channels: int
    default_samplerate: float
    hostapi: str
    is_default: bool

    def __str__(self) -> str:
        mark = "*" if self.is_default else " "
        return (
            f"{mark} {self.index:3d}  {self.name}  ({self.hostapi}, {self.max_input_channels} in, "
            f"{self.default_samplerate:g} Hz)"
        )


def _sounddevice() -> Any:
    try:
        import sounddevice
    except OSError as e:  # the Python package is there but the PortAudio library is not
        raise RuntimeError(
            "PortAudio is not available (on Debian/Ubuntu: apt install libportaudio2)"
        ) from e
    except ImportError as e:
        raise ImportError("microphone input needs sounddevice: pip install sounddevice") from e
    return sounddevice


def _parse_device(device: Union[int, str, None]) -> Union[int, str, None]:
    if isinstance(device, str) and device.strip().isdigit():
        return int(device)  # "--device 3" on the command line means index 3
    return device


class MicrophoneSource(PushSource):
    """Live capture from a PortAudio input device (sounddevice ``InputStream``).

    The callback (a PortAudio thread) only down-mixes and copies the block into the capture ring
    buffer; ``read`` resamples to 16 kHz in the consumer.

    Args:
      device: device index, a (sub)string of its name, or ``None`` for the default input.
      sample_rate: capture rate; ``None`` opens at 16 kHz if the device accepts it, else at the
        device's default rate (then resampled).
      channels: channels to capture (down-mixed to mono).
      block_seconds: audio per callback; 20 ms keeps wake-ups (and GIL hand-offs with the
        recognizer thread) at 50 per second, far below any caption latency.
      buffer_seconds: capture buffer; overflow drops the oldest audio and is counted.
      latency: PortAudio latency hint (``"low"``, ``"high"`` or seconds).
    """

    def __init__(
        self,
        device: Union[int, str, None] = None,
        *,
        sample_rate: Optional[int] = None,
        channels: int = 1,
        block_seconds: float = 0.02,
        buffer_seconds: float = 5.0,
        latency: Union[str, float] = "low",
    ) -> None:
        sd = _sounddevice()
        self.device = _parse_device(device)
        self.channels = channels
        if sample_rate is None:
            try:
                sd.check_input_settings(device=self.device, samplerate=SAMPLE_RATE, channels=channels, dtype="float32")
                sample_rate = SAMPLE_RATE
            except Exception:  # PortAudio rejects the rate: use the device's own and resample
                sample_rate = int(sd.query_devices(self.device, "input")["default_samplerate"])
        super().__init__(sample_rate, buffer_seconds=buffer_seconds, name="microphone")
        if block_seconds <= 0:
            raise ValueError("block_seconds must be > 0")
        self.blocksize = max(1, int(round(block_seconds * sample_rate)))
        self.latency = latency
        self.callbacks = 0
        self.status_errors = 0
        self._first_callback = threading.Event()
        self._stream: Any = None

    def _callback(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        # Runs on PortAudio's thread: keep it to a copy into the ring buffer.
        if status:
            self.status_errors += 1
        self.push(indata)
        self.callbacks += 1
        if not self._first_callback.is_set():
            self._first_callback.set()

    def _open_stream(self) -> None:
        sd = _sounddevice()
        self._stream = sd.InputStream(
            device=self.device,
            samplerate=self.input_rate,
            channels=self.channels,
            dtype="float32",
            blocksize=self.blocksize,
            latency=self.latency,
            callback=self._callback,
        )
        self._stream.start()

    async def open(self) -> None:
        # Opening can take a while (PulseAudio / ALSA negotiation): keep the event loop free.
        await asyncio.to_thread(self._open_stream)

    def wait_started(self, timeout: float = 5.0) -> bool:
        """Block until the first callback arrived (PortAudio may take ~1 s to start delivering)."""
        return self._first_callback.wait(timeout)

    async def close(self) -> None:
        self.end()
        stream, self._stream = self._stream, None
        if stream is not None:
            await asyncio.to_thread(self._close_stream, stream)
        if self.status_errors:
            logger.warning("microphone reported %d input status errors (overflows)", self.status_errors)

    @staticmethod
    def _close_stream(stream: Any) -> None:
        stream.stop()
        stream.close()

    @staticmethod
    def list_devices() -> list[InputDevice]:
        """All devices with input channels."""
        sd = _sounddevice()
        try:
            default_in = sd.default.device[0]
        except Exception:
            default_in = -1
        hostapis = sd.query_hostapis()
        out = []
        for d in sd.query_devices():
            if d["max_input_channels"] > 0:
                out.append(
                    InputDevice(
                        index=int(d["index"]),
                        name=str(d["name"]),
                        max_input_channels=int(d["max_input_channels"]),
                        default_samplerate=float(d["default_samplerate"]),
                        hostapi=str(hostapis[d["hostapi"]]["name"]),
                        is_default=int(d["index"]) == default_in,
                    )
                )
        return out

    @staticmethod
    def rescan_devices() -> None:
        """Re-read PortAudio's device list (it is built once, when sounddevice is imported).

        Call after the sound server changed, e.g. a PulseAudio daemon started; no stream may be
        open at the time.
        """
        sd = _sounddevice()
        sd._terminate()  # sounddevice's documented way to re-scan: terminate and re-initialise
        sd._initialize()

    @staticmethod
    def format_devices() -> str:
        """A table of input devices for ``--list-devices`` (``*`` marks the default)."""
        devices = MicrophoneSource.list_devices()
        if not devices:
            return "no input devices found"
        return "\n".join(str(d) for d in devices)


# ------------------------------------------------------------------------------------ recordings
class _RecordingSource(AudioSource):
    """Reads blocks of a recording, resamples them to 16 kHz and paces them like a live capture."""

    def __init__(self, *, realtime: bool, speed: float, block_seconds: float, repeat: int) -> None:
        super().__init__()
        if speed <= 0:
            raise ValueError("speed must be > 0")
        if repeat < 1:
            raise ValueError("repeat must be >= 1")
        if block_seconds <= 0:
            raise ValueError("block_seconds must be > 0")
        self.live = realtime
        self.speed = speed
        self.block_seconds = block_seconds
        self.repeat = repeat
        self._resampler: Optional[StreamingResampler] = None
        self._blocks: Optional[Iterator[np.ndarray]] = None
        self._done = False

    @property
    def input_rate(self) -> int:
        raise NotImplementedError

    def _iter_blocks(self) -> Iterator[np.ndarray]:
        raise NotImplementedError

    async def read(self) -> Optional[AudioChunk]:
        if self._done:
            return None
        if self._blocks is None:
            self._resampler = StreamingResampler(self.input_rate, SAMPLE_RATE)
            self._blocks = self._iter_blocks()
            self.start_time = time.monotonic()
        assert self._resampler is not None
        block = None if self.stopped else next(self._blocks, None)
        index = self._resampler.next_output_index
        if block is None:
            self._done = True
            samples = self._resampler.flush()
        else:
            samples = self._resampler.process(block)
        chunk = AudioChunk(samples, index)
        if self.live:
            # A real capture delivers a block once its last sample was recorded.
            due = self.start_time + chunk.end / SAMPLE_RATE / self.speed
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        else:
            await asyncio.sleep(0)  # let other tasks run between blocks
        if self._done and len(samples) == 0:
            return None
        return chunk


class FileSource(_RecordingSource):
    """An audio file (anything soundfile reads) streamed as if it were being captured.

    Args:
      path: the file.
      realtime: pace blocks in real time (a live source); False reads as fast as consumed.
      speed: with ``realtime``, play this many times faster than real time.
      block_seconds: size of each block read from the file.
      repeat: play the file this many times back to back (long-running tests).
    """

    def __init__(
        self,
        path: Union[str, Path],
        *,
        realtime: bool = True,
        speed: float = 1.0,
        block_seconds: float = 0.05,
        repeat: int = 1,
    ) -> None:
        import soundfile

        super().__init__(realtime=realtime, speed=speed, block_seconds=block_seconds, repeat=repeat)
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"audio file not found: {self.path}")
        try:
            info = soundfile.info(str(self.path))
        except RuntimeError as e:
            raise ValueError(f"cannot read audio file {self.path}: {e}") from e
        self._rate = int(info.samplerate)
        self.duration = info.frames / info.samplerate * repeat

    @property
    def input_rate(self) -> int:
        return self._rate

    def _iter_blocks(self) -> Iterator[np.ndarray]:
        import soundfile

        n = max(1, int(self.block_seconds * self._rate))
        with soundfile.SoundFile(str(self.path)) as f:
            for _ in range(self.repeat):
                f.seek(0)
                while True:
                    block = f.read(n, dtype="float32", always_2d=True)
                    if len(block) == 0:
                        break
                    yield downmix(block)


class ArraySource(_RecordingSource):
    """An in-memory recording streamed like ``FileSource`` (tests, evaluation).

    Args:
      audio: mono samples (float or int16) or ``(frames, channels)``.
      sample_rate: rate of ``audio``.
      realtime, speed, block_seconds, repeat: as for ``FileSource``.
    """

    def __init__(
        self,
        audio: np.ndarray,
        sample_rate: int = SAMPLE_RATE,
        *,
        realtime: bool = True,
        speed: float = 1.0,
        block_seconds: float = 0.05,
        repeat: int = 1,
    ) -> None:
        super().__init__(realtime=realtime, speed=speed, block_seconds=block_seconds, repeat=repeat)
        self.audio = to_float32(downmix(audio))
        self._rate = int(sample_rate)
        self.duration = len(self.audio) / self._rate * repeat

    @property
    def input_rate(self) -> int:
        return self._rate

    def _iter_blocks(self) -> Iterator[np.ndarray]:
        n = max(1, int(self.block_seconds * self._rate))
        for _ in range(self.repeat):
            for i in range(0, len(self.audio), n):
                yield self.audio[i : i + n]
