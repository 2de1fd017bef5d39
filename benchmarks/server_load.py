"""Load test of ``burble serve``: N concurrent real-time clients on loopback, N = 1, 2, 4, 6, 8 ...

The server runs as its own process (``python -m burble serve``), so its CPU time and memory are
measured alone (``/proc/<pid>``). Each client streams ~30 s of real speech (dev recordings joined
with 1 s pauses, a different rotation per client) at real-time pace in 100 ms frames, as a
microphone would, and records when each ``final`` word arrives.

Per N:

- final-word latency: arrival time of a committed word (client clock, from the first frame
  sent) minus the word's end in the audio; p50 / p95 over all final words of all clients;
- WER of the committed text against the references (it degrades if audio is dropped), and the
  same clients' audio through ``burble stream --fast`` one at a time ("alone": the same recognizer,
  VAD and chunk, in this process, no clock): the ratio is issue 14's "WER at N <= 1.1x WER at
  N = 1" on the same audio (each level's clients hear different recordings, so comparing the
  levels' WER with each other compares recordings, not load);
- compute RTF: server CPU seconds per second of audio received (all sessions);
- CPU: server CPU seconds per wall second (cores busy); RSS of the server process: the median of
  samples while the clients stream, after they closed, and its peak;
- dropped audio (real-time sessions lose their oldest audio when recognition falls behind);
- decodes per batch: the server's engine decodes the windows of the streams ready at once as
  rows of one batch (``compute_batches`` in ``/metrics``); the mean is over decodes (the batch
  size a decode ran in), the max the largest batch.

N "stays real time" when no audio was dropped and p95 final-word latency is at most
``--max-latency`` seconds. The sweep stops after the first N that does not.

    python benchmarks/server_load.py [--levels 1 2 4 6 8] [--compute-slots 2] [--threads 1] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from burble.metrics.wer import corpus_wer  # noqa: E402
from burble.streaming.client import ClientOptions, StreamingClient  # noqa: E402
from burble.testing import dev_audio_items  # noqa: E402
from common import append_section, markdown_table  # noqa: E402

SR = 16000
ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ server process
class ServerProcess:
    """``burble serve`` in a subprocess; reads its URL from stderr and its usage from /proc."""

    def __init__(self, args: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "burble", "serve", "--port", "0", "--log-format", "json", *args],
            stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        self.url: str | None = None
        self.log: list[str] = []
        found = threading.Event()

        def read() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.log.append(line)
                match = re.search(r"(ws://[\w.:\[\]-]+/ws)\b", line)  # "listening on ws://HOST:PORT/ws ..."
                if match:
                    self.url = match.group(1)
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(300):
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.log[-20:]))

    @property
    def http(self) -> str:
        assert self.url is not None
        return self.url.replace("ws://", "http://").rsplit("/ws", 1)[0]

    def metrics(self) -> dict:
        with urllib.request.urlopen(self.http + "/metrics.json", timeout=10) as response:
            return json.loads(response.read())

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def memory_mb(self) -> tuple[float, float]:
        """(current RSS, peak RSS) in MiB."""
        values = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(value.split()[0]) / 1024
        return values["VmRSS"], values["VmHWM"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()


class RSSSampler:
    """The server's RSS every ``interval`` seconds while a level's clients stream (``with``).

    Its median is what the level's live sessions hold; RSS after the level (sessions closed) is
    what the allocator kept, and the peak (VmHWM) the most the process ever held.
    """

    def __init__(self, server: ServerProcess, interval: float = 0.25) -> None:
        self.server, self.interval = server, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(self.server.memory_mb()[0])

    def __enter__(self) -> "RSSSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def median(self) -> float:
        return float(np.median(self.samples)) if self.samples else float("nan")


# ------------------------------------------------------------------------------------ clients
@dataclass
class ClientResult:
    latencies: list[float] = field(default_factory=list)
    text: str = ""
    error: str = ""
    finished_after: float = 0.0  # seconds after the last audio frame until the server closed


async def run_client(url: str, audio: np.ndarray, frame_seconds: float = 0.1) -> ClientResult:
    result = ClientResult()
    client = StreamingClient(ClientOptions(url=url, realtime=True, partials=True), sample_rate=SR)
    try:
        await client.connect()
    except Exception as e:  # e.g. server_busy
        result.error = repr(e)
        return result
    frame = int(frame_seconds * SR)
    t0 = time.monotonic()
    sent_all = asyncio.Event()

    async def send() -> None:
        for i in range(0, len(audio), frame):
            piece = audio[i : i + frame]
            due = t0 + (i + len(piece)) / SR  # a capture delivers a frame once it is recorded
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            await client.send_audio(piece)
        sent_all.set()
        await client.stop()

    sender = asyncio.create_task(send())
    texts = []
    try:
        async for event in client.events():
            if event.type == "final":
                now = time.monotonic() - t0
                result.latencies += [now - w.end for w in event.words]
                texts.append(event.text)
    except Exception as e:
        result.error = repr(e)
    await asyncio.gather(sender, return_exceptions=True)
    result.finished_after = time.monotonic() - t0 - len(audio) / SR
    result.text = "".join(texts)
    await client.close()
    return result


def client_audio(items, k: int, seconds: float) -> tuple[np.ndarray, str]:
    """Dev recordings from a per-client rotation, joined with 1 s pauses, about ``seconds`` long."""
    pieces, refs, total = [], [], 0.0
    pause = np.zeros(SR, dtype=np.float32)
    i = k
    while total < seconds:
        item = items[i % len(items)]
        pieces += [item.load(), pause]
        refs.append(item.text)
        total += item.duration_s + 1.0
        i += 1
    return np.concatenate(pieces), " ".join(refs)


def alone_wer(streams: list[tuple[np.ndarray, str]], *, model: str, dtype: str, chunk: float) -> float:
    """WER of each stream through ``burble stream --fast`` (same recognizer defaults, VAD, chunk), one
    at a time in this process: what each client would get with the server to itself."""
    from burble.audio.vad import VADOptions
    from burble.streaming.factory import RecognizerChoice
    from burble.streaming.loop import PipelineOptions, asr_pipeline
    from burble.streaming.recognizer import StreamingOptions
    from burble.streaming.sources import ArraySource

    asr = _alone_model(model, dtype)
    pairs = []
    for audio, ref in streams:
        sink = _FinalText()
        recognizer = RecognizerChoice().build(asr, StreamingOptions())
        pipeline = asr_pipeline(
            ArraySource(audio, realtime=False), recognizer, [sink], vad=VADOptions(), options=PipelineOptions(chunk_seconds=chunk)
        )
        asyncio.run(pipeline.run())
        pairs.append((ref, sink.committed_text()))
    return corpus_wer(pairs)


class _FinalText:
    """A sink that keeps the committed (``final``) text."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, event) -> None:
        if event.type == "final":
            self.parts.append(event.text)

    def close(self) -> None:
        pass

    def committed_text(self) -> str:
        return "".join(self.parts)


