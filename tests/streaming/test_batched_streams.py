"""Streams decoded together: the engine's batches (rows of different streams' windows in one
decoder call, :func:`burble.asr.batching.decode_rows`) give every stream the events it gets alone.

The streams run in lockstep through :func:`burble.streaming.engine.run_together`, which is what a
compute engine's worker does with the ready lanes' ``accept_steps`` calls.
"""

from __future__ import annotations

import numpy as np
import pytest

import burble
from burble.audio import SAMPLE_RATE
from burble.audio.io import load_audio
from burble.kernels.attention import KeyValueSegments
from burble.streaming.cache_aware import CacheAwareWhisperRecognizer
from burble.streaming.engine import ComputeEngine, run_together
from burble.streaming.recognizer import WhisperStreamingRecognizer, WindowDecode
from burble.testing import dev_item, require_shared

# Four clips of different lengths (2-10 s): the windows' frame counts and prompts differ.
CLIPS = ("ls_1089-134686-0000", "ls_1089-134691-0000", "jfk_inaugural_ask_not", "lj_LJ001-0001")
CHUNK = SAMPLE_RATE


@pytest.fixture(scope="module")
def asr() -> burble.WhisperASR:
    return burble.load_model("tiny.en")


@pytest.fixture(scope="module")
def clips() -> list[np.ndarray]:
    require_shared()
    return [load_audio(str(dev_item(item).audio_path)) for item in CLIPS]


def _words(events) -> list[tuple[str, float, float]]:
    return [(w.word, w.start, w.end) for e in events if e.type == "final" for w in e.words]


def _alone(recognizer, audio: np.ndarray):
    events = []
    for i in range(0, len(audio), CHUNK):
        events += recognizer.accept(audio[i : i + CHUNK], i)
    return _words(events + recognizer.flush())


def _together(recognizers, clips: list[np.ndarray]):
    events: list[list] = [[] for _ in clips]
    for i in range(0, max(len(a) for a in clips), CHUNK):
        live = [k for k, audio in enumerate(clips) if i < len(audio)]
        outcomes = run_together([recognizers[k].accept_steps(clips[k][i : i + CHUNK], i) for k in live])
        for k, (ok, value) in zip(live, outcomes):
            assert ok, value
            events[k] += value
    return [_words(e + r.flush()) for e, r in zip(events, recognizers)]


@pytest.fixture
def batch_sizes(monkeypatch):
    """The sizes of the decode batches that ran."""
    sizes: list[int] = []
    run_batch = WindowDecode.run_batch

    def counted(steps):
        sizes.append(len(steps))
        return run_batch(steps)

    monkeypatch.setattr(WindowDecode, "run_batch", staticmethod(counted))
    return sizes


def _make(asr, kinds: str):
    return [CacheAwareWhisperRecognizer(asr) if kind == "c" else WhisperStreamingRecognizer(asr) for kind in kinds]


@pytest.mark.parametrize("kinds", ["cccc", "crcr"], ids=["cache-aware", "mixed with re-encoding"])
def test_streams_decoded_as_rows_of_one_batch_commit_what_each_commits_alone(asr, clips, batch_sizes, kinds):
    """Same words and times, stream by stream, as each stream decoded alone; the cache-aware
    windows (content + tail, 600-1300 frames) and the re-encoding ones (1500) differ in length,
    and each row reads its stream's own cross-attention K/V."""
    alone = [_alone(r, audio) for r, audio in zip(_make(asr, kinds), clips)]
    batch_sizes.clear()
    together = _together(_make(asr, kinds), clips)
    assert together == alone
    assert max(batch_sizes) == len(clips) and all(words for words in alone)


def test_rows_that_lost_their_own_audio_length_would_be_caught(asr, clips, monkeypatch):
    """Negative control: rows that attend to one common length of audio (the shortest row's, as a
    batch that forgot each row's own length would) commit other words, so the test above can fail."""
    from burble.asr.loaded import LoadedWhisper

    inner = LoadedWhisper.text_model

    def one_length(self, audio_features, cross=None, cross_rows=None):
        if cross_rows is not None:
            joined = [[kv.joined() if isinstance(kv, KeyValueSegments) else kv for kv in row] for row in cross_rows]
            shortest = min(row[0][0].shape[2] for row in joined)
            cross_rows = [[(k[:, :, :shortest], v[:, :, :shortest]) for k, v in row] for row in joined]
        return inner(self, audio_features, cross, cross_rows)

    reference = _together(_make(asr, "cccc"), clips)
    monkeypatch.setattr(LoadedWhisper, "text_model", one_length)
    assert _together(_make(asr, "cccc"), clips) != reference


def test_an_engine_batches_the_ready_streams_decodes(asr, clips):
    """Through a one-worker engine: four lanes' ``accept_steps`` calls queued together run as one
    batch, and each lane gets its own stream's events."""
    engine = ComputeEngine(1)
    recognizers = _make(asr, "cccc")
    reference = [_alone(r, audio) for r, audio in zip(_make(asr, "cccc"), clips)]
    lanes = [engine.lane() for _ in clips]
    events: list[list] = [[] for _ in clips]
    for i in range(0, max(len(a) for a in clips), CHUNK):
        futures = [(k, lanes[k].submit_steps(recognizers[k].accept_steps, audio[i : i + CHUNK], i))
                   for k, audio in enumerate(clips) if i < len(audio)]  # fmt: skip
        for k, future in futures:
            events[k] += future.result(timeout=60)
    assert [_words(e + r.flush()) for e, r in zip(events, recognizers)] == reference
    assert max(engine.batch_sizes) >= 2  # the worker found several lanes ready
    engine.close()
