import numpy as np
import pytest
import torch
import torchaudio

from burble.streaming.resample import StreamingResampler, resample


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
