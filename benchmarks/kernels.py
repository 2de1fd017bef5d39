#!/usr/bin/env python
"""Attention kernels on a GPU: burble's Triton kernels against PyTorch SDPA.

Decode attention reads the whole KV cache once per step and does almost no arithmetic, so its
figure of merit is achieved memory bandwidth: KV bytes read / time, against the device's peak.
The script times, for shapes of Whisper tiny (6 heads, d=64), Whisper base (8 heads, d=64) and a
0.5B LM (14 heads, d=64, caches up to 4k):

1. decode attention (1 query, and 9 queries = speculative verification) over a KV-cache view:
   Triton vs SDPA, in CUDA graphs (kernel time; the caches rotate through enough copies to defeat
   the L2 cache) and eagerly (what an un-captured decode loop pays, launch overhead included);
2. prefill attention (Whisper encoder self-attention, an LM prompt): TFLOP/s, Triton vs SDPA;
3. Whisper decoder tokens/s end to end (real weights, fp16, greedy steps) with each backend.

Usage::

    python benchmarks/kernels.py              # whole table (a few minutes), appended to BENCHMARKS.md
    python benchmarks/kernels.py --quick      # a few rows, a smoke run
    python benchmarks/kernels.py --no-write   # print only

Without CUDA it says so and exits 0 without measuring or writing anything.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from burble.decoding.model import AutoregressiveModel  # noqa: E402
from burble.kernels.attention import attention, get_default_backend, set_default_backend  # noqa: E402

BACKENDS = ("triton", "torch")


@dataclass(frozen=True)
class WhisperAttentionDims:
    """The attention shapes of one Whisper checkpoint (tests check them against its real weights).

    Attributes:
      checkpoint: the ``burble.load_model`` name whose shapes these are.
      text_heads / audio_heads: decoder and encoder attention heads.
      head_dim: width of one head (the same in both stacks).
      text_ctx: decoder positions (the self-attention KV-cache capacity).
      audio_ctx: encoder positions (the cross-attention keys, the encoder's sequence length).
    """

    checkpoint: str
    text_heads: int
    audio_heads: int
    head_dim: int
    text_ctx: int = 448
    audio_ctx: int = 1500


WHISPER = {
    "whisper-tiny": WhisperAttentionDims("tiny.en", text_heads=6, audio_heads=6, head_dim=64),
    "whisper-base": WhisperAttentionDims("base", text_heads=8, audio_heads=8, head_dim=64),
}
# A 0.5B decoder-only LM (Qwen2-0.5B-like: 14 query heads of 64): the codec-LM size wave 2 plans.
LM_MODEL, LM_HEADS, LM_CONTEXT = "lm-0.5b", 14, 4096


@dataclass(frozen=True)
class DecodeShape:
    """One decode-attention call: ``q`` ``(batch, heads, q_len, 64)`` against ``cache_len`` keys.

    Attributes:
      model: whose shape this is (for the table).
      kind: ``"self"`` (a view of a ``capacity``-long KV cache, causal), ``"cross"`` (Whisper's
        1500 encoder keys, one copy expanded to every row as the decoder does) or ``"verify"``
        (``q_len`` speculative tokens, causal).
    """

    model: str
    kind: str
    batch: int
    heads: int
    cache_len: int
    capacity: int
    q_len: int = 1
    head_dim: int = 64

    @property
    def kv_batch(self) -> int:
        return 1 if self.kind == "cross" else self.batch

    @property
    def kv_bytes(self) -> int:
        """Bytes of keys and values a call must read from memory (each distinct byte once)."""
        return 2 * self.kv_batch * self.heads * self.cache_len * self.head_dim * 2  # fp16/bf16


@dataclass(frozen=True)
class PrefillShape:
    model: str
    batch: int
    heads: int
    q_len: int
    k_len: int
    causal: bool
    head_dim: int = 64

    @property
    def flops(self) -> float:
        full = 4.0 * self.batch * self.heads * self.q_len * self.k_len * self.head_dim
        if not self.causal:
            return full
        # Visible (query, key) pairs under the bottom-right causal mask.
        offset = self.k_len - self.q_len
        visible = sum(min(self.k_len, offset + i + 1) for i in range(self.q_len))
        return full * visible / (self.q_len * self.k_len)


def decode_shapes(quick: bool) -> list[DecodeShape]:
    shapes: list[DecodeShape] = []
    for model, dims in WHISPER.items():
        heads, ctx, width = dims.text_heads, dims.text_ctx, dims.head_dim
        for batch in (1, 5) if not quick else (5,):
            for length in (64, ctx // 2, ctx) if not quick else (ctx // 2,):
                shapes.append(DecodeShape(model, "self", batch, heads, length, capacity=ctx, head_dim=width))
            shapes.append(DecodeShape(model, "cross", batch, heads, dims.audio_ctx, capacity=dims.audio_ctx, head_dim=width))
        if not quick:
            shapes.append(DecodeShape(model, "self", 16, heads, ctx // 2, capacity=ctx, head_dim=width))
            shapes.append(DecodeShape(model, "verify", 1, heads, ctx // 2, capacity=ctx, q_len=9, head_dim=width))
    for batch in (1, 8) if not quick else (8,):
        for length in (512, 1024, 2048, LM_CONTEXT) if not quick else (LM_CONTEXT,):
            shapes.append(DecodeShape(LM_MODEL, "self", batch, LM_HEADS, length, capacity=LM_CONTEXT))
    if not quick:
        shapes.append(DecodeShape(LM_MODEL, "verify", 1, LM_HEADS, 2048, capacity=LM_CONTEXT, q_len=9))
    return shapes


def prefill_shapes(quick: bool) -> list[PrefillShape]:
    tiny, base = WHISPER["whisper-tiny"], WHISPER["whisper-base"]
    shapes = [PrefillShape("whisper-tiny encoder", 1, tiny.audio_heads, tiny.audio_ctx, tiny.audio_ctx, causal=False, head_dim=tiny.head_dim)]
    if not quick:
        shapes += [
            PrefillShape("whisper-base encoder", batch, base.audio_heads, base.audio_ctx, base.audio_ctx, causal=False, head_dim=base.head_dim)
            for batch in (1, 8)
        ]
        shapes += [
            PrefillShape(f"{LM_MODEL} prompt", 1, LM_HEADS, 2048, 2048, causal=True),
            PrefillShape(f"{LM_MODEL} prompt after cache", 4, LM_HEADS, 512, 2048, causal=True),
        ]
    return shapes


# -- timing ------------------------------------------------------------------------------------


def time_calls(calls: Sequence[Callable[[], object]], *, graph: bool, budget_ms: float = 150.0) -> float:
    """Median microseconds per call of ``calls`` run round-robin.

    Args:
      calls: closures over distinct buffers (so a round does not re-read data left in L2).
      graph: capture the rounds in one CUDA graph (kernel time) or launch them eagerly (kernel plus
        launch overhead, as an un-captured decode loop pays it).
      budget_ms: approximate GPU time per measurement.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (Triton compiles here) off the capture stream
        for _ in range(3):
            for call in calls:
                call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for call in calls:
        call()
    end.record()
    torch.cuda.synchronize()
    rounds = max(1, min(2000, int(budget_ms / max(start.elapsed_time(end), 1e-3))))

    def run_rounds() -> None:
        for _ in range(rounds):
            for call in calls:
                call()

    if graph:
        cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cuda_graph):
            run_rounds()
        run = cuda_graph.replay
    else:
        run = run_rounds
    samples = []
    for _ in range(5):
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / (rounds * len(calls)))
    return statistics.median(samples)


