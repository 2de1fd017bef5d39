import numpy as np
import pytest
import torch
import torchaudio

from burble.audio.resample import StreamingResampler, resample


@pytest.mark.parametrize("rate", [48000, 44100, 22050, 8000])
def test_streaming_equals_one_shot_and_matches_torchaudio(lj_speech, rate):
    x = torchaudio.functional.resample(torch.from_numpy(lj_speech), 16000, rate).numpy()
    whole = resample(x, rate)
    assert len(whole) == int(np.ceil(len(x) * 16000 / rate))
    r = StreamingResampler(rate)
    rng = np.random.default_rng(rate)
    pieces, i = [], 0
    while i < len(x):
        n = int(rng.integers(1, 2000))
        pieces.append(r.process(x[i : i + n]))
        i += n
    pieces.append(r.flush())
    np.testing.assert_array_equal(np.concatenate(pieces), whole)
    ref = torchaudio.functional.resample(torch.from_numpy(x), rate, 16000).numpy()
    assert np.corrcoef(whole, ref[: len(whole)])[0, 1] > 0.999


def test_tone_keeps_frequency_amplitude_and_phase():
    rate, f = 48000, 1000.0
    t = np.arange(rate) / rate
    y = resample(np.sin(2 * np.pi * f * t).astype(np.float32), rate)
    expect = np.sin(2 * np.pi * f * np.arange(16000) / 16000)
    # Zero-phase filter: output sample n is at input time n * 3 exactly (no delay).
    np.testing.assert_allclose(y[200:-200], expect[200:-200], atol=2e-3)


def test_frequencies_above_8khz_are_removed():
    rate = 48000
    t = np.arange(rate) / rate
    y = resample((0.5 * np.sin(2 * np.pi * 12000 * t)).astype(np.float32), rate)  # would alias to 4 kHz
    assert np.sqrt(np.mean(y[200:-200] ** 2)) < 1e-3


def test_reset_after_gap_continues_at_the_right_output_index():
    r = StreamingResampler(48000)
    out = r.process(np.zeros(4800, np.float32))
    out = np.concatenate([out, r.flush()])
    assert r.next_output_index == 1600 and len(out) == 1600
    r.reset(48000 * 2)  # audio resumes two seconds in
    assert r.next_output_index == 32000
    r.process(np.zeros(480, np.float32))
    assert r.next_output_index <= 32160


def test_identity_and_validation():
    r = StreamingResampler(16000)
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(r.process(x), x)
    assert r.next_output_index == 10
    with pytest.raises(ValueError):
        StreamingResampler(0)
    with pytest.raises(ValueError):
        StreamingResampler(48000).process(np.zeros((3, 2), np.float32))


def test_reset_at_any_input_index_keeps_absolute_output_times(lj_speech):
    """After a gap the stream restarts at an input index that is not on an output time (44.1 kHz:
    one every 441/160 inputs); the outputs must still sit at their absolute times, i.e. equal a
    one-shot conversion of the whole signal with silence in the gap."""
    rate = 44100
    x = resample(lj_speech, 16000, rate)
    cut, resume = 2 * rate + 17, 3 * rate + 250  # resume % 441 != 0
    r = StreamingResampler(rate)
    before = np.concatenate([r.process(x[:cut]), r.flush()])
    r.reset(resume)
    start = r.next_output_index
    after = np.concatenate([r.process(x[resume:]), r.flush()])
    gapped = x.copy()
    gapped[cut:resume] = 0.0
    whole = resample(gapped, rate)
    assert len(before) == r.output_index(cut) and start == r.output_index(resume)
    np.testing.assert_allclose(before, whole[: len(before)], atol=1e-6)
    np.testing.assert_allclose(after, whole[start : start + len(after)], atol=1e-6)
    assert start + len(after) == len(whole)
