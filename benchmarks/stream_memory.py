"""What an added stream costs in memory: N cache-aware recognizers in one process, no server.

Each measurement runs in a fresh subprocess (with ``burble serve``'s memory settings:
``burble.heap``'s fixed mmap threshold and capped oneDNN primitive cache). It loads tiny.en,
builds N recognizers (``RecognizerChoice().build``, the server's) and feeds each ~30 s of dev
speech (the short clips joined with 1 s pauses, a different rotation per stream), 1 s at a time,
interleaved across the streams as the compute engine serves them, with an endpoint after every
clip. Then it reports the process's RSS and each recognizer's own tensors (encoder cache, mel and
content buffers, cross-attention K/V).

The row "1 stream, N x the audio" feeds one recognizer the N streams' audio one after another:
the difference between it and N streams is what the streams themselves cost; the difference
between it and 1 stream is growth with the audio processed (caches of shapes seen), not with
streams.

    python benchmarks/stream_memory.py [--streams 1 4 8] [--dtypes float32 bfloat16] [--engine-workers 2] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import append_section, machine_description, markdown_table  # noqa: E402

SR = 16000
SECONDS_PER_STREAM = 30.0


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def worker(streams: int, dtype: str, sequential: bool, engine_workers: int = 0) -> dict:
    """Run in the subprocess: feed the streams, measure."""
    import numpy as np
    import torch

    import burble
    from burble.streaming.engine import ComputeEngine, run_steps
    from burble.streaming.factory import RecognizerChoice
    from burble.testing import dev_audio_items

    torch.set_num_threads(2)
    asr = burble.load_model("tiny.en", dtype=dtype)
    clips = [item.load() for item in dev_audio_items("short")]

    def plan(rotation: int, start: int = 0) -> list[tuple[np.ndarray, int]]:
        pieces, sample = [], start
        for clip in clips[rotation:] + clips[:rotation]:
            pieces.append((clip, sample))
            sample += len(clip) + SR
            if sample - start > SECONDS_PER_STREAM * SR:
                break
        return pieces

    plans = [plan(k) for k in range(streams)]
    if sequential:  # one stream, the same audio one plan after another
        joined: list[tuple[np.ndarray, int]] = []
        for p in plans:
            offset = joined[-1][1] + len(joined[-1][0]) + SR if joined else 0
            joined += [(clip, offset + start - p[0][1]) for clip, start in p]
        plans = [joined]
    recognizers = [RecognizerChoice().build(asr) for _ in plans]
    loaded = rss_mib()
    started = time.perf_counter()
    cursors = [[0, 0] for _ in plans]  # clip index, samples fed of it
    active = list(range(len(plans)))
    # With an engine: each round's calls go to the streams' lanes at once, as a server's sessions
    # submit them, so its workers decode the ready streams' windows as rows of one batch.
    engine = ComputeEngine(engine_workers) if engine_workers else None
    lanes = [engine.lane() for _ in plans] if engine else []
    futures: list = []  # this round's calls on the engine

    def call(i: int, fn, *args, steps: bool = False) -> None:  # type: ignore[no-untyped-def]
        if engine is None:
            run_steps(fn(*args)) if steps else fn(*args)
        else:
            futures.append(lanes[i].submit_steps(fn, *args) if steps else lanes[i].submit(fn, *args))

    while active:
        for i in list(active):
            clip_index, fed = cursors[i]
            if clip_index == len(plans[i]):
                call(i, recognizers[i].flush)
                active.remove(i)
                continue
            clip, start = plans[i][clip_index]
            call(i, recognizers[i].accept_steps, clip[fed : fed + SR], start + fed, steps=True)
            cursors[i][1] += SR
            if cursors[i][1] >= len(clip):
                call(i, recognizers[i].endpoint, start + len(clip))
                cursors[i] = [clip_index + 1, 0]
        for future in futures:
            future.result()
        futures.clear()

    def own_tensors(r) -> float:  # type: ignore[no-untyped-def]
        state, cross = r.encoder_state, r._cross.buffers
        tensors = [*state.cache.keys, *state.cache.values, state.mel, state.content, *cross.keys, *cross.values]
        return sum(t.numel() * t.element_size() for t in tensors) / 2**20

    return {
        "rss": rss_mib(), "loaded": loaded, "seconds": time.perf_counter() - started,
        "tensors": sum(own_tensors(r) for r in recognizers) / len(recognizers),
        "audio": sum(len(c) for p in plans for c, _ in p) / SR,
    }  # fmt: skip


def measure(streams: int, dtype: str, sequential: bool = False, engine_workers: int = 0) -> dict:
    env = dict(os.environ)
    for name in ("MALLOC_MMAP_THRESHOLD_", "ONEDNN_PRIMITIVE_CACHE_CAPACITY"):
        env.pop(name, None)  # the worker makes burble serve's settings itself
    args = [sys.executable, __file__, "--worker", str(streams), dtype, "--engine-workers", str(engine_workers)]
    args += ["--sequential"] if sequential else []
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--sequential", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine-workers", type=int, default=0,
                        help="feed the streams through a compute engine with this many workers (the server's "
                             "batching); 0: call the recognizers directly, one after another")
    args = parser.parse_args(argv)
    if args.worker:
        from burble.heap import cap_primitive_cache, fix_mmap_threshold

        fix_mmap_threshold()
        cap_primitive_cache()
        print(json.dumps(worker(int(args.worker[0]), args.worker[1], args.sequential, args.engine_workers)))
        return 0

    rows = []
    most = max(args.streams)
    for dtype in args.dtypes:
        single = None
        for streams in sorted(args.streams):
            result = measure(streams, dtype, engine_workers=args.engine_workers)
            single = single or result
            added = (result["rss"] - single["rss"]) / (streams - 1) if streams > 1 else float("nan")
            rows.append([dtype, f"{streams} stream{'s' if streams != 1 else ''}", f"{result['audio']:.0f}", f"{result['rss']:.0f}",
                         "-" if streams == 1 else f"{added:.1f}", f"{result['tensors']:.1f}", f"{result['seconds']:.0f}"])  # fmt: skip
            print(rows[-1], flush=True)
        if most > 1:
            result = measure(most, dtype, sequential=True, engine_workers=args.engine_workers)
            rows.append([dtype, f"1 stream, {most} x the audio", f"{result['audio']:.0f}", f"{result['rss']:.0f}", "-",
                         f"{result['tensors']:.1f}", f"{result['seconds']:.0f}"])  # fmt: skip
            print(rows[-1], flush=True)
    table = markdown_table(
        ["dtype", "run", "audio s", "RSS after (MiB)", "MiB per added stream (vs 1 stream)", "own tensors per stream (MiB)", "compute s"],
        rows,
    )
    body = (
        "tiny.en cache-aware recognizers (the server's), each fed ~30 s of dev speech 1 s at a time, interleaved, "
        + (f"through a {args.engine_workers}-worker compute engine (the server's cross-stream batching), "
           if args.engine_workers else "called directly, one after another, ")
        + "one process per row with `burble serve`'s memory settings (`burble/heap.py`). Own tensors: a "
        "recognizer's encoder cache, mel and content buffers and cross-attention K/V after its stream.\n\n" + table
    )
    append_section("Streaming memory per stream (tiny.en, in one process)", body, machine=machine_description(), write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
