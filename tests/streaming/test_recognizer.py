"""Streaming Whisper end to end: real model, real recordings, the real event loop."""

import asyncio
import resource
import time

import numpy as np
import pytest

import burble
from burble.audio.io import load_audio
from burble.metrics.wer import corpus_wer
from burble.streaming.loop import PipelineOptions, asr_pipeline
from burble.streaming.recognizer import StreamingOptions, WhisperStreamingRecognizer
from burble.streaming.factory import RecognizerChoice
from burble.streaming.sources import ArraySource, MicrophoneSource
from burble.testing import dev_audio_items, dev_item, require_shared
from burble.testing.virtual_mic import VirtualMicrophone, unavailable_reason


@pytest.fixture(scope="module")
def asr():
    return burble.load_model("tiny.en")


class Collect:
    def __init__(self):
        self.events = []

    def write(self, event):
        self.events.append(event)

    def close(self):
        pass

    def committed_text(self):
        return "".join(e.text for e in self.events if e.type == "final")


def stream_array(asr, audio, *, chunk=1.0, options=StreamingOptions(), choice=RecognizerChoice()):
    recognizer = choice.build(asr, options)
    sink = Collect()
    pipeline = asr_pipeline(ArraySource(audio, realtime=False), recognizer, [sink], options=PipelineOptions(chunk_seconds=chunk))
    metrics = asyncio.run(pipeline.run())
    return sink, recognizer, metrics


def test_direct_accept_commits_words_with_times_and_endpoint(asr):
    audio = load_audio("examples/jfk.wav")
    recognizer = WhisperStreamingRecognizer(asr, StreamingOptions(speculative=True))
    events = []
    for i in range(0, len(audio), 16000):
        events += recognizer.accept(audio[i : i + 16000], i)
    events += recognizer.flush()
    finals = [e for e in events if e.type == "final"]
    words = [w for e in finals for w in e.words]
    text = "".join(w.word for w in words).lower()
    assert "ask not what your country can do for you" in text.replace(",", "")
    assert [w.start for w in words] == sorted(w.start for w in words)
    assert all(0 <= w.start <= w.end <= 11.1 for w in words)
    assert events[-1].type == "endpoint" and events[-1].text.strip()
    assert any(e.type == "partial" for e in events)
    # Re-decoding the same words again and again: the previous hypothesis is a good draft.
    stats = recognizer.stats.decoding
    assert stats.drafted > 0 and stats.mean_acceptance_length > 1.5


def test_speculation_does_not_change_the_result(asr):
    audio = load_audio(str(dev_item("ls_1089-134691-0001").audio_path))
    with_draft, rec_a, _ = stream_array(asr, audio, options=StreamingOptions(speculative=True))
    without, rec_b, _ = stream_array(asr, audio, options=StreamingOptions(speculative=False))
    assert with_draft.committed_text() == without.committed_text()
    assert rec_a.stats.decoding.target_passes < rec_b.stats.decoding.target_passes


@pytest.fixture(scope="module")
def dev_set_wer(asr) -> tuple[float, float]:
    """(streaming, offline greedy) corpus WER over all of dev-audio, computed once for both tests.

    A few clips would not mean anything: on three clips one word is several percent of WER.
    """
    require_shared()
    items = list(dev_audio_items())
    assert len(items) >= 20 and sum(i.duration_s for i in items) > 180  # the whole set, not a sample
    streaming_pairs, offline_pairs = [], []
    for item in items:
        audio = load_audio(str(item.audio_path))
        sink, _, _ = stream_array(asr, audio)
        offline = asr.transcribe(audio, beam_size=1)
        streaming_pairs.append((item.text, sink.committed_text()))
        offline_pairs.append((item.text, offline.text))
    streaming, offline = corpus_wer(streaming_pairs), corpus_wer(offline_pairs)
    print(f"{len(items)} clips: streaming WER {streaming:.3f}, offline {offline:.3f} ({streaming / offline:.2f}x)")
    return streaming, offline


@pytest.mark.slow
def test_streaming_wer_does_not_regress(dev_set_wer):
    """The re-decoding recognizer measured 1.20x offline (0.046 vs 0.039, 21 clips): guard that."""
    streaming, offline = dev_set_wer
    assert streaming <= 1.25 * offline, f"streaming WER {streaming:.3f} vs offline {offline:.3f}"


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="re-decoding streaming is 1.20x offline; issue 13 (cache-aware streaming) must reach 1.1x")
def test_streaming_wer_within_ten_percent_of_offline(dev_set_wer):
    """The goal: committed streaming text within 1.1x offline greedy WER over all of dev-audio.

    Strict: when streaming reaches the goal this test passes, the xfail fails, and the mark goes.
    """
    streaming, offline = dev_set_wer
    assert streaming <= 1.1 * offline, f"streaming WER {streaming:.3f} vs offline {offline:.3f}"


@pytest.mark.slow
def test_memory_stays_flat_over_ten_minutes(asr):
    """>= 10 minutes of looped speech through VAD + streaming Whisper: RSS must not grow."""
    clip = load_audio(str(dev_item("long_kathleen_20prompts").audio_path))  # 80 s of read prompts
    audio = np.tile(clip, 8)  # 10.7 minutes
    recognizer = WhisperStreamingRecognizer(asr)
    sink = Collect()
    pipeline = asr_pipeline(ArraySource(audio, realtime=False), recognizer, [sink], options=PipelineOptions(chunk_seconds=4.0))

    samples = []

    async def main():
        task = asyncio.create_task(pipeline.run())
        while not task.done():
            samples.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            await asyncio.sleep(2.0)
        return await task

    metrics = asyncio.run(main())
    assert metrics.audio_seconds >= 600
    assert metrics.dropped_seconds == 0
    # Peak RSS after the first quarter (model, buffers and allocator pools warmed up) grows < 60 MB.
    warm = samples[len(samples) // 4]
    print(f"{metrics.audio_seconds:.0f} s streamed; peak RSS {warm / 1024:.0f} -> {samples[-1] / 1024:.0f} MB")
    assert samples[-1] - warm < 60 * 1024, f"RSS grew {(samples[-1] - warm) / 1024:.0f} MB"
    assert sum(e.type == "endpoint" for e in sink.events) >= 8


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"virtual microphone: {unavailable_reason()}")
def test_microphone_pipeline_captions_a_recording(asr):
    """A recording played into a virtual microphone is captioned by the `burble listen` pipeline."""
    with VirtualMicrophone() as vmic:
        recognizer = RecognizerChoice().build(asr)  # what `burble listen` builds
        sink = Collect()

        async def main():
            mic = MicrophoneSource()
            pipeline = asr_pipeline(mic, recognizer, [sink], options=PipelineOptions(chunk_seconds=1.0))
            task = asyncio.create_task(pipeline.run())
            while mic.callbacks == 0:  # PortAudio's first callback can take ~1 s
                await asyncio.sleep(0.05)
            await asyncio.to_thread(vmic.play, "examples/jfk.wav")
            await asyncio.sleep(1.5)
            pipeline.stop()
            return await task

        metrics = asyncio.run(main())
    text = sink.committed_text().lower().replace(",", "")
    assert "what your country can do for you" in text, text
    assert metrics.audio_seconds >= 11.0
