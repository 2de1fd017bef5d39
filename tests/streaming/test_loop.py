import asyncio
import dataclasses
import io
import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from burble.streaming.loop import Pipeline, PipelineMetrics, PipelineOptions, asr_pipeline, run_until_interrupted
from burble.streaming.sinks import JsonLinesSink
from burble.streaming.sources import ArraySource
from burble.streaming.stages import Endpoint, RecognizerStage, SinkStage, VADStage
from burble.audio.vad import SileroVAD, StreamingVAD, detect_speech

from streaming_helpers import FakeRecognizer, ListSink

SR = 16000


@pytest.fixture(scope="module")
def silero() -> SileroVAD:
    return SileroVAD()


def two_utterances(lj_speech: np.ndarray) -> np.ndarray:
    z = lambda s: np.zeros(int(s * SR), np.float32)  # noqa: E731
    return np.concatenate([z(1.0), lj_speech[: SR * 4], z(2.0), lj_speech[SR * 5 :], z(1.5)])


def test_fast_file_through_vad_feeds_exactly_the_speech(lj_speech, silero):
    audio = two_utterances(lj_speech)
    rec, sink, out = FakeRecognizer(), ListSink(), io.StringIO()
    vad = StreamingVAD(model=silero)
    src = ArraySource(audio, realtime=False)
    pipe = asr_pipeline(src, rec, [sink, JsonLinesSink(out)], vad=vad, options=PipelineOptions(chunk_seconds=1.0))
    metrics = asyncio.run(pipe.run())

    silero.reset()
    spans = detect_speech(audio, model=silero)
    assert len(spans) == 2
    # The recognizer received exactly the VAD spans, sample for sample, and an endpoint after each.
    got = []
    for start, x in rec.audio:
        if got and got[-1][1] == start:
            got[-1] = (got[-1][0], start + len(x))
        else:
            got.append((start, start + len(x)))
        np.testing.assert_array_equal(x, audio[start : start + len(x)])
    assert got == spans
    assert [c for c in rec.calls if c[0] == "endpoint"] == [("endpoint", b) for _, b in spans]
    assert rec.calls[-1] == ("flush",)
    # Calls are chunk-sized (1 s) except the last of each utterance.
    sizes = [c[2] for c in rec.calls if c[0] == "accept"]
    assert all(SR <= n < SR + int(0.1 * SR) + 512 for n in sizes[:3])
    assert len(rec.thread_ids) == 1 and threading.get_ident() not in rec.thread_ids  # worker thread

    assert sink.closed
    assert all(e.emitted_at is not None and e.emitted_at >= 0 for e in sink.events)
    types = [e.type for e in sink.events]
    assert types.count("endpoint") == 2 and types[-1] == "endpoint"
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [d["type"] for d in lines] == types
    assert metrics.audio_seconds == pytest.approx(len(audio) / SR)
    assert metrics.processed_seconds == pytest.approx(len(audio) / SR)
    assert metrics.dropped_seconds == 0
    assert metrics.events["endpoint"] == 2
    assert metrics.recognizer_audio_seconds == pytest.approx(sum(b - a for a, b in spans) / SR)
    assert metrics.recognizer_calls == len(rec.calls)
    assert metrics.events == {t: types.count(t) for t in ("partial", "final", "endpoint")}
    # The fake recognizer returns at once: compute per second of audio is thread hand-offs only.
    assert 0 < metrics.rtf < 0.05 and metrics.recognizer_seconds <= metrics.wall_seconds


def test_without_vad_every_sample_is_accepted_once(lj_speech):
    rec, sink = FakeRecognizer(), ListSink()
    pipe = asr_pipeline(ArraySource(lj_speech, realtime=False), rec, [sink], vad=None, options=PipelineOptions(chunk_seconds=0.5))
    asyncio.run(pipe.run())
    np.testing.assert_array_equal(np.concatenate([x for _, x in rec.audio]), lj_speech)
    assert rec.audio[0][0] == 0
    assert [c[0] for c in rec.calls].count("endpoint") == 0 and rec.calls[-1] == ("flush",)
    finals = [w for e in sink.events if e.type == "final" for w in e.words]
    assert finals[-1].end == pytest.approx(len(lj_speech) / SR)


