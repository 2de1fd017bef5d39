#!/usr/bin/env python
"""The GPU path in one short run: attention bandwidth, offline speed and exactness, streams per GPU.

A GPU is lent to this project now and then, for a few minutes. This script measures everything
the GPU issue asks for in one command (<= 8 minutes on one GPU) and appends one section to
BENCHMARKS.md:

1. **Decode attention**: burble's Triton kernels vs PyTorch SDPA on Whisper's and a 0.5B LM's
   decode shapes, in CUDA graphs: KV bytes read per second against the device's HBM peak
   (``benchmarks/kernels.py`` owns the shapes and the timing; this script picks its rows).
2. **Offline transcription** of the dev clips (greedy), tiny.en and base: RTF of the PyTorch
   baseline (fp32, SDPA, eager: openai-whisper's way of running the model), of burble in half
   precision with the Triton kernels, with CUDA graphs, and with MTP speculation; faster-whisper
   (CTranslate2, fp16) when it runs on this GPU. Every row also counts the clips whose tokens are
   identical to fp32 greedy on the CPU (the reference).
3. **Streams per GPU**: N live streams (1 s chunks, real-time arrival, staggered) through the
   default streaming recognizer; per-chunk latency p50/p95 and the largest N with p95 <= 2.5 s.
4. **Codec**: encode + decode RTF of the shipped codec in half precision (offline; its streaming
   variants run on the CPU), and the TTS row.

Every section runs in its own ``try``: a failure costs its rows, with the error in the table,
never the other sections. A deadline (``--budget-minutes``) skips what would not fit.

Usage::

    python benchmarks/gpu.py              # on a GPU: the whole table, appended to BENCHMARKS.md
    python benchmarks/gpu.py --no-write   # print only
    python benchmarks/gpu.py --dry-run    # CPU, tiny shapes and one clip: every code path, no
                                          # measurement, nothing written (CI runs this)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

LATENCY_GOAL_S = 2.5  # p95 per-chunk latency a stream may have and still count as real time


@dataclass(frozen=True)
class Clip:
    name: str
    audio: np.ndarray  # 16 kHz mono float32

    @property
    def seconds(self) -> float:
        return self.audio.size / 16000


@dataclass
class Run:
    """What every section needs: where to compute, in what precision, the clips, the deadline."""

    device: str
    half: "torch.dtype"  # of the half-precision rows (float16 on GPU, bfloat16 in a dry run)
    dry_run: bool
    deadline: float
    clips: list[Clip]
    models: list[str]

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()


# -- inputs -------------------------------------------------------------------------------------


def shared_dir() -> Path:
    return Path(os.environ.get("BURBLE_SHARED", ROOT.parent / "shared"))


def load_clips(dry_run: bool) -> list[Clip]:
    """The dev clips (the JFK example alone in a dry run, or where ``../shared`` is missing)."""
    from burble.audio.io import load_audio

    jfk = [Clip("jfk", load_audio(ROOT / "examples" / "jfk.wav"))]
    manifest = shared_dir() / "dev-audio" / "manifest.jsonl"
    if dry_run or not manifest.is_file():
        return jfk
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    return [Clip(r["id"], load_audio(manifest.parent / r["audio"])) for r in rows]


# -- 1. decode attention -------------------------------------------------------------------------


def attention_rows(run: Run) -> list[dict[str, str]]:
    """Triton vs SDPA decode attention; in a dry run, the same calls on tiny CPU shapes under the
    Triton interpreter, checked against SDPA (the kernels' code path, not a speed)."""
    import torch

    import kernels  # benchmarks/kernels.py: shapes, CUDA-graph timing, the device's peak

    if run.dry_run:
        from burble.kernels.attention import attention

        rows = []
        gen = torch.Generator().manual_seed(0)
        for kind, batch, length in (("self", 1, 40), ("cross", 1, 75), ("self", 3, 40)):
            shape = kernels.DecodeShape("tiny", kind, batch, 2, length, capacity=length + 8, head_dim=16)
            q, k, v = kernels.decode_inputs(shape, torch.float32, gen)
            times = {}
            outputs = {}
            for backend in kernels.BACKENDS:
                started = time.perf_counter()
                outputs[backend] = attention(q, k, v, is_causal=kind != "cross", backend=backend)
                times[backend] = (time.perf_counter() - started) * 1e6
            diff = float((outputs["triton"] - outputs["torch"]).abs().max())
            if diff > 1e-3:
                raise AssertionError(f"Triton and SDPA disagree by {diff} on {shape}")
            rows.append({
                "model": shape.model, "call": f"{kind} B={batch} L={length} (interpreter)",
                "triton us": f"{times['triton']:.0f}", "torch us": f"{times['torch']:.0f}",
                "max |diff|": f"{diff:.1e}",
            })
        return rows
    peak = kernels.peak_bandwidth_gbs()
    tiny = kernels.WHISPER["whisper-tiny"]
    shapes = [
        kernels.DecodeShape("whisper-tiny", "self", 1, tiny.text_heads, 224, capacity=tiny.text_ctx),
        kernels.DecodeShape("whisper-tiny", "cross", 1, tiny.text_heads, tiny.audio_ctx, capacity=tiny.audio_ctx),
        kernels.DecodeShape("whisper-tiny", "self", 64, tiny.text_heads, 224, capacity=tiny.text_ctx),
        kernels.DecodeShape(kernels.LM_MODEL, "self", 8, kernels.LM_HEADS, kernels.LM_CONTEXT, capacity=kernels.LM_CONTEXT),
        kernels.DecodeShape(kernels.LM_MODEL, "verify", 1, kernels.LM_HEADS, 2048, capacity=kernels.LM_CONTEXT, q_len=9),
    ]
    return [kernels.bench_decode(shape, run.half, peak) for shape in shapes]


# -- 2. offline transcription --------------------------------------------------------------------


@dataclass(frozen=True)
class OfflineConfig:
    """One row of the offline table.

    Attributes:
      label: what the row runs.
      half: half precision (else float32).
      backend: attention backend (``"torch"``: SDPA everywhere; ``"auto"``: Triton on CUDA).
      static_decode: CUDA graphs for single-token steps.
      speculative: ``TranscribeOptions.speculative``.
    """

    label: str
    half: bool
    backend: str
    static_decode: bool = False
    speculative: str = "off"


OFFLINE_CONFIGS = (
    OfflineConfig("PyTorch baseline: fp32, SDPA, eager", half=False, backend="torch"),
    OfflineConfig("burble half, Triton, eager", half=True, backend="auto"),
    OfflineConfig("burble half, Triton, CUDA graphs", half=True, backend="auto", static_decode=True),
    OfflineConfig("burble half, Triton, CUDA graphs, --speculative mtp", half=True, backend="auto", static_decode=True, speculative="mtp"),
)


def transcribe_clips(asr, clips: Sequence[Clip], speculative: str = "off") -> tuple[float, list[list[int]]]:
    """Wall seconds and each clip's tokens, greedy (one warm-up clip first, not timed)."""
    import torch

    options = dict(beam_size=1, speculative=speculative)
    asr.transcribe(clips[0].audio, **options)
    if asr.device.type == "cuda":
        torch.cuda.synchronize(asr.device)
    started = time.perf_counter()
    tokens = []
    for clip in clips:
        result = asr.transcribe(clip.audio, **options)
        tokens.append([t for s in result.segments for t in s.tokens])
    if asr.device.type == "cuda":
        torch.cuda.synchronize(asr.device)
    return time.perf_counter() - started, tokens


def faster_whisper_seconds(name: str, clips: Sequence[Clip]) -> tuple[float, list[str]]:
    """Wall seconds of faster-whisper (fp16 on CUDA, greedy) over ``clips`` and its texts."""
    import ctranslate2
    from faster_whisper import WhisperModel

    from burble.asr.whisper.loading import materialize_ct2_dir

    if ctranslate2.get_cuda_device_count() < 1:
        raise RuntimeError("CTranslate2 sees no CUDA device (its wheel's CUDA libraries did not load)")
    directory = materialize_ct2_dir(name, Path(os.environ.get("TMPDIR", "/tmp")) / f"burble-ct2-{name}")
    model = WhisperModel(str(directory), device="cuda", compute_type="float16")
    list(model.transcribe(clips[0].audio, beam_size=1)[0])
    started = time.perf_counter()
    texts = ["".join(s.text for s in model.transcribe(c.audio, beam_size=1)[0]) for c in clips]
    return time.perf_counter() - started, texts


def token_edits(reference: Sequence[int], hypothesis: Sequence[int]) -> int:
    """Levenshtein distance between two token sequences (substitutions, insertions, deletions)."""
    from rapidfuzz.distance import Levenshtein  # jiwer's dependency

    return Levenshtein.distance(list(reference), list(hypothesis))


def agreement(tokens: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> str:
    """``"k/n clips, x% tokens"``: clips with identical tokens, and the token error rate against the reference."""
    same = sum(list(a) == list(b) for a, b in zip(tokens, reference))
    edits = sum(token_edits(b, a) for a, b in zip(tokens, reference))
    total = max(1, sum(len(b) for b in reference))
    return f"{same}/{len(reference)} clips ({100 * edits / total:.2f}% tokens differ)"


def offline_rows(run: Run) -> list[dict[str, str]]:
    import torch

    import burble
    from burble.kernels.attention import get_default_backend, set_default_backend
    from burble.precision import dtype_name

    audio_seconds = sum(c.seconds for c in run.clips)
    rows: list[dict[str, str]] = []
    for name in run.models:
        if run.seconds_left() < 60:
            rows.append({"model": name, "run": "skipped: out of time"})
            continue
        reference = burble.load_model(name, device="cpu")
        cpu_seconds, reference_tokens = transcribe_clips(reference, run.clips)
        rows.append({
            "model": name, "run": "reference: fp32 greedy on the CPU", "RTF": f"{cpu_seconds / audio_seconds:.4f}",
            "x baseline": "", "identical tokens": "(the reference)",
        })
        del reference
        baseline_rtf: Optional[float] = None
        for config in OFFLINE_CONFIGS:
            dtype = run.half if config.half else torch.float32
            label = config.label.replace("half", dtype_name(dtype))  # type: ignore[arg-type]
            previous = get_default_backend()
            try:
                set_default_backend(config.backend)  # type: ignore[arg-type]
                asr = burble.load_model(name, device=run.device, dtype=dtype, static_decode=config.static_decode)
                if config.speculative == "mtp" and asr.whisper.draft_heads is None:
                    rows.append({"model": name, "run": f"{label}: not run: no trained draft heads ship for {name}"})
                    continue
                seconds, tokens = transcribe_clips(asr, run.clips, config.speculative)
                rtf = seconds / audio_seconds
                baseline_rtf = baseline_rtf or rtf
                rows.append({
                    "model": name, "run": label, "RTF": f"{rtf:.4f}", "x baseline": f"{baseline_rtf / rtf:.2f}x",
                    "identical tokens": agreement(tokens, reference_tokens),
                })
            except Exception as error:  # one configuration failing must not lose the others
                rows.append({"model": name, "run": f"{label}: failed: {type(error).__name__}: {error}"[:300]})
            finally:
                set_default_backend(previous)
            print(rows[-1], flush=True)
        if run.dry_run:
            rows.append({"model": name, "run": "faster-whisper CUDA: not run in a dry run"})
            continue
        try:
            seconds, _ = faster_whisper_seconds(name, run.clips)
            rtf = seconds / audio_seconds
            rows.append({"model": name, "run": "faster-whisper fp16 (CTranslate2 CUDA)", "RTF": f"{rtf:.4f}",
                         "x baseline": f"{(baseline_rtf or rtf) / rtf:.2f}x", "identical tokens": "(texts only)"})
        except Exception as error:
            rows.append({"model": name, "run": f"faster-whisper CUDA: not run: {type(error).__name__}: {error}"[:300]})
        print(rows[-1], flush=True)
    return rows


# -- 3. streams per GPU --------------------------------------------------------------------------


def stream_latencies(asr, clips: Sequence[Clip], streams: int, audio_seconds: float, chunk_seconds: float = 1.0) -> list[float]:
    """Per-chunk latencies of ``streams`` live streams fed in real time from one thread.

    Stream ``s`` receives chunk ``i`` at ``(i + 1 + s / streams) * chunk_seconds`` after the start
    (staggered, as independent clients are); a chunk's latency is from its arrival to the end of
    its recognizer call. Sessions are served in arrival order, one at a time (there is no
    cross-stream batching yet: the engine issue), so a slow session delays the ones behind it.
    The run gives up once it falls ``4 * LATENCY_GOAL_S`` behind.
    """
    from burble.streaming.factory import RecognizerChoice

    chunk = int(16000 * chunk_seconds)
    chunks = max(1, int(audio_seconds / chunk_seconds))
    audio = np.concatenate([c.audio for c in clips])
    while audio.size < chunk * chunks * 2:
        audio = np.concatenate([audio, audio])
    recognizers = [RecognizerChoice().build(asr) for _ in range(streams)]
    offsets = [(s * 7919 * chunk) % (audio.size - chunk * chunks) for s in range(streams)]  # distinct audio
    arrivals = sorted(((i + 1 + s / streams) * chunk_seconds, s, i) for i in range(chunks) for s in range(streams))
    latencies: list[float] = []
    started = time.perf_counter()
    for arrival, s, i in arrivals:
        wait = started + arrival - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        begin = offsets[s] + i * chunk
        recognizers[s].accept(audio[begin : begin + chunk], i * chunk)
        latency = time.perf_counter() - started - arrival
        latencies.append(latency)
        if latency > 4 * LATENCY_GOAL_S:
            break
    return latencies


def stream_rows(run: Run) -> list[dict[str, str]]:
    import burble
    from burble.precision import dtype_name

    name = run.models[0]
    asr = burble.load_model(name, device=run.device, dtype=run.half, static_decode=run.device != "cpu")
    counts, seconds = ((1, 2), 2.0) if run.dry_run else ((1, 8, 32, 64, 128, 256), 10.0)
    stream_latencies(asr, run.clips, 1, 2.0)  # warm-up: kernels compile, graphs capture
    rows = []
    for streams in counts:
        if run.seconds_left() < seconds * 3:
            rows.append({"model": name, "streams": str(streams), "p50 s": "skipped: out of time"})
            break
        latencies = stream_latencies(asr, run.clips, streams, seconds)
        p95 = float(np.percentile(latencies, 95))
        rows.append({
            "model": f"{name} ({dtype_name(run.half)})", "streams": str(streams),
            "chunks": str(len(latencies)), "p50 s": f"{statistics.median(latencies):.3f}", "p95 s": f"{p95:.3f}",
            "real time": "yes" if p95 <= LATENCY_GOAL_S else "no",
        })
        print(rows[-1], flush=True)
        if p95 > LATENCY_GOAL_S:
            break
    return rows


# -- 4. codec and TTS ----------------------------------------------------------------------------


def codec_rows(run: Run) -> list[dict[str, str]]:
    from burble import codecs
    from burble.precision import dtype_name

    rows = []
    names = [codecs.DEFAULT_CODEC] if codecs.DEFAULT_CODEC in codecs.available_codecs() else []
    for name in names:
        codec = codecs.load(name, device=run.device, dtype=run.half)
        audio = run.clips[0].audio
        if run.dry_run:  # a CPU without native bfloat16 vocodes ~60x slower than real time
            audio = audio[:4000]
        else:
            codec.decode(codec.encode(audio[:16000], 16000))  # warm-up
        started = time.perf_counter()
        codes = codec.encode(audio, 16000)
        encoded = time.perf_counter()
        codec.decode(codes)
        done = time.perf_counter()
        seconds = len(audio) / 16000
        rows.append({
            "model": f"codec {name} ({codec.default_books} books)", "device": f"{run.device}, {dtype_name(run.half)}",
            "encode RTF": f"{(encoded - started) / seconds:.3f}", "decode RTF": f"{(done - encoded) / seconds:.3f}",
        })
    if not names:
        rows.append({"model": "codec", "device": "no codec shipped"})
    rows.append({"model": "codec-LM TTS", "device": "not measured here (benchmarks/tts.py measures it on the CPU)"})
    return rows


# -- the run -------------------------------------------------------------------------------------


def table(rows: list[dict[str, str]]) -> str:
    from common import markdown_table

    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    return markdown_table(columns, [[row.get(c, "") for c in columns] for row in rows]) if rows else "(no rows)"


def device_line(device: str) -> str:
    import torch

    from common import machine_description

    if device == "cpu":
        return f"dry run on the CPU (no measurement): {machine_description()}"
    props = torch.cuda.get_device_properties(0)
    return f"{props.name} ({props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}); host: {machine_description()}"


SECTIONS: tuple[tuple[str, Callable[[Run], list[dict[str, str]]]], ...] = (
    ("Decode attention: Triton vs SDPA (CUDA graphs; GB/s of KV read, % of HBM peak)", attention_rows),
    ("Offline, greedy, dev clips: RTF and tokens identical to fp32 CPU greedy", offline_rows),
    (f"Streams per GPU: 1 s chunks in real time, per-chunk latency (real time: p95 <= {LATENCY_GOAL_S} s)", stream_rows),
    ("Codec and TTS", codec_rows),
)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, one clip: check every code path, write nothing")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--budget-minutes", type=float, default=8.0, help="skip what would not finish within this")
    parser.add_argument("--models", default="tiny.en,base", help="Whisper checkpoints of the offline rows")
    parser.add_argument("--sections", default="attention,offline,streams,codec", help="which sections to run")
    args = parser.parse_args(argv)
    if args.dry_run:
        # The Triton interpreter runs the kernels on CPU tensors; it must be on before triton loads.
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("benchmarks/gpu.py needs a CUDA GPU (none is visible); --dry-run checks its code paths on the CPU.")
        return 0
    run = Run(
        device="cpu" if args.dry_run else "cuda",
        half=torch.bfloat16 if args.dry_run else torch.float16,  # CPUs have no fast fp16 matmul
        dry_run=args.dry_run,
        deadline=time.monotonic() + 60 * args.budget_minutes,
        clips=load_clips(args.dry_run),
        models=[m for m in args.models.split(",") if m][: 1 if args.dry_run else None],
    )
    wanted = set(args.sections.split(","))
    keys = ("attention", "offline", "streams", "codec")
    body, failed = [], 0
    for key, (title, section) in zip(keys, SECTIONS):
        if key not in wanted:
            continue
        started = time.perf_counter()
        try:
            rows = section(run)
        except Exception as error:  # report it and go on: the other sections still measure
            failed += 1
            rows = [{"failed": f"{type(error).__name__}: {error}"[:400]}]
        body.append(f"### {title}\n\n{table(rows)}\n\n({time.perf_counter() - started:.0f} s)")
        print(body[-1], flush=True)
    from common import append_section

    append_section(
        "GPU path" + (" (dry run)" if args.dry_run else ""), "\n\n".join(body),
        machine=device_line(run.device), write=not (args.dry_run or args.no_write),
    )
    return 1 if (failed and args.dry_run) else 0


if __name__ == "__main__":
    sys.exit(main())
