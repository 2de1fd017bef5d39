#!/usr/bin/env python
"""The codec (or several, side by side) against the original audio and the vocoder's
copy-synthesis (its ceiling), one run.

Rows: the original; copy-synthesis of the original's log-mel through each vocoder compared
(``--vocoders``: the codec's own first); each codec at 1/2/4/8 books (whole-file encode and decode,
its own vocoder); the codec at its default books through each other vocoder; and the default
books streamed (``stream_encoder`` in 20 ms pieces, ``stream_decoder`` ``--stream-frames`` code
frames at a time, the exact streaming vocoder) through each vocoder. Columns: bitrate, PESQ-wb and STOI
against the original (both at 16 kHz), mel distance (mean |log-mel difference| in nats, 22.05 kHz),
WER of burble tiny.en and base (greedy) on the reconstruction, codebook usage (distinct codes per
book, and the code entropy as a fraction of 10 bits), encode and decode RTF (decode includes the
vocoder), and latency (algorithmic, including the wait for a step's frames; measured adds the p95
compute time of one streaming step, which is only the steady state when the streamed RTF is below 1).

Two sets: held-out Piper sentences (the recipe's held-out shard, then its ``test_*`` shards when
``--clips`` asks for more than 40: sentences never trained on, the training voice) and the real dev
speech (``../shared/dev-audio`` short recordings: other voices,
rooms and microphones; how far the codec generalises beyond its training voice).

Usage::

    python benchmarks/codec.py                 # the default codec, appended to BENCHMARKS.md
    python benchmarks/codec.py --codec mel-43hz,mel-21hz --vocoders low-latency --clips 20
    python benchmarks/codec.py --quick         # 4 clips per set, tiny.en only, print only
    python benchmarks/codec.py --clips 240 --dev-clips 20 --books 2 --no-streamed   # WER at the default, 240 clips
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import append_section, machine_description, markdown_table  # noqa: E402


def heldout_piper(data_dir: Path, limit: int) -> list[tuple[str, str, np.ndarray]]:
    from safetensors import safe_open
    import json

    clips = []
    paths = sorted(data_dir.glob("heldout_*.safetensors")) + sorted(data_dir.glob("test_*.safetensors"))
    for path in paths:
        with safe_open(str(path), "pt") as f:
            meta = json.loads(f.metadata()["clips"])
            for i, item in enumerate(meta):
                audio = f.get_tensor(f"{i}.audio").float().numpy() / 32767.0
                clips.append((item["id"], item["text"], audio))
    if not clips:
        raise SystemExit(f"no held-out clips in {data_dir}: run recipes/codec/run.sh --stop-stage 0 first")
    return clips[:limit]


def dev_speech(limit: int) -> list[tuple[str, str, np.ndarray]]:
    from burble.codecs.mel import SAMPLE_RATE
    from burble.testing.dev_audio import dev_audio_items

    return [(item.id, item.text, item.load(SAMPLE_RATE)) for item in dev_audio_items("short")][:limit]


def code_entropy(codes: list[np.ndarray], books: int, size: int) -> tuple[float, float]:
    """Mean over books of (distinct codes / size, entropy / log2(size))."""
    usage, entropy = [], []
    for b in range(books):
        counts = np.bincount(np.concatenate([c[b] for c in codes]), minlength=size).astype(np.float64)
        p = counts[counts > 0] / counts.sum()
        usage.append((counts > 0).mean())
        entropy.append(float(-(p * np.log2(p)).sum()) / math.log2(size))
    return float(np.mean(usage)), float(np.mean(entropy))


def stream(codec, audio: np.ndarray, books: int, piece: int, frames: int) -> tuple[np.ndarray, list[float]]:
    """Stream-encode ``audio`` in ``piece``-sample pieces and stream-decode the code frames ``frames``
    at a time as they come; also the compute time of each decoding step (the piece's encoding included)."""
    encoder = codec.stream_encoder(codec.sample_rate, books)
    decoder = codec.stream_decoder()
    out, steps = [], []
    waiting = np.zeros((books, 0), dtype=np.int64)
    for start in range(0, audio.size, piece):
        t0 = time.perf_counter()
        waiting = np.concatenate([waiting, encoder.push(audio[start:start + piece])], axis=1)
        groups = waiting.shape[1] // frames
        for j in range(groups):
            out.append(decoder.push(waiting[:, j * frames:(j + 1) * frames]))
        waiting = waiting[:, groups * frames:]
        if groups:
            steps.append((time.perf_counter() - t0) / groups)
    codes = np.concatenate([waiting, encoder.flush()], axis=1)
    out += [decoder.push(codes), decoder.flush()]
    return np.concatenate(out), steps


def _frames_per_step(how: str) -> int:
    """N of a ``"streamed N"`` row; 0 for a row that is not streamed."""
    return int(how.split()[1]) if how.startswith("streamed") else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--codec", default=None,
                        help="the codec, or several side by side (comma-separated; default: burble's default codec)")
    parser.add_argument("--vocoders", default="low-latency,universal",
                        help="vocoders compared (burble.codecs.vocoder.available_vocoders()); the first is the codec's")
    parser.add_argument("--data-dir", type=Path, default=Path.home() / ".cache" / "burble" / "codec" / "data")
    parser.add_argument("--clips", type=int, default=10, help="clips per set")
    parser.add_argument("--dev-clips", type=int, default=None, help="clips of real dev speech (default: --clips)")
    parser.add_argument("--books", default="1,2,4,8", help="book counts with a row each")
    parser.add_argument("--no-streamed", action="store_true", help="leave out the streamed rows")
    parser.add_argument("--stream-frames", default="1,2",
                        help="code frames decoded per streaming step, a streamed row each (more: less per-call cost, more latency)")
    parser.add_argument("--judges", default="tiny.en,base", help="Whisper models that score the reconstructions")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 clips per set, tiny.en only, print only")
    args = parser.parse_args(argv)

    import torch
    from pesq import pesq
    from pystoi import stoi

    import burble
    from burble.audio.resample import resample
    from burble.codecs import DEFAULT_CODEC, load
    from burble.codecs.mel import SAMPLE_RATE, log_mel
    from burble.codecs.vocoder import vocode
    from burble.metrics.wer import corpus_word_errors

    torch.set_num_threads(args.threads)
    machine = machine_description()
    clips = 4 if args.quick else args.clips
    judges = ["tiny.en"] if args.quick else args.judges.split(",")
    vocoders = args.vocoders.split(",")
    names = (args.codec or DEFAULT_CODEC).split(",")
    codecs = {(c, v): load(c, vocoder=v) for c in names for v in vocoders}
    asr = {name: burble.load_model(name) for name in judges}
    dev_clips = clips if args.quick or args.dev_clips is None else args.dev_clips
    sets = {"held-out Piper": heldout_piper(args.data_dir, clips), "dev speech (real)": dev_speech(dev_clips)}
    book_rows = [int(b) for b in args.books.split(",")]
    # every row: (codec name, books, vocoder, how): "copy" (no codec), "whole" or "streamed N" (N frames a step)
    stream_frames = [int(n) for n in args.stream_frames.split(",")]
    rows_of: dict[str, tuple] = {"original": (None, None, None, "original")}
    rows_of.update({f"copy-synthesis ({v})": (names[0], None, v, "copy") for v in vocoders})
    for c in names:
        label = "codec" if len(names) == 1 else c
        config, default = codecs[c, vocoders[0]].config, codecs[c, vocoders[0]].default_books
        rows_of.update({f"{label} {b} books": (c, b, vocoders[0], "whole") for b in book_rows if b <= config.num_books})
        rows_of.update({f"{label} {default} books ({v})": (c, default, v, "whole") for v in vocoders[1:]})
        if not args.no_streamed:
            rows_of.update({f"{label} {default} books, streamed {n} frame{'s' if n > 1 else ''}/step ({v})":
                            (c, default, v, f"streamed {n}") for v in vocoders for n in stream_frames})
    systems = list(rows_of)
    # a streamed step of N frames waits for N - 1 more frames than the codec's own latency
    latency_ms = {s: 1000 * (codecs[c, v].algorithmic_latency() + max(0, _frames_per_step(how) - 1) * codecs[c, v].samples_per_frame)
                  / SAMPLE_RATE for s, (c, b, v, how) in rows_of.items() if b is not None}
    # clips are cut to whole code frames of every codec compared
    frame = max(codecs[c, vocoders[0]].samples_per_frame for c in names)

    sections = []
    for set_name, items in sets.items():
        acc = {s: {"pesq": [], "stoi": [], "mel": [], "enc": 0.0, "dec": 0.0, "codes": [], "steps": [],
                   "hyp": {j: [] for j in judges}} for s in systems}
        seconds = 0.0
        for n, (clip_id, text, audio) in enumerate(items):
            audio = audio[: audio.size // frame * frame]
            seconds += audio.size / SAMPLE_RATE
            ref16 = resample(audio, SAMPLE_RATE, 16000)
            ref_mel = log_mel(audio)
            outputs: dict[str, np.ndarray] = {"original": audio}
            for name, (c, books, v, how) in rows_of.items():
                codec, a = codecs.get((c, v)), acc[name]
                t0 = time.perf_counter()
                if how == "copy":
                    outputs[name] = vocode(codec.vocoder, ref_mel).numpy()
                elif how == "whole":
                    codes = codec.encode(audio, SAMPLE_RATE, books=books)
                    t1 = time.perf_counter()
                    outputs[name] = codec.decode(codes)
                    a["enc"] += t1 - t0
                    a["codes"].append(codes)
                    t0 = t1
                elif how.startswith("streamed"):
                    outputs[name], steps = stream(codec, audio, books, piece=441, frames=_frames_per_step(how))
                    a["steps"] += steps  # the dec column: encode + decode, streamed
                if how != "original":
                    a["dec"] += time.perf_counter() - t0
            for system, out in outputs.items():
                out = out[: audio.size]
                out16 = resample(out, SAMPLE_RATE, 16000)
                k = min(ref16.size, out16.size)
                a = acc[system]
                try:
                    a["pesq"].append(pesq(16000, ref16[:k], out16[:k], "wb"))
                except Exception:  # noqa: BLE001 - PESQ refuses clips without speech; skip them
                    pass
                a["stoi"].append(stoi(ref16[:k], out16[:k], 16000, extended=False))
                a["mel"].append(float((log_mel(out) - ref_mel[:, : out.size // 256]).abs().mean()))
                for judge, model in asr.items():
                    a["hyp"][judge].append((text, model.transcribe(out16, beam_size=1, temperatures=(0.0,),
                                                                   condition_on_previous_text=False).text))
            print(f"[{set_name}] {n + 1}/{len(items)} {clip_id}", file=sys.stderr, flush=True)
        rows = []
        for system in systems:
            a = acc[system]
            c, books, v, how = rows_of[system]
            config = codecs[c, v].config if c else None
            usage = code_entropy(a["codes"], books, config.codebook_size) if a["codes"] else None
            # the error count beside each WER, so a borderline comparison needs no second run
            counts = [corpus_word_errors(a["hyp"][j]) for j in judges]
            wers = [f"{100 * e.rate:.1f}% ({e.errors})" for e in counts]
            p95 = 1000 * float(np.percentile(a["steps"], 95)) if a["steps"] else None
            rows.append([
                system,
                "-" if books is None else f"{config.bitrate(books):.0f}",
                f"{np.mean(a['pesq']):.2f}" if a["pesq"] else "-",
                f"{np.mean(a['stoi']):.3f}",
                f"{np.mean(a['mel']):.3f}",
                *wers,
                "-" if usage is None else f"{100 * usage[0]:.0f}% / {usage[1]:.2f}",
                f"{a['enc'] / seconds:.3f}" if a["enc"] else "-",
                f"{a['dec'] / seconds:.3f}" if a["dec"] else "-",
                "-" if books is None else f"{latency_ms[system]:.0f}" + (f" / {latency_ms[system] + p95:.0f}" if p95 else ""),
            ])
        header = ["system", "bit/s", "PESQ-wb", "STOI", "mel dist", *[f"WER {j}" for j in judges],
                  "codes used / entropy", "encode RTF", "decode RTF", "latency ms (alg / measured)"]
        words = corpus_word_errors(acc["original"]["hyp"][judges[0]]).ref_len
        sections.append(f"**{set_name}**: {len(items)} clips, {seconds:.0f} s, {words} reference words "
                        f"(WER columns: rate and error count)\n\n" + markdown_table(header, rows))
    reach = ", ".join(f"{v} {codecs[names[0], v].vocoder.right_reach()}" for v in vocoders)
    described = "; ".join(
        f"`{c}`: {codecs[c, vocoders[0]].config.frame_rate:.2f} Hz code frames, {codecs[c, vocoders[0]].config.num_books} "
        f"books of {codecs[c, vocoders[0]].config.codebook_size}, default {codecs[c, vocoders[0]].default_books} books"
        for c in names)
    body = (f"Codec{'s' if len(names) > 1 else ''} {described}; vocoders: {', '.join(vocoders)} (HiFi-GAN V1; "
            f"right reach in samples: {reach}); rows without a vocoder named use {vocoders[0]}. "
            f"PESQ/STOI/mel distance are against the original; decode RTF includes the vocoder; the streamed rows' "
            f"RTF is encode + decode, 20 ms of audio in and N code frames decoded per step, through the exact "
            f"streaming vocoder (layer by layer: the whole-file audio, held back by the vocoder's right reach).\n\n"
            + "\n\n".join(sections))
    append_section("Codec: reconstruction quality, ASR WER, speed", body, machine=machine, write=not args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