def test_slow_recognizer_on_live_audio_coalesces_and_reports_lag(lj_speech):
    """The recognizer takes 0.25 s per call while audio arrives 8x faster than real time (2 s of
    audio per call): the loop must stay responsive, hand over everything that piled up in one
    call, lose nothing while the buffer suffices, and report the lag."""
    rec, sink = FakeRecognizer(delay=0.25), ListSink()
    src = ArraySource(lj_speech, realtime=True, speed=8.0)
    opts = PipelineOptions(chunk_seconds=0.2, buffer_seconds=6.0)
    metrics = asyncio.run(asr_pipeline(src, rec, [sink], vad=None, options=opts).run())
    accepts = [c for c in rec.calls if c[0] == "accept"]
    assert rec.accepted_samples == len(lj_speech)
    assert metrics.dropped_seconds == 0
    assert len(accepts) <= 10  # ~9.7 s of audio in ~2 s pieces, not 48 chunks of 0.2 s
    assert max(c[2] for c in accepts) >= 1.0 * SR
    assert metrics.max_lag_seconds >= 1.0
    assert metrics.max_lag_seconds <= opts.buffer_seconds + opts.tick_seconds  # nothing dropped, so less than the buffer
    check_compute_figures(metrics, rec, accept_seconds=0.25)
    # Negative controls: a loop that timed its recognizer twice, or not at all, is caught.
    for wrong in (2 * metrics.recognizer_seconds, 0.0):
        with pytest.raises(AssertionError):
            check_compute_figures(dataclasses.replace(metrics, recognizer_seconds=wrong), rec, accept_seconds=0.25)


def check_compute_figures(metrics: PipelineMetrics, rec: FakeRecognizer, accept_seconds: float) -> None:
    """The loop's compute figures against what the fake recognizer did: every ``accept`` slept
    ``accept_seconds`` on the recognizer thread, other calls return at once, calls run one at a
    time within the run, and the recognizer is the bottleneck (audio comes faster than it keeps up)."""
    accepts = sum(1 for c in rec.calls if c[0] == "accept")
    assert metrics.recognizer_calls == len(rec.calls)
    assert metrics.recognizer_audio_seconds == pytest.approx(rec.accepted_samples / SR)
    assert metrics.audio_seconds == pytest.approx(rec.accepted_samples / SR)  # nothing was dropped
    busy = metrics.recognizer_seconds
    assert accepts * accept_seconds <= busy <= metrics.wall_seconds
    assert busy <= accepts * accept_seconds + 0.05 * len(rec.calls) + 0.5  # thread hand-offs only on top
    assert busy >= 0.5 * metrics.wall_seconds  # the bottleneck was busy most of the run
    assert metrics.rtf == pytest.approx(busy / metrics.audio_seconds)


def test_overload_drops_oldest_audio_counts_it_and_bounds_lag(lj_speech, caplog):
    audio = np.tile(lj_speech, 2)  # 19.3 s
    rec, sink = FakeRecognizer(delay=0.4, keep_audio=False), ListSink()  # 0.4 s = 4 s of audio at 10x
    src = ArraySource(audio, realtime=True, speed=10.0)
    opts = PipelineOptions(chunk_seconds=0.2, buffer_seconds=1.0, lag_warning_seconds=0.5)
    with caplog.at_level("WARNING"):
        metrics = asyncio.run(asr_pipeline(src, rec, [sink], vad=None, options=opts).run())
    assert metrics.dropped_seconds > 2.0
    # Every sample was either recognized or counted as dropped.
    assert rec.accepted_samples + round(metrics.dropped_seconds * SR) == len(audio)
    # Lost audio ends the utterance ("gap") so the recognizer commits what it had.
    assert any(c[0] == "endpoint" for c in rec.calls)
    assert metrics.max_lag_seconds <= opts.buffer_seconds + 0.2
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "overflow" in messages and "behind real time" in messages


def test_stop_flushes_results_and_closes_sinks(lj_speech):
    rec, sink = FakeRecognizer(), ListSink()
    src = ArraySource(np.tile(lj_speech, 10), realtime=True, speed=4.0)
    pipe = asr_pipeline(src, rec, [sink], vad=None, options=PipelineOptions(chunk_seconds=0.5))

    async def main():
        asyncio.get_running_loop().call_later(0.6, pipe.stop)
        return await pipe.run()

    t = time.monotonic()
    metrics = asyncio.run(main())
    assert time.monotonic() - t < 3.0
    assert 1.5 < metrics.audio_seconds < 10.0
    assert rec.calls[-1] == ("flush",)
    assert rec.accepted_samples == round(metrics.audio_seconds * SR)
    assert sink.closed and sink.events[-1].type == "endpoint"  # the pending words were committed


