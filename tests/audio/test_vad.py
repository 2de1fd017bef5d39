import sys

import numpy as np
import pytest

from burble.audio.vad import (
    FRAME_SAMPLES,
    SileroVAD,
    StreamingVAD,
    VADOptions,
    _shared_session,
    detect_speech,
    frame_level_db,
)

SR = 16000
SHORT_CLIPS = ["ls_1089-134686-0001", "lj_LJ001-0002", "arctic_aew_a0002", "timit_LDC93S1", "cmu_goforward"]


@pytest.fixture(scope="module")
def silero() -> SileroVAD:
    return SileroVAD()


def pad(x: np.ndarray, before: float, after: float) -> np.ndarray:
    return np.concatenate([np.zeros(int(before * SR), np.float32), x, np.zeros(int(after * SR), np.float32)])


def loud_frames(x: np.ndarray, offset: int = 0, db: float = -35.0) -> list[int]:
    """Start indices of frames that are certainly speech in a clean recording (loud)."""
    return [offset + i for i in range(0, len(x) - FRAME_SAMPLES, FRAME_SAMPLES) if frame_level_db(x[i : i + FRAME_SAMPLES]) > db]


@pytest.mark.parametrize("item", SHORT_CLIPS)
def test_real_speech_is_detected_and_silence_around_it_is_not(silero, dev_recording, item):
    x, sr = dev_recording(item)
    assert sr == SR
    audio = pad(x, 2.0, 2.0)
    spans = detect_speech(audio, model=silero)
    assert spans, "speech not detected"
    loud = loud_frames(x, offset=2 * SR)
    covered = [f for f in loud if any(a <= f and f + FRAME_SAMPLES <= b for a, b in spans)]
    assert len(covered) >= 0.97 * len(loud)
    opts = VADOptions()
    # Nothing before the pre-roll of the recording, nothing after its end plus hangover.
    assert spans[0][0] >= 2 * SR - opts.pre_roll_seconds * SR - FRAME_SAMPLES
    assert spans[-1][1] <= 2 * SR + len(x) + opts.hangover_seconds * SR + FRAME_SAMPLES


def test_long_recording_with_pauses_is_segmented(silero, dev_recording):
    x, _ = dev_recording("long_kathleen_20prompts")
    spans = detect_speech(x, model=silero)
    total = sum(b - a for a, b in spans)
    assert 0.6 * len(x) < total < len(x)
    assert len(spans) >= 5  # read prompts separated by pauses
    assert all(b - a <= VADOptions().max_utterance_seconds * SR for a, b in spans)
    assert all(a2 >= b1 for (_, b1), (a2, _) in zip(spans, spans[1:]))


@pytest.mark.parametrize("level", [0.0, 0.001, 0.01, 0.1, 0.3])
def test_silence_and_white_noise_are_not_speech(silero, level):
    rng = np.random.default_rng(int(level * 1000))
    noise = (rng.standard_normal(SR * 8) * level).astype(np.float32)
    assert detect_speech(noise, model=silero) == []


def test_energy_gate_rejects_what_silero_alone_accepts(silero, lj_speech):
    quiet = lj_speech * 0.01  # about -60 dBFS RMS: silero still calls it speech
    assert detect_speech(quiet, VADOptions(energy_threshold_db=-200.0), model=silero)
    assert detect_speech(quiet, VADOptions(), model=silero) == []
    assert detect_speech(lj_speech, VADOptions(), model=silero)


def test_streaming_in_pieces_equals_whole(silero, lj_speech):
    audio = pad(lj_speech, 1.0, 1.5)
    whole = StreamingVAD(model=silero)
    expected = whole.process(audio) + whole.flush()
    vad = StreamingVAD(model=silero)
    rng = np.random.default_rng(0)
    events, i = [], 0
    while i < len(audio):
        n = int(rng.integers(1, 5000))
        events += vad.process(audio[i : i + n])
        i += n
    events += vad.flush()
    assert events == expected


def test_import_side_effect_on_torch_threads_is_undone():
    import torch

    # Make the next import of silero_vad run its module code (torch.set_num_threads(1)) again.
    saved = {k: v for k, v in sys.modules.items() if k == "silero_vad" or k.startswith("silero_vad.")}
    for k in saved:
        del sys.modules[k]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        _shared_session.cache_clear()  # the ONNX session (and its import) is made once per process
        SileroVAD()
        assert "silero_vad.model" in sys.modules  # the side effect did run ...
        assert torch.get_num_threads() == 3  # ... and was undone
    finally:
        torch.set_num_threads(threads)
        sys.modules.update(saved)


def test_silero_rejects_wrong_frame_size(silero):
    with pytest.raises(ValueError):
        silero(np.zeros(480, np.float32))


# ------------------------------------------------------------------- state machine, exactly
class Scripted:
    """Speech probabilities from a script, one per frame (the state machine's unit tests)."""

    def __init__(self, probs: list[float]) -> None:
        self.probs = probs
        self.i = 0

    def __call__(self, frame: np.ndarray) -> float:
        p = self.probs[self.i] if self.i < len(self.probs) else 0.0
        self.i += 1
        return p

    def reset(self) -> None:
        pass


