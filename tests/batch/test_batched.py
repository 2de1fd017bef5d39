"""Batched windows give the tokens of unbatched decoding (the acceptance rule of batching)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from burble.asr.options import TranscribeOptions
from burble.asr.window import WindowResult
from burble.batch.batched import BatchedTranscriber, BatchOptions, window_features
from burble.batch.segment import Chunk
from burble.decoding.stats import SpeculativeStats
from burble.metrics.wer import wer
from burble.testing import dev_audio_items, require_shared

GREEDY = TranscribeOptions(beam_size=1, temperatures=(0.0,), condition_on_previous_text=False)


@pytest.fixture(scope="module")
def clips():
    require_shared()
    items = [it for it in dev_audio_items() if it.duration_s <= 9]
    # Different lengths (2-9 s), so batch rows finish at different steps.
    chosen = sorted(items, key=lambda it: it.duration_s)[:: max(1, len(items) // 5)][:5]
    return [(it.id, it.load()) for it in chosen]


def _features(asr, clips):
    mels = [window_features(audio, Chunk(0, len(audio))) for _, audio in clips]
    return asr.encode(torch.stack(mels))


@pytest.mark.parametrize("without_timestamps", [False, True])
def test_decode_windows_gives_the_tokens_of_decode_window(asr, clips, without_timestamps):
    # Batched rows are never screened (burble.kernels.screened_projection): compare float32 with
    # float32, so log-probabilities can be held to 1e-4 (the screen's own check allows 1e-3).
    options = replace(GREEDY, without_timestamps=without_timestamps, screen_logits=False)
    features = _features(asr, clips)
    prompt = asr.build_prompt([], options)
    single_stats, batch_stats = SpeculativeStats(), SpeculativeStats()
    single = [asr.decode_window(features[i : i + 1], prompt, options, stats=single_stats) for i in range(len(clips))]
    batched = asr.decode_windows(features, prompt, options, stats=batch_stats)
    assert [w.tokens for w in batched] == [w.tokens for w in single]
    assert len({len(w.tokens) for w in single}) > 2  # rows of different lengths
    for a, b in zip(single, batched):
        assert a.avg_logprob == pytest.approx(b.avg_logprob, abs=1e-4)
        assert a.no_speech_prob == pytest.approx(b.no_speech_prob, abs=1e-4)
    # Really batched: one decoder pass per step for all rows, not one per row.
    assert batch_stats.target_passes < single_stats.target_passes / 2


def test_batched_transcriber_matches_long_form(asr, clips):
    some = clips[:4]
    long_form = [[s.tokens for s in asr.transcribe(audio, GREEDY).segments] for _, audio in some]
    # Batch size 1 decodes each window alone (decode_window): long-form's first window exactly.
    out = list(BatchedTranscriber(asr, GREEDY, BatchOptions(batch_size=3)).transcribe_many(some))
    assert [key for key, _ in out] == [key for key, _ in some]  # input order
    assert [[s.tokens for s in r.segments] for _, r in out] == long_form
    assert all(tokens for tokens in long_form)


def test_fallback_redecodes_only_failing_windows(asr, clips, monkeypatch):
    options = replace(GREEDY, temperatures=(0.0, 0.2, 0.4), compression_ratio_threshold=2.4, log_prob_threshold=-1.0, no_speech_threshold=None)
    calls = []
    # Row 0 passes at once; row 1 passes at 0.2; row 2 always fails (best is the least repetitive candidate).
    plan = {
        0.0: [(-0.1, 1.0), (-2.0, 1.0), (-0.5, 3.0)],
        0.2: [(-0.3, 1.0), (-0.2, 2.9)],
        0.4: [(-1.5, 1.2)],
    }

    def fake(features, prompt, opts, *, temperature=0.0, stats=None, extra_processors=None):
        calls.append((temperature, features.shape[0]))
        return [WindowResult(tokens=[asr.tokenizer.encode(" ok")[0]], avg_logprob=lp, no_speech_prob=0.0, temperature=temperature,
                             compression_ratio=ratio) for lp, ratio in plan[temperature]]

    monkeypatch.setattr(asr, "decode_windows", fake)
    out = list(BatchedTranscriber(asr, options, BatchOptions(batch_size=3)).transcribe_many(clips[:3]))
    assert calls == [(0.0, 3), (0.2, 2), (0.4, 1)]
    temperatures = [r.segments[0].temperature for _, r in out]
    assert temperatures == [0.0, 0.2, 0.4]  # row 2: 0.4 is the only candidate under the ratio threshold
    assert out[2][1].segments[0].avg_logprob == -1.5


def test_sampling_best_of_batches_samples_per_window(asr, clips):
    options = replace(GREEDY, best_of=3, max_new_tokens=8, without_timestamps=True)
    features = _features(asr, clips[:2])
    prompt = asr.build_prompt([], options)
    stats = SpeculativeStats()
    torch.manual_seed(0)
    windows = asr.decode_windows(features, prompt, options, temperature=0.7, stats=stats)
    assert len(windows) == 2 and all(w.temperature == 0.7 and 0 < len(w.tokens) <= 8 for w in windows)
    assert stats.target_passes <= 8 + 2  # 6 rows decoded together


def test_a_bad_input_fails_alone(asr, clips):
    inputs = [clips[0], ("bad", np.zeros((2, 16000), np.float32)), clips[1]]
    out = dict(BatchedTranscriber(asr, GREEDY, BatchOptions(batch_size=4)).transcribe_many(inputs))
    assert isinstance(out["bad"], ValueError) and "mono" in str(out["bad"])
    assert out[clips[0][0]].text and out[clips[1][0]].text


@pytest.mark.slow
def test_long_recording_with_vad_windows(asr):
    require_shared()
    item = next(it for it in dev_audio_items() if it.duration_s > 60)
    result = BatchedTranscriber(asr, GREEDY, BatchOptions(batch_size=4)).transcribe(item.load())
    assert wer(item.text, result.text) < 0.15
    starts = [s.start for s in result.segments]
    assert starts == sorted(starts) and result.segments[-1].end <= item.duration_s + 0.1


def test_text_stopping_early_continues_in_a_new_window(asr, clips, monkeypatch):
    """A window ending with a closed timestamp pair mid-chunk gets a continuation window from there."""
    tb = asr.tokenizer.timestamp_begin
    word = asr.tokenizer.encode(" word")
    audio = np.concatenate([a for _, a in clips])[: 10 * 16000]
    assert len(audio) == 10 * 16000
    replies = [
        [tb] + word + [tb + 100, tb + 100] + word + [tb + 200, tb + 200],  # 0-2 s, 2-4 s, then "seek to 4 s"
        [tb] + word + [tb + 50],  # the continuation: 4.0-5.0 s, single timestamp ending: done
    ]
    offsets, calls = [], []

    def fake(features, prompt, opts, *, temperature=0.0, stats=None, extra_processors=None):
        calls.append(features.shape[0])
        return [WindowResult(tokens=replies[len(calls) - 1], avg_logprob=-0.1, no_speech_prob=0.0, temperature=0.0,
                             compression_ratio=1.0) for _ in range(features.shape[0])]

    real_window = BatchedTranscriber._window

    def spy(self, job, chunk):
        offsets.append(chunk.offset)
        return real_window(self, job, chunk)

    monkeypatch.setattr(asr, "decode_windows", fake)
    monkeypatch.setattr(BatchedTranscriber, "_window", spy)
    result = BatchedTranscriber(asr, GREEDY, BatchOptions(batch_size=2)).transcribe(audio)
    assert offsets == [0.0, 4.0] and calls == [1, 1]
    assert [(s.start, s.end) for s in result.segments] == [(0.0, 2.0), (2.0, 4.0), (4.0, 5.0)]
    assert result.text == "word word word"


def test_a_window_failing_inside_a_batch_fails_only_its_recording(asr, clips, monkeypatch):
    inputs = [clips[0], ("bad", clips[1][1]), clips[2]]
    real_pieces = BatchedTranscriber._pieces

    def pieces(self, window, result, features):
        if window.job.key == "bad":
            raise RuntimeError("broken window")
        return real_pieces(self, window, result, features)

    monkeypatch.setattr(BatchedTranscriber, "_pieces", pieces)
    out = dict(BatchedTranscriber(asr, GREEDY, BatchOptions(batch_size=3)).transcribe_many(inputs))
    assert isinstance(out["bad"], RuntimeError)
    for key, audio in (clips[0], clips[2]):  # retried alone after the batch failed: recorded once
        alone = [s.tokens for s in asr.transcribe(audio, GREEDY).segments]
        assert [s.tokens for s in out[key].segments] == alone