def test_ctrl_c_stops_cleanly(lj_speech):
    rec, sink = FakeRecognizer(), ListSink()
    src = ArraySource(np.tile(lj_speech, 10), realtime=True, speed=2.0)
    pipe = asr_pipeline(src, rec, [sink], vad=None, options=PipelineOptions(chunk_seconds=0.5))

    def interrupt():
        while not rec.calls:  # the loop (and its signal handler) is running
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    metrics = run_until_interrupted(pipe)
    assert metrics.audio_seconds < 30
    assert rec.calls[-1] == ("flush",) and sink.closed


def test_recognizer_error_propagates_and_still_closes(lj_speech):
    class Broken(FakeRecognizer):
        def accept(self, audio, start_sample):
            raise RuntimeError("model exploded")

    sink = ListSink()
    src = ArraySource(lj_speech, realtime=False)
    with pytest.raises(RuntimeError, match="model exploded"):
        asyncio.run(asr_pipeline(src, Broken(), [sink], vad=None).run())
    assert sink.closed


def test_custom_stage_chain_passes_unknown_items_through(lj_speech, silero):
    class Tap:
        """A user stage: counts audio, passes everything on unchanged."""

        def __init__(self) -> None:
            self.samples = 0

        async def process(self, items):
            self.samples += sum(len(i) for i in items if hasattr(i, "samples"))
            return items

        async def flush(self):
            return [Endpoint(0, "end_of_stream")]

    tap, rec, sink = Tap(), FakeRecognizer(), ListSink()
    stages = [tap, VADStage(StreamingVAD(model=silero)), RecognizerStage(rec, chunk_seconds=1.0), SinkStage([sink])]
    asyncio.run(Pipeline(ArraySource(lj_speech, realtime=False), stages).run())
    assert tap.samples == len(lj_speech)
    assert rec.calls[-1] == ("flush",)


@pytest.mark.slow
def test_memory_stays_flat_over_ten_minutes(lj_speech, silero):
    """10+ minutes of looped speech, fast-paced, through the real VAD: RSS must not grow."""

    def rss_mb() -> float:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    samples: list[tuple[float, float]] = []

    class RssSink(ListSink):
        def write(self, event):
            if event.type == "final":
                samples.append((event.end, rss_mb()))

    repeat = int(np.ceil(620 / (len(lj_speech) / SR)))
    src = ArraySource(np.concatenate([lj_speech, np.zeros(SR, np.float32)]), realtime=False, repeat=repeat)
    rec = FakeRecognizer(keep_audio=False)
    pipe = asr_pipeline(src, rec, [RssSink()], vad=StreamingVAD(model=silero), options=PipelineOptions(chunk_seconds=1.0))
    metrics = asyncio.run(pipe.run())
    assert metrics.audio_seconds >= 600
    after_warmup = [m for t, m in samples if t > 60]
    growth = max(after_warmup) - after_warmup[0]
    assert growth < 8.0, f"RSS grew by {growth:.1f} MB over {metrics.audio_seconds:.0f} s of audio"


def test_gap_reported_by_the_source_becomes_an_endpoint_not_zeros(lj_speech):
    from burble.streaming.sources import AudioChunk, AudioSource

    class Gappy(AudioSource):
        """Delivers [0, 1 s), loses half a second, then [1.5 s, 3 s) in 0.25 s pieces."""

        live = False

        def __init__(self) -> None:
            super().__init__()
            starts = [int(SR * t) for t in (0, 0.25, 0.5, 0.75, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75)]
            self.todo = [AudioChunk(lj_speech[s : s + SR // 4], s) for s in starts]

        async def read(self):
            return self.todo.pop(0) if self.todo else None

    rec, sink = FakeRecognizer(), ListSink()
    metrics = asyncio.run(asr_pipeline(Gappy(), rec, [sink], vad=None, options=PipelineOptions(chunk_seconds=0.5)).run())
    assert ("endpoint", SR) in rec.calls
    spans = [(s, s + len(x)) for s, x in rec.audio]
    assert spans[0][0] == 0 and spans[-1][1] == 3 * SR
    assert not any(a < int(1.5 * SR) and b > SR for a, b in spans)  # nothing from the gap
    for s, x in rec.audio:
        np.testing.assert_array_equal(x, lj_speech[s : s + len(x)])
    assert metrics.dropped_seconds == pytest.approx(0.5)
