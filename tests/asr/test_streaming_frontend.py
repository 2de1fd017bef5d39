"""The streaming log-mel frontend gives the offline frames, pushed in any pieces.

Before the clamp (``clamp="none"``) the frames must equal the offline STFT's; with the running
clamp they must equal ``log_mel_spectrogram`` exactly whenever the running maximum reaches the
global one at the first frame, and otherwise differ only where offline clamps (below its floor).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest
import torch

import burble.asr.streaming_frontend as streaming_frontend
from burble.asr.frontend import HOP_LENGTH, log_mel_from_power, log_mel_spectrogram, power_spectrum, scale_log_mel
from burble.asr.streaming_frontend import ClampMode, StreamingLogMel, StreamingLogMelOptions
from burble.audio import SAMPLE_RATE
from burble.testing.dev_audio import dev_audio_items, require_shared

# fp32: the streaming STFT frames the same samples but batches the FFTs and the mel matmul over
# other frame counts. The power spectrum comes out bit-identical; the mel GEMM rounds some columns
# differently depending on how many there are (measured: 1 ulp, max 2.4e-7 on 0.02% of values).
# 1e-5 leaves room for other BLAS/FFT builds, while a framing error (a hop off by one sample)
# moves values by >1e-2.
ATOL = 1e-5
# After the clamp: the same GEMM rounding (measured max 1.2e-7), nothing else. A clamp relative to
# another peak moves the floor by the peak difference / 4, and a lower floor shows at -0.1 or more.
CLAMPED_ATOL = 1e-6


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def clips() -> list[np.ndarray]:
    require_shared()
    items = sorted(dev_audio_items("short"), key=lambda i: i.id)
    return [items[i].load() for i in (0, len(items) // 2, len(items) - 1)]


def _pieces(total: int, seed: int) -> list[tuple[int, int]]:
    """``[start, end)`` spans over ``total`` samples, sizes log-uniform in 1 sample .. 3 s, with
    runs of single samples so hop and window boundaries fall inside, at and between pieces."""
    rng = np.random.default_rng(seed)
    spans, start = [], 0
    while start < total:
        size = 1 if rng.random() < 0.2 else int(np.exp(rng.uniform(0, np.log(3 * SAMPLE_RATE))))
        spans.append((start, min(total, start + size)))
        start += size
    return spans


def _stream(audio: np.ndarray, seed: int, clamp: ClampMode = "running") -> tuple[torch.Tensor, StreamingLogMel]:
    frontend = StreamingLogMel(StreamingLogMelOptions(clamp=clamp))
    frames = [frontend.push(audio[a:b]) for a, b in _pieces(len(audio), seed)]
    frames.append(frontend.flush())
    assert frontend.n_frames == sum(f.shape[1] for f in frames)
    return torch.cat(frames, dim=1), frontend


def _unclamped(audio: np.ndarray) -> torch.Tensor:
    """Offline frames before the clamp: ``log_mel_spectrogram`` without its last step."""
    log_spec = log_mel_from_power(power_spectrum(torch.as_tensor(audio))[..., :-1])
    return scale_log_mel(log_spec, float("-inf"))


def _assert_unclamped_equal(audio: np.ndarray, seed: int) -> None:
    streamed, _ = _stream(audio, seed, clamp="none")
    reference = _unclamped(audio)
    assert streamed.shape == reference.shape
    torch.testing.assert_close(streamed, reference, atol=ATOL, rtol=0)


def _loudest_first(speech: np.ndarray) -> np.ndarray:
    """A loud 1 kHz burst (its frames are the loudest), then silence and the speech at 10%.

    The silence (log10 floor -10) and the quiet speech sit below the burst's floor, so the clamp
    is active on many values and the test sees its floor, not just the unclamped frames.
    """
    t = np.arange(SAMPLE_RATE // 10) / SAMPLE_RATE
    burst = 0.9 * np.sin(2 * np.pi * 1000 * t)
    silence = np.zeros(SAMPLE_RATE // 2)
    return np.concatenate([burst, silence, 0.1 * speech]).astype(np.float32)


def test_pieces_give_the_offline_frames_before_the_clamp(clips: list[np.ndarray]) -> None:
    for index, clip in enumerate(clips):
        for seed in range(3):
            _assert_unclamped_equal(clip, seed=10 * index + seed)


def test_running_clamp_is_exact_when_the_loudest_frame_comes_first(clips: list[np.ndarray]) -> None:
    for index, clip in enumerate(clips):
        audio = _loudest_first(clip)
        offline = log_mel_spectrogram(audio)
        streamed, frontend = _stream(audio, seed=index)
        peak = float(log_mel_from_power(power_spectrum(torch.as_tensor(audio))[..., :-1]).max())
        assert frontend.peak == peak  # the running max reached the global one
        floor = offline.min()
        assert (offline == floor).float().mean() > 0.2  # the clamp floor is really in play
        # The floor is computed from the same peak: bit-identical wherever offline clamps.
        assert bool((streamed[offline == floor] == floor).all())
        torch.testing.assert_close(streamed, offline, atol=CLAMPED_ATOL, rtol=0)


def test_running_clamp_differs_only_below_the_offline_floor(clips: list[np.ndarray]) -> None:
    """Quiet lead-in, loud later: streaming keeps values offline floors; everything else is equal."""
    for index, clip in enumerate(clips):
        audio = np.concatenate([0.01 * clip[: SAMPLE_RATE], clip]).astype(np.float32)
        offline = log_mel_spectrogram(audio)
        streamed, _ = _stream(audio, seed=index)
        floor = offline.min()
        above = offline > floor + CLAMPED_ATOL
        torch.testing.assert_close(streamed[above], offline[above], atol=CLAMPED_ATOL, rtol=0)
        # A lower running max only lowers the floor: streaming <= offline, well below somewhere.
        assert bool((streamed <= offline + CLAMPED_ATOL).all())
        assert float((offline - streamed).max()) > 0.1


@pytest.mark.parametrize("length", [201, 202, 239, 240, 359, 360, 361, 399, 400, 401, 559, 560, 561, 1000, 4321, 16000, 48001])
def test_frame_counts_and_values_match_for_any_length(length: int) -> None:
    audio = np.random.default_rng(length).standard_normal(length).astype(np.float32)
    offline = log_mel_spectrogram(audio)
    assert offline.shape[1] == length // HOP_LENGTH
    for seed in range(3):
        streamed, _ = _stream(audio, seed)
        assert streamed.shape == offline.shape
        _assert_unclamped_equal(audio, seed)


@pytest.mark.parametrize("length", [0, 1, 100, 159, 160, 200])
def test_streams_of_at_most_200_samples_give_no_frames(length: int) -> None:
    audio = np.ones(length, dtype=np.float32)
    with pytest.raises(RuntimeError):
        log_mel_spectrogram(audio)  # offline refuses them: reflect padding needs 201 samples
    frontend = StreamingLogMel()
    assert frontend.push(audio).shape == (80, 0)
    assert frontend.flush().shape == (80, 0)


def test_frames_come_out_as_soon_as_their_window_is_complete() -> None:
    """Frame k needs samples up to 160k + 199 (frame 0: up to 200, the start's reflect padding)."""
    frontend = StreamingLogMel()
    counts = [frontend.push(np.full(1, 0.1 * (i % 7), dtype=np.float32)).shape[1] for i in range(2000)]
    arrived = np.cumsum(counts)  # frames out after sample i (1-based count i + 1)
    for k in range(int(arrived[-1])):
        needed = max(HOP_LENGTH * k + 200, 201)
        assert arrived[needed - 1] == k + 1 and arrived[needed - 2] == k


def test_reset_starts_a_new_stream(clips: list[np.ndarray]) -> None:
    first, second = clips[0], clips[1]

    def run(frontend: StreamingLogMel) -> torch.Tensor:
        # The same pieces as the fresh stream: equal pieces give bit-equal frames.
        return torch.cat([frontend.push(second[:12345]), frontend.push(second[12345:]), frontend.flush()], dim=1)

    fresh = run(StreamingLogMel())
    frontend = StreamingLogMel()
    frontend.push(first[: SAMPLE_RATE + 77])  # mid-stream: a partial window and a running max
    frontend.reset()
    frames = run(frontend)
    assert torch.equal(frames, fresh)
    with pytest.raises(RuntimeError):
        frontend.push(second[:10])
    frontend.reset()  # after a flush too
    assert frontend.n_samples == frontend.n_frames == 0 and frontend.peak == float("-inf")
    assert torch.equal(run(frontend), fresh)


def test_state_holds_only_the_samples_of_pending_windows() -> None:
    """O(new samples) per push: what stays buffered is bounded, whatever has been pushed."""
    frontend = StreamingLogMel()
    rng = np.random.default_rng(0)
    for _ in range(600):  # 60 s in 10 ms blocks
        frontend.push(rng.standard_normal(160).astype(np.float32))
        assert frontend.buffered_samples < 400
    assert frontend.n_frames == (600 * 160 - 200) // HOP_LENGTH + 1


def test_negative_control_an_off_by_one_hop_fails(clips: list[np.ndarray], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming_frontend, "HOP_LENGTH", HOP_LENGTH + 1)
    with pytest.raises(AssertionError):
        _assert_unclamped_equal(clips[0], seed=0)


def test_negative_control_the_running_clamp_is_not_offline_when_the_loudest_frame_is_last(clips: list[np.ndarray]) -> None:
    audio = _loudest_first(clips[0])[::-1].copy()
    with pytest.raises(AssertionError):
        torch.testing.assert_close(_stream(audio, seed=0)[0], log_mel_spectrogram(audio), atol=CLAMPED_ATOL, rtol=0)


def test_multichannel_blocks_are_refused() -> None:
    with pytest.raises(ValueError, match="1-D"):
        StreamingLogMel().push(np.zeros((1600, 2), dtype=np.float32))
