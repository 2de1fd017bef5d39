"""The browser page in headless Chromium with a real recording as its fake microphone.

Chromium plays the WAV in real time at 44.1 kHz; the page's AudioWorklet resamples it to 16 kHz
and streams it to the server. Screenshots are saved under ``artifacts/`` (gitignored).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from burble.metrics.wer import wer
from burble.testing.chromium import HeadlessChromium, find_chromium
from burble.testing.dev_audio import dev_item, require_shared
from burble.testing.server import ServerThread, options_for_tests
from server_helpers import FakeFactory

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_chromium() is None, reason="needs chromium (apt install chromium fonts-liberation)"),
]

ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts"
CLIP = "ls_1089-134691-0001"  # 5.4 s: "for a full hour he had paced up and down waiting ..."

FINAL_TEXT = "Array.from(document.querySelectorAll('#captions .final')).map(e => e.textContent).join('')"


ENDPOINT_SHOWN = "document.querySelector('#captions .segment.done') !== null"


def run_page(
    server: ServerThread, wav: Path, query: str, *, until: str = ENDPOINT_SHOWN, done_timeout: float
) -> tuple[str, str, Path, list[str]]:
    """Open the page, press Start, wait for ``until``, press Stop; return captions + screenshot."""
    with HeadlessChromium(wav) as chrome:
        page = chrome.open(f"{server.http_url}/{query}")
        page.wait_for("document.body.dataset.ready === '1'", timeout=20)
        page.evaluate("document.getElementById('start').click()")
        page.wait_for("document.getElementById('status').textContent.startsWith('listening')", timeout=20)
        try:  # a mid-stream picture with the dimmed partial, when the recognizer shows one
            page.wait_for("document.querySelector('#captions .partial:not(:empty)') !== null", timeout=done_timeout / 2)
            page.screenshot(ARTIFACTS / f"browser_{server.server.factory.model_name}_live.png")
        except TimeoutError:
            pass
        # E.g. the endpoint: the VAD heard the silence after the recording.
        page.wait_for(until, timeout=done_timeout)
        page.evaluate("document.getElementById('stop').click()")
        page.wait_for("document.getElementById('status').textContent === 'stopped'", timeout=done_timeout)
        finals = page.evaluate(FINAL_TEXT)
        status = page.evaluate("document.getElementById('error').hidden ? '' : document.getElementById('error').textContent")
        shot = page.screenshot(ARTIFACTS / f"browser_{server.server.factory.model_name}.png")
        console = list(page.console)
        page.close()
    return finals, status, shot, console


def test_page_streams_faithful_16k_audio():
    """The worklet's 44.1 -> 16 kHz resampling delivers the recording itself (correlation)."""
    require_shared("dev-audio")
    item = dev_item(CLIP)
    factory = FakeFactory(keep_audio=True)
    with ServerThread(factory, options_for_tests(vad=None)) as server:
        # No VAD (so no endpoint): stop once the whole recording has played.
        started = "(window.__t0 = window.__t0 || performance.now())"
        until = f"{started} && performance.now() - window.__t0 > {(item.duration_s + 1.0) * 1000}"
        finals, error, shot, console = run_page(server, item.audio_path, "", until=until, done_timeout=40)
        assert server.wait_idle()
        assert server.snapshot()["closes"] == {"1000": 1}
    assert error == "" and not [c for c in console if c.startswith("exception")]
    assert finals.strip().startswith("w")  # the fake recognizer's words reached the DOM
    assert shot.stat().st_size > 1000
    # Reassemble what the server's recognizer received (absolute 16 kHz indices).
    chunks = factory.created[0].audio
    end = max(s + len(a) for s, a in chunks)
    received = np.zeros(end, dtype=np.float32)
    for start, audio in chunks:
        received[start : start + len(audio)] = audio
    reference = item.load()
    # Find where the recording starts in the capture (to a fraction of a sample: the capture
    # went through 44.1 kHz, so its samples sit between the file's), then compare.
    n = 1 << int(np.ceil(np.log2(len(received) + len(reference))))
    xcorr = np.fft.irfft(np.fft.rfft(received, n) * np.conj(np.fft.rfft(reference, n)), n)
    peak = int(np.argmax(xcorr))
    y0, y1, y2 = xcorr[peak - 1], xcorr[peak], xcorr[(peak + 1) % n]
    lag = (peak - n if peak > n // 2 else peak) + 0.5 * (y0 - y2) / (y0 - 2 * y1 + y2)
    # Chromium's fake device starts playing while getUserMedia resolves: a few ms of the
    # (silent) head may be gone before the page can connect it; more would clip speech.
    assert lag > -0.05 * 16000, f"the first {-lag / 16000:.3f} s of the recording never reached the server"
    freqs = np.fft.rfftfreq(n)
    aligned = np.fft.irfft(np.fft.rfft(reference, n) * np.exp(-2j * np.pi * freqs * lag), n)
    lo, hi = max(0, int(np.ceil(lag))), min(len(received), int(np.floor(lag)) + len(reference))
    segment, expected = received[lo:hi], aligned[lo:hi]
    assert hi - lo > len(reference) - 0.06 * 16000, "the capture is shorter than the recording"
    corr = float(np.corrcoef(segment, expected)[0, 1])
    # Faithful resampling correlates at ~0.9999 in every quarter second. On a loaded machine
    # Chromium's fake capture device now and then renders a few ms of silence (one run measured
    # 0.991 over the whole clip): judge fidelity by the median block, and bound the glitches by
    # the whole-clip figure.
    block = 4000
    blocks = [
        float(np.corrcoef(segment[k : k + block], expected[k : k + block])[0, 1])
        for k in range(0, len(segment) - block + 1, block)
        if np.std(expected[k : k + block]) > 0.01  # speech, not the silent head and tail
    ]
    assert len(blocks) >= 10
    assert np.median(blocks) > 0.999, f"captured audio differs from the recording (median block correlation {np.median(blocks):.5f})"
    assert corr > 0.98, f"captured audio differs from the recording (correlation {corr:.4f})"
    gain = float(np.std(segment) / np.std(expected))
    assert 0.9 < gain < 1.1, f"level changed by {gain:.2f}x"
    print(f"browser capture: lag {lag / 16000 * 1000:.1f} ms, correlation {corr:.5f} (median block {np.median(blocks):.5f}), gain {gain:.3f}")


@pytest.fixture(scope="module")
def asr():
    import burble

    return burble.load_model("tiny.en")


def test_page_shows_live_captions_of_a_real_recording(asr):
    from burble.streaming.server import WhisperRecognizerFactory

    require_shared("dev-audio")
    item = dev_item(CLIP)
    factory = WhisperRecognizerFactory(asr, model_name="tiny.en")
    with ServerThread(factory, options_for_tests()) as server:
        t0 = time.monotonic()
        # realtime=0: a loaded CI machine may decode slower than real time; then the captions
        # lag instead of losing audio, and the check is about what the page shows.
        finals, error, shot, _ = run_page(server, item.audio_path, "?realtime=0", done_timeout=240)
        elapsed = time.monotonic() - t0
        assert server.wait_idle()
    assert error == ""
    assert wer(item.text, finals) <= 0.1, f"captions {finals!r} after {elapsed:.0f} s"
    print(f"browser captions: {finals!r} ({elapsed:.1f} s, screenshot {shot})")
