"""Streaming synthesis on an asyncio event loop: text source -> TTS stage -> audio sinks.

The mirror image of recognition's pipeline (``burble.streaming.loop``)::

    TextSource.read() -> TTSStage (Synthesizer.stream on a worker thread) -> AudioChunk -> sinks
                                                                                 |
                     WavSink (file) / PcmSink (stdout) / SpeakerSink (PlaybackBuffer -> PortAudio)

Each piece of text is synthesized as it arrives, and its audio goes to every sink chunk by chunk
while the codec LM is still generating, so a listener hears the first words after a few
hundred milliseconds. Generation runs on a worker thread, so the loop stays free for I/O (the
WebSocket ``/tts`` endpoint uses the same stage). The speaker sink plays from a
:class:`~burble.tts.playback.PlaybackBuffer` (a ring buffer with a prebuffer that grows after each
underrun): the loop writes into it, the PortAudio callback reads from it, and the writer waits for
room instead of overwriting audio not yet played.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, AsyncIterator, Iterable, Optional, Protocol, Sequence

import numpy as np

from burble.audio import pcm
from burble.tts.synthesizer import SynthesisOptions, Synthesizer


@dataclass
class AudioChunk:
    """Synthesized audio: ``samples`` (float32 mono) starting at sample ``start`` of the output."""

    start: int
    samples: np.ndarray


class TextSource(Protocol):
    async def read(self) -> Optional[str]:
        """The next piece of text to speak, or ``None`` at the end."""
        ...


class TextPieces:
    """Text from a list (a command-line argument, the lines of a file)."""

    def __init__(self, pieces: Iterable[str]) -> None:
        self._pieces = [p for p in pieces if p.strip()]

    async def read(self) -> Optional[str]:
        return self._pieces.pop(0) if self._pieces else None


class TextLines:
    """Lines of a text stream (stdin), each spoken as soon as it is complete."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    async def read(self) -> Optional[str]:
        while True:
            line = await asyncio.to_thread(self.stream.readline)
            if not line:
                return None
            if line.strip():
                return line


class AudioSink(Protocol):
    async def write(self, chunk: AudioChunk) -> None: ...

    async def close(self) -> None: ...


class WavSink:
    """A 16-bit WAV file, written as audio arrives (a temporary file renamed on close)."""

    def __init__(self, path: str | Path, sample_rate: int) -> None:
        import soundfile as sf

        self.path = Path(path)
        self._tmp = self.path.with_name(f".{self.path.name}.partial")
        self._file = sf.SoundFile(str(self._tmp), "w", samplerate=sample_rate, channels=1, format="WAV", subtype="PCM_16")

    async def write(self, chunk: AudioChunk) -> None:
        self._file.write(np.clip(chunk.samples, -1.0, 1.0))

    async def close(self) -> None:
        self._file.close()
        self._tmp.replace(self.path)

    async def abort(self) -> None:
        """Synthesis failed: leave no file (nor an earlier one half-overwritten)."""
        self._file.close()
        self._tmp.unlink(missing_ok=True)


class PcmSink:
    """Raw signed 16-bit little-endian mono PCM to a binary stream (stdout by default)."""

    def __init__(self, stream: Optional[IO[bytes]] = None) -> None:
        self.stream = stream if stream is not None else sys.stdout.buffer

    async def write(self, chunk: AudioChunk) -> None:
        self.stream.write(pcm.to_pcm16(chunk.samples).astype("<i2").tobytes())
        self.stream.flush()

    async def close(self) -> None:
        self.stream.flush()


class SpeakerSink:
    """The default output device through sounddevice/PortAudio, fed from a :class:`PlaybackBuffer`.

    Playback starts once ``prebuffer_seconds`` of audio wait (or the text is done); when synthesis
    falls behind the device, it pauses and refills rather than stuttering (``underruns`` counts it).
    """

    def __init__(self, sample_rate: int, *, device: Optional[int | str] = None, buffer_seconds: float = 4.0,
                 prebuffer_seconds: float = 0.25) -> None:
        import sounddevice as sd

        from burble.tts.playback import PlaybackBuffer

        self.sample_rate = sample_rate
        self.buffer = PlaybackBuffer(int(buffer_seconds * sample_rate), prebuffer=int(prebuffer_seconds * sample_rate),
                                     sample_rate=sample_rate)

        def callback(out: np.ndarray, frames: int, _time, _status) -> None:
            self.buffer.fill(out[:, 0])

        self._stream = sd.OutputStream(samplerate=sample_rate, channels=1, dtype="float32", device=device,
                                       callback=callback)
        self._stream.start()

    @property
    def underruns(self) -> int:
        """Times playback ran dry before the end and paused to refill."""
        return self.buffer.underruns

    async def write(self, chunk: AudioChunk) -> None:
        samples = chunk.samples
        while samples.size:
            room = self.buffer.room()
            if room == 0:
                await asyncio.sleep(0.02)
                continue
            self.buffer.write(samples[:room])
            samples = samples[room:]

    async def close(self) -> None:
        self.buffer.finish()
        while self.buffer.pending:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)  # the device's own buffer
        self._stream.stop()
        self._stream.close()


class TTSStage:
    """Text -> audio chunks, generated on a worker thread while the loop goes on."""

    def __init__(self, synthesizer: Synthesizer, options: SynthesisOptions = SynthesisOptions()) -> None:
        self.synthesizer = synthesizer
        self.options = options
        self.samples = 0

    async def speak(self, text: str) -> AsyncIterator[AudioChunk]:
        chunks = self.synthesizer.stream(text, self.options)
        done = object()
        try:
            while True:
                audio = await asyncio.to_thread(next, chunks, done)
                if audio is done:
                    break
                chunk = AudioChunk(self.samples, audio)  # type: ignore[arg-type]
                self.samples += chunk.samples.size
                yield chunk
        finally:
            chunks.close()


async def run_synthesis(source: TextSource, stage: TTSStage, sinks: Sequence[AudioSink]) -> int:
    """Speak everything ``source`` gives into every sink; returns the samples written.

    On an error the sinks that can (a WAV file) are aborted, the others closed, and it is raised.
    """
    try:
        while True:
            text = await source.read()
            if text is None:
                break
            async for chunk in stage.speak(text):
                for sink in sinks:
                    await sink.write(chunk)
    except BaseException:
        for sink in sinks:
            abort = getattr(sink, "abort", None)
            await (abort() if abort is not None else sink.close())
        raise
    for sink in sinks:
        await sink.close()
    return stage.samples