@functools.lru_cache(maxsize=None)
def _alone_model(model: str, dtype: str):
    import burble

    return burble.load_model(model, dtype=dtype)


# --------------------------------------------------------------------------------- benchmark
def batch_sizes(batches: dict[int, int]) -> str:
    """``mean / max`` calls per engine batch (weighted by calls: what a decode saw)."""
    calls = sum(size * n for size, n in batches.items() if n > 0)
    if not calls:
        return "-"
    mean = sum(size * size * n for size, n in batches.items() if n > 0) / calls
    return f"{mean:.1f} / {max(size for size, n in batches.items() if n > 0)}"


def warm_description(args: argparse.Namespace) -> str:
    if args.warm_clients == 1:
        return "one client, 5 s"
    return f"{args.warm_clients} concurrent clients, {args.seconds:.0f} s each"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 6, 8])
    parser.add_argument("--seconds", type=float, default=30.0, help="audio per client")
    parser.add_argument("--compute-slots", type=int, default=None, help="server --compute-slots")
    parser.add_argument("--threads", type=int, default=0, help="server --threads (torch threads)")
    parser.add_argument("--chunk", type=float, default=1.0, help="server --chunk")
    parser.add_argument("--dtype", default="float32", help="server --dtype (bfloat16: ~1.6x less compute on CPUs with AVX-512 BF16)")
    parser.add_argument("--max-latency", type=float, default=3.0, help="p95 final-word latency bound for 'real time'")
    parser.add_argument("--keep-going", action="store_true", help="run every level even after one is not real time")
    parser.add_argument("--warm-clients", type=int, default=1,
                        help="concurrent clients of the warm-up before the levels (1: one 5 s clip; N > 1: N x --seconds)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)

    from common import machine_description

    machine = machine_description()
    items = [it for it in dev_audio_items(subset="short") if it.duration_s <= 12]
    server_args = ["--model", args.model, "--max-sessions", str(max(args.levels) + 2), "--chunk", str(args.chunk), "--idle-timeout", "120"]
    if args.compute_slots:
        server_args += ["--compute-slots", str(args.compute_slots)]
    if args.threads:
        server_args += ["--threads", str(args.threads)]
    server_args += ["--dtype", args.dtype]
    server = ServerProcess(server_args)
    rows = []
    best = 0
    try:
        idle_rss, _ = server.memory_mb()
        # Warm-up: first-call allocations and lazy imports; with --warm-clients N, also the
        # process-wide state that N concurrent streams' batch shapes fill once (see the notes).
        warm = [client_audio(items, k, 5.0 if args.warm_clients == 1 else args.seconds)[0] for k in range(args.warm_clients)]

        async def run_warm():
            return await asyncio.gather(*(run_client(server.url, audio) for audio in warm))

        asyncio.run(run_warm())
        warm_rss, _ = server.memory_mb()
        for n in args.levels:
            streams = [client_audio(items, k, args.seconds) for k in range(n)]
            before, cpu0, t0 = server.metrics(), server.cpu_seconds(), time.monotonic()

            async def run_all():
                return await asyncio.gather(*(run_client(server.url, audio) for audio, _ in streams))

            with RSSSampler(server) as live:
                results = asyncio.run(run_all())
            wall = time.monotonic() - t0
            cpu = server.cpu_seconds() - cpu0
            after = server.metrics()
            rss, peak = server.memory_mb()
            audio_s = after["audio_seconds"] - before["audio_seconds"]
            dropped = after["dropped_seconds"] - before["dropped_seconds"]
            latencies = [x for r in results for x in r.latencies]
            errors = [r.error for r in results if r.error]
            wer = corpus_wer([(ref, r.text) for (_, ref), r in zip(streams, results)])
            alone = alone_wer(streams, model=args.model, dtype=args.dtype, chunk=args.chunk)  # after the clients: no load
            batches = {int(k): v - before.get("compute_batches", {}).get(k, 0) for k, v in after.get("compute_batches", {}).items()}
            p50, p95 = percentile(latencies, 50), percentile(latencies, 95)
            realtime = not errors and dropped == 0 and p95 <= args.max_latency
            best = n if realtime and n > best else best
            rows.append([
                n, f"{p50:.2f}", f"{p95:.2f}", f"{max(latencies, default=float('nan')):.2f}", f"{wer:.3f}",
                f"{alone:.3f}", f"{wer / alone:.2f}" if alone else "-", f"{cpu / audio_s:.3f}" if audio_s else "-", f"{cpu / wall:.2f}", f"{dropped:.1f}",
                f"{max(r.finished_after for r in results):.1f}", f"{live.median():.0f} / {rss:.0f} / {peak:.0f}", batch_sizes(batches),
                "yes" if realtime else "no" + (f" ({len(errors)} errors)" if errors else ""),
            ])  # fmt: skip
            print(" | ".join(str(c) for c in rows[-1]), flush=True)
            if not realtime and not args.keep_going:
                break
    finally:
        server.stop()

    header = [
        "clients", "final-word latency p50 (s)", "p95 (s)", "max (s)", "WER", "WER alone", "WER / alone", "compute RTF (CPU s / audio s)",
        "server CPU (cores)", "dropped audio (s)", "close after end (s)", "RSS live median / after / peak (MiB)",
        "decodes per batch: mean / max", "real time",
    ]  # fmt: skip
    slots = args.compute_slots or os.cpu_count()
    body = (
        f"`burble serve --model {args.model} --chunk {args.chunk} --dtype {args.dtype}` with {slots} compute slots and "
        f"{args.threads or 'default'} torch threads, in its own process; N clients on loopback each stream "
        f"~{args.seconds:.0f} s of dev speech (joined with 1 s pauses) in real time (100 ms frames). Latency: "
        f"arrival of each final word minus its end in the audio. WER alone: the same clients' audio through "
        f"`burble stream --fast`, one at a time. Real time: nothing dropped and p95 <= "
        f"{args.max_latency:g} s. Idle server RSS after loading: {idle_rss:.0f} MiB; after the warm-up "
        f"({warm_description(args)}): {warm_rss:.0f} MiB.\n\n"
        + markdown_table(header, rows)
        + f"\n\nLargest N that stays real time: **{best}**.\n"
    )
    append_section(f"WebSocket server load ({args.model}, {args.dtype})", body, machine=machine, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