def run_script(pattern: str, options: VADOptions) -> list:
    """``pattern``: one character per frame, 'S' speech (p=0.9), '.' silence (p=0.05)."""
    probs = [0.9 if c == "S" else 0.05 for c in pattern]
    audio = np.full(len(pattern) * FRAME_SAMPLES, 0.1, np.float32)  # loud enough for the gate
    vad = StreamingVAD(options, model=Scripted(probs))
    return vad.process(audio) + vad.flush()


F = FRAME_SAMPLES
FRAME_S = F / SR  # 32 ms


def opts(**kw) -> VADOptions:
    base = dict(
        min_speech_seconds=2 * FRAME_S,
        pre_roll_seconds=3 * FRAME_S,
        hangover_seconds=2 * FRAME_S,
        silence_after_speech_seconds=10 * FRAME_S,
        silence_no_speech_seconds=20 * FRAME_S,
        min_utterance_speech_seconds=5 * FRAME_S,
        max_utterance_seconds=100 * FRAME_S,
    )
    base.update(kw)
    return VADOptions(**base)


def test_onset_pre_roll_and_rule_2_silence_after_speech():
    ev = run_script("." * 10 + "S" * 8 + "." * 12 + "." * 5, opts())
    assert [(e.kind, e.sample, e.reason) for e in ev] == [
        ("start", (10 - 3) * F, None),  # pre-roll: 3 frames before the first speech frame
        ("end", (18 + 2) * F, "silence"),  # hangover: 2 frames after the last speech frame
    ]


def test_short_pause_does_not_split_but_long_pause_does():
    one = run_script("S" * 8 + "." * 9 + "S" * 8 + "." * 12, opts())
    assert [e.kind for e in one] == ["start", "end"]
    two = run_script("S" * 8 + "." * 10 + "S" * 8 + "." * 12, opts())
    assert [e.kind for e in two] == ["start", "end", "start", "end"]
    # The second utterance's pre-roll reaches back into the pause, not into the first utterance.
    assert two[2].sample == (18 - 3) * F and two[2].sample >= two[1].sample


def test_rule_1_false_start_ends_after_the_longer_silence():
    # 3 speech frames < min_utterance_speech (5): rule 2 does not apply, rule 1 after 20 frames.
    ev = run_script("SSS" + "." * 25, opts())
    assert [(e.kind, e.reason) for e in ev] == [("start", None), ("end", "no_speech")]
    assert ev[1].sample == (3 + 2) * F
    # A single speech frame never opens an utterance (min_speech is 2 frames).
    assert run_script(".S.S.S." * 5, opts()) == []


def test_rule_3_max_utterance_length_splits_continuous_speech():
    ev = run_script("S" * 50, opts(max_utterance_seconds=20 * FRAME_S))
    kinds = [(e.kind, e.reason) for e in ev]
    assert kinds[:2] == [("start", None), ("end", "max_length")]
    assert ev[1].sample - ev[0].sample == 20 * F
    # Speech goes on: the next utterance starts where the previous one ended (nothing lost).
    assert ev[2].kind == "start" and ev[2].sample == ev[1].sample
    assert ev[-1].reason == "end_of_stream" and ev[-1].sample == 50 * F


def test_hysteresis_keeps_speech_through_dips():
    probs_pattern = [0.9] * 6 + [0.4] * 12 + [0.05] * 12  # 0.4: below threshold, above 0.35
    audio = np.full(len(probs_pattern) * F, 0.1, np.float32)
    vad = StreamingVAD(opts(), model=Scripted(probs_pattern))
    ev = vad.process(audio) + vad.flush()
    assert ev[1].sample == (18 + 2) * F  # the 0.4 frames still counted as speech


def test_options_validation():
    with pytest.raises(ValueError):
        VADOptions(threshold=1.5)
    with pytest.raises(ValueError):
        VADOptions(hangover_seconds=1.0, silence_after_speech_seconds=0.5)
    with pytest.raises(ValueError):
        StreamingVAD(opts(), model=Scripted([])).process(np.zeros((2, 512), np.float32))


def test_direct_onnx_matches_the_silero_package_wrapper(silero, lj_speech):
    import silero_vad
    import torch

    threads = torch.get_num_threads()
    reference = silero_vad.load_silero_vad(onnx=True)
    torch.set_num_threads(threads)
    silero.reset()
    audio = lj_speech[: 200 * FRAME_SAMPLES]
    ours = [silero(audio[i : i + FRAME_SAMPLES]) for i in range(0, len(audio), FRAME_SAMPLES)]
    theirs = [
        float(reference(torch.from_numpy(audio[i : i + FRAME_SAMPLES]), SR))
        for i in range(0, len(audio), FRAME_SAMPLES)
    ]
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert max(ours) > 0.9 and min(ours) < 0.5


def test_instances_share_one_onnx_session_but_not_their_state():
    first, second = SileroVAD(), SileroVAD()
    assert first._session is second._session
    rng = np.random.default_rng(0)
    speechy = rng.standard_normal(512).astype(np.float32) * 0.3
    alone = SileroVAD()
    expected = [alone(speechy) for _ in range(3)]
    got = []
    for _ in range(3):  # interleaved with another stream's frames: each keeps its own state
        second(np.zeros(512, np.float32))
        got.append(first(speechy))
    assert got == pytest.approx(expected, abs=1e-6)