def copies_to_defeat_l2(bytes_per_call: int, alloc_bytes_per_copy: int) -> int:
    """How many buffer copies make a round read at least 3x the L2 cache (memory permitting)."""
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    wanted = math.ceil(3 * l2 / max(bytes_per_call, 1))
    affordable = max(1, (8 << 30) // max(alloc_bytes_per_copy, 1))
    return max(1, min(wanted, affordable, 64))


# -- device ------------------------------------------------------------------------------------


def peak_bandwidth_gbs() -> Optional[float]:
    """Theoretical DRAM bandwidth from the device properties (double data rate), in GB/s."""
    props = torch.cuda.get_device_properties(0)
    clock_khz = getattr(props, "memory_clock_rate", 0)
    bus_bits = getattr(props, "memory_bus_width", 0)
    if not clock_khz or not bus_bits:
        return None
    return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9


def copy_bandwidth_gbs() -> float:
    """Achieved device-to-device copy bandwidth (read + write) on 1 GiB, in GB/s."""
    src = torch.empty(1 << 29, dtype=torch.float16, device="cuda")
    dst = torch.empty_like(src)
    us = time_calls([lambda: dst.copy_(src)], graph=True, budget_ms=100)
    return 2 * src.numel() * 2 / (us * 1e-6) / 1e9


def machine_line(peak: Optional[float], copy: float) -> str:
    props = torch.cuda.get_device_properties(0)
    import triton

    peak_text = f"{peak:.0f} GB/s theoretical" if peak else "theoretical peak unknown"
    return (
        f"{props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
        f"{props.total_memory / 2**30:.0f} GiB, {peak_text}, {copy:.0f} GB/s measured copy); "
        f"torch {torch.__version__}, triton {triton.__version__}, CUDA {torch.version.cuda}, "
        f"Python {platform.python_version()}"
    )


# -- measurements ------------------------------------------------------------------------------


def decode_inputs(
    shape: DecodeShape, dtype: torch.dtype, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q, k, v)`` for one call of ``shape`` on the generator's device, laid out as burble's
    decoder has them: keys and values are views of a ``capacity``-long cache."""
    device = generator.device
    q = torch.randn(shape.batch, shape.heads, shape.q_len, shape.head_dim, device=device, dtype=dtype, generator=generator)
    cache = torch.randn(2, shape.kv_batch, shape.heads, shape.capacity, shape.head_dim, device=device, dtype=dtype, generator=generator)
    k, v = cache[0, :, :, : shape.cache_len], cache[1, :, :, : shape.cache_len]
    # Whisper's decoder expands the one audio's cross keys to the batch (stride 0): do the same.
    return q, k.expand(shape.batch, -1, -1, -1), v.expand(shape.batch, -1, -1, -1)


def bench_decode(shape: DecodeShape, dtype: torch.dtype, peak: Optional[float]) -> dict[str, str]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    alloc = 2 * shape.kv_batch * shape.heads * shape.capacity * shape.head_dim * 2
    copies = copies_to_defeat_l2(shape.kv_bytes, alloc)
    buffers = [decode_inputs(shape, dtype, gen) for _ in range(copies)]
    causal = shape.kind != "cross"

    row = {
        "model": shape.model,
        "call": f"{shape.kind} B={shape.batch} H={shape.heads} Tq={shape.q_len} L={shape.cache_len}",
        "KV MB": f"{shape.kv_bytes / 1e6:.2f}",
    }
    graph_us = {}
    for backend in BACKENDS:
        calls = [
            (lambda q=q, k=k, v=v, b=backend: attention(q, k, v, is_causal=causal, backend=b))
            for q, k, v in buffers
        ]
        graph_us[backend] = time_calls(calls, graph=True)
        row[f"{backend} eager us"] = f"{time_calls(calls, graph=False):.1f}"
    for backend in BACKENDS:
        gbs = shape.kv_bytes / (graph_us[backend] * 1e-6) / 1e9
        row[f"{backend} us"] = f"{graph_us[backend]:.1f}"
        row[f"{backend} GB/s"] = f"{gbs:.0f}" + (f" ({100 * gbs / peak:.0f}%)" if peak else "")
    row["speedup"] = f"{graph_us['torch'] / graph_us['triton']:.2f}x"
    return row


def bench_prefill(shape: PrefillShape, dtype: torch.dtype) -> dict[str, str]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(shape.batch, shape.heads, shape.q_len, shape.head_dim, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(shape.batch, shape.heads, shape.k_len, shape.head_dim, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn_like(k)
    row = {"model": shape.model, "call": f"B={shape.batch} H={shape.heads} Tq={shape.q_len} Tk={shape.k_len}"
           + (" causal" if shape.causal else "")}
    times = {}
    for backend in BACKENDS:
        times[backend] = time_calls(
            [lambda b=backend: attention(q, k, v, is_causal=shape.causal, backend=b)], graph=True
        )
        row[f"{backend} us"] = f"{times[backend]:.0f}"
        row[f"{backend} TFLOP/s"] = f"{shape.flops / (times[backend] * 1e-6) / 1e12:.1f}"
    row["speedup"] = f"{times['torch'] / times['triton']:.2f}x"
    return row


@torch.inference_mode()
def decoder_tokens_per_second(
    model: AutoregressiveModel, prompt: torch.Tensor, new_tokens: int, backend: str, repeats: int = 3
) -> float:
    """Tokens/s of a prompt pass plus ``new_tokens - 1`` greedy single-token steps, eagerly.

    Works with any :class:`~burble.decoding.model.AutoregressiveModel`; the attention backend is
    switched through the process default, which every attention call of burble's models uses.
    Every run generates exactly ``new_tokens`` per row (no end-of-text stop), so backends are
    compared on identical work. The first run is a warm-up (kernel compilation) and not counted.

    Args:
      model: the decoder (its cache holds ``prompt`` plus ``new_tokens`` positions).
      prompt: ``(B, T)`` token ids on the model's device.
      new_tokens: tokens generated per row.
      backend: ``"triton"`` or ``"torch"``.
      repeats: timed runs; the fastest counts.
    """
    previous = get_default_backend()
    set_default_backend(backend)  # type: ignore[arg-type]
    try:
        best = math.inf
        for run in range(repeats + 1):
            cache = model.new_cache(prompt.shape[0], prompt.shape[1] + new_tokens)
            _synchronize(prompt.device)
            started = time.perf_counter()
            token = model.forward(prompt, cache)[:, -1].argmax(-1, keepdim=True)
            for _ in range(new_tokens - 1):
                token = model.forward(token, cache)[:, -1].argmax(-1, keepdim=True)
            _synchronize(prompt.device)
            if run:
                best = min(best, time.perf_counter() - started)
        return prompt.shape[0] * new_tokens / best
    finally:
        set_default_backend(previous)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_whisper(
    name: str, dtype: torch.dtype, batches: Sequence[int], new_tokens: int, device: str = "cuda"
) -> list[dict[str, str]]:
    """Decoder tokens/s of a real Whisper checkpoint on real speech (examples/jfk.wav)."""
    import burble
    from burble.asr.frontend import log_mel_spectrogram, pad_or_trim
    from burble.audio.io import load_audio
    from burble.asr.options import TranscribeOptions
    from burble.asr.whisper.model import WhisperTextModel

    asr = burble.load_model(name, device=device)
    asr.model.to(dtype)
    mel = pad_or_trim(log_mel_spectrogram(load_audio(ROOT / "examples" / "jfk.wav"), n_mels=asr.model.dims.n_mels))
    features = asr.encode(mel)
    decoder = WhisperTextModel(asr.model, features)
    prompt = asr.build_prompt([], TranscribeOptions())
    rows = []
    for batch in batches:
        tokens = torch.tensor([prompt] * batch, device=device)
        rates = {b: decoder_tokens_per_second(decoder, tokens, new_tokens, b) for b in BACKENDS}
        rows.append({
            "model": f"{name} ({str(dtype).removeprefix('torch.')})",
            "run": f"B={batch}, {len(prompt)}-token prompt + {new_tokens} steps",
            **{f"{b} tok/s": f"{rates[b]:.0f}" for b in BACKENDS},
            "speedup": f"{rates['triton'] / rates['torch']:.2f}x",
        })
    return rows


# -- output ------------------------------------------------------------------------------------


def markdown_table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "(no rows)\n"
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row.get(c, "") for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md", help="Markdown file to append to")
    parser.add_argument("--no-write", action="store_true", help="print the tables only")
    parser.add_argument("--quick", action="store_true", help="a few rows only (smoke run)")
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    parser.add_argument("--whisper", default="tiny.en,base", help="checkpoints for the end-to-end rows ('' = none)")
    parser.add_argument("--new-tokens", type=int, default=200, help="greedy steps per end-to-end run")
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        print("benchmarks/kernels.py needs a CUDA GPU: none is visible, so nothing was measured or written.")
        return 0

    dtype = getattr(torch, args.dtype)
    peak = peak_bandwidth_gbs()
    copy = copy_bandwidth_gbs()
    machine = machine_line(peak, copy)
    print(machine, flush=True)

    sections = []
    decode_rows = []
    for shape in decode_shapes(args.quick):
        decode_rows.append(bench_decode(shape, dtype, peak))
        print(decode_rows[-1], flush=True)
    sections.append(("Decode attention (KV bytes / kernel time in CUDA graphs; % of theoretical peak)", decode_rows))

    prefill_rows = []
    for shape in prefill_shapes(args.quick):
        prefill_rows.append(bench_prefill(shape, dtype))
        print(prefill_rows[-1], flush=True)
    sections.append(("Prefill attention (CUDA graphs)", prefill_rows))

    e2e_rows: list[dict[str, str]] = []
    for name in [n for n in args.whisper.split(",") if n]:
        try:
            e2e_rows += bench_whisper(name, dtype, (1,) if args.quick else (1, 5), args.new_tokens)
        except Exception as error:  # a missing optional checkpoint should not lose the other rows
            e2e_rows.append({"model": name, "run": f"not run: {type(error).__name__}: {error}"})
        print(e2e_rows[-1], flush=True)
    if e2e_rows:
        sections.append(("Whisper decoder end to end (eager, greedy, examples/jfk.wav)", e2e_rows))

    command = "python benchmarks/kernels.py" + ("" if argv is None else " " + " ".join(argv))
    if argv is None:
        command = "python " + " ".join(sys.argv)
    report = [
        f"## Attention kernels: Triton vs SDPA ({args.dtype})\n",
        f"- command: `{command}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {machine}\n",
    ]
    for title, rows in sections:
        report += [f"### {title}\n", markdown_table(rows)]
    text = "\n".join(report)
    print("\n" + text)
    if not args.no_write:
        existed = args.output.exists()
        with args.output.open("a") as handle:
            handle.write(("" if existed else "# Benchmarks\n") + "\n" + text)
        print(f"appended to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
