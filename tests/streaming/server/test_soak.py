"""A 30-minute soak of ``burble serve`` at N = 4 real-time clients keeps the server's memory flat
(issue 14's acceptance: "a 30-minute soak at N = 4 keeps RSS flat (slow test)").

``burble serve`` (tiny.en, its defaults) runs as its own process, so its RSS is measured alone
(``/proc/<pid>/status``). Four clients stream dev speech in real time, each in sessions of
``SESSION_SECONDS`` (the short dev clips joined with 1 s pauses, a different rotation per
session) and reconnect after each one, so sessions open and close all through the soak, as they do
on a service. RSS is sampled every ``SAMPLE_SECONDS``; its growth from the baseline (minute
``BASELINE_MINUTES``, or the soak's middle if shorter) to the end must stay within
``RSS_GROWTH_BOUND``, and every session must end cleanly with words close to the references.
The RSS bound's ability to fail is the negative control in ``tests/streaming/test_long_stream.py``
(the same bound over a loop that keeps memory).

``BURBLE_SOAK_MINUTES`` (default 30) sets the length, e.g. 3 while developing.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from burble.metrics.wer import corpus_wer
from burble.streaming.client import ClientOptions, stream_audio
from burble.testing import dev_audio_items, require_shared
from burble.testing.server import wait_until_listening

REPO = Path(__file__).resolve().parents[3]
MINUTES = float(os.environ.get("BURBLE_SOAK_MINUTES", "30"))
CLIENTS = 4
SESSION_SECONDS = 90.0
SAMPLE_SECONDS = 30.0
BASELINE_MINUTES = 10.0
RSS_GROWTH_BOUND = 50 << 20  # bytes, as the 60-minute stream's
SR = 16000


def server_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def session_audio(items: list, rotation: int) -> tuple[np.ndarray, str]:
    """The short dev clips from ``rotation`` on, joined with 1 s pauses, ~``SESSION_SECONDS`` long."""
    pieces, references, seconds, i = [], [], 0.0, rotation
    while seconds < SESSION_SECONDS:
        item = items[i % len(items)]
        pieces += [item.load(), np.zeros(SR, np.float32)]
        references.append(item.text_normalized)
        seconds += item.duration_s + 1.0
        i += 1
    return np.concatenate(pieces), " ".join(references)


async def soak(url: str, pid: int, items: list, seconds: float) -> tuple[list[tuple[float, int]], list[tuple[str, str]], list[str]]:
    """Run the clients for ``seconds``; returns RSS samples, (reference, hypothesis) per session, errors."""
    samples: list[tuple[float, int]] = []
    sessions: list[tuple[str, str]] = []
    errors: list[str] = []
    started = time.monotonic()
    options = ClientOptions(url=url, realtime=True, partials=False)

    async def client(k: int) -> None:
        rotation = 5 * k
        while time.monotonic() - started < seconds - 10:
            audio, reference = session_audio(items, rotation)
            rotation += 3
            try:
                events = await stream_audio(audio, SR, options)
            except Exception as error:  # every failure is reported, none stops the soak
                errors.append(f"client {k}: {error!r}")
                await asyncio.sleep(1.0)
                continue
            sessions.append((reference, "".join(e.text for e in events if e.type == "final")))

    async def sample() -> None:
        while time.monotonic() - started < seconds:
            samples.append((time.monotonic() - started, server_rss(pid)))
            await asyncio.sleep(SAMPLE_SECONDS)

    await asyncio.gather(sample(), *(client(k) for k in range(CLIENTS)))
    samples.append((time.monotonic() - started, server_rss(pid)))
    return samples, sessions, errors


# ~MINUTES of wall time plus the model's start (~1 min).
@pytest.mark.slow
def test_four_real_time_clients_for_half_an_hour_keep_the_servers_memory_flat():
    require_shared("dev-audio")
    items = dev_audio_items("short")
    process = subprocess.Popen(
        [sys.executable, "-m", "burble", "serve", "--port", "0", "--log-format", "json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        url, _ = wait_until_listening(process, timeout=300)
        samples, sessions, errors = asyncio.run(soak(url, process.pid, items, MINUTES * 60))
    finally:
        process.terminate()
        process.wait(60)
    baseline_at = min(BASELINE_MINUTES, MINUTES / 2) * 60
    baseline = next(rss for at, rss in samples if at >= baseline_at)
    growth = samples[-1][1] - baseline
    trend = ", ".join(f"{at / 60:.1f} min {rss / 2**20:.0f}" for at, rss in samples[:: max(1, len(samples) // 12)])
    wer = corpus_wer(sessions) if sessions else 1.0
    print(f"\nsoak: {len(sessions)} sessions over {MINUTES:.0f} min, WER {wer:.3f}, {len(errors)} errors; server RSS "
          f"MiB: {trend}; growth since minute {baseline_at / 60:.0f}: {growth / 2**20:+.1f} MiB")  # fmt: skip
    assert not errors, errors
    assert len(sessions) >= CLIENTS * int(MINUTES * 60 // (SESSION_SECONDS + 30))
    assert growth <= RSS_GROWTH_BOUND, trend
    # The server's WER at N = 1-4 is 2-5% (BENCHMARKS.md): far above it, sessions lost words.
    assert wer < 0.12
