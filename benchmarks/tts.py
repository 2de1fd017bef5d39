#!/usr/bin/env python
"""TTS benchmark: intelligibility, speed, latency and robustness of ``burble speak``'s voice.

On the held-out sentences of ``benchmarks/data/tts_test.json`` (LJ Speech lines and everyday
sentences, never trained on), one run, side by side:

* **Piper** (``en_US-joe-medium``, the voice the codec LM learned from; noise 0): the reference;
* **copy-synthesis**: Piper's audio through the codec at the LM's book count, the ceiling of
  any LM over these codes;
* **burble TTS**: the codec LM sampled by the shared decoding core (``--temperature``), one seed
  per sentence, each frame decoded from its expected code vector (the default);
* **burble TTS, token codes** (``--no-token-codes-row`` drops it): the same sampling, the codes
  themselves decoded (``SynthesisOptions(expected_codes=False)``), for the side-by-side effect;
* **burble TTS, speculative** (when the voice ships draft heads): the same sampling with MTP
  drafts, the same seeds, on the first ``--speculative-sentences`` sentences, beside plain
  sampling of the same sentences (decoder speedup, acceptance).

Columns: ASR WER with burble tiny.en (the judge) and base (a second opinion), greedy; duration
ratio vs Piper; failure rate (a sentence whose generation ran away, see
``burble.tts.synthesizer``); RTF of synthesis (codec LM + codec + vocoder, 2 threads); first
audio latency of ``Synthesizer.stream`` (time to the first chunk) on ``--latency-sentences``
sentences.

Usage::

    python benchmarks/tts.py                 # full run, appended to BENCHMARKS.md
    python benchmarks/tts.py --quick         # 6 sentences per set, tiny.en only, print only
    python benchmarks/tts.py --speculative-only   # plain vs MTP sampling only (30 sentences per set)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, append_section, machine_description, markdown_table  # noqa: E402

TEST_SET = ROOT / "benchmarks" / "data" / "tts_test.json"


def test_sentences(lj: int, everyday: int) -> dict[str, list[tuple[str, str]]]:
    items = json.loads(TEST_SET.read_text())["items"]
    return {"LJ held-out": [(i["id"], i["text"]) for i in items if i["kind"] == "lj"][:lj],
            "everyday": [(i["id"], i["text"]) for i in items if i["kind"] == "everyday"][:everyday]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--voice", default="joe")
    parser.add_argument("--lj", type=int, default=100, help="LJ held-out sentences")
    parser.add_argument("--everyday", type=int, default=55, help="everyday sentences")
    parser.add_argument("--judges", default="tiny.en,base")
    parser.add_argument("--temperature", type=float, default=None, help="default: the voice's (SynthesisOptions)")
    parser.add_argument("--latency-sentences", type=int, default=15)
    parser.add_argument("--speculative-sentences", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocoder-dtype", default="auto",
                        help="the vocoder's precision: auto (bfloat16 where the CPU has it natively), float32, bfloat16")
    parser.add_argument("--no-token-codes-row", dest="token_codes_row", action="store_false",
                        help="leave out the row that decodes the sampled codes themselves")
    parser.add_argument("--quick", action="store_true", help="6 sentences per set, tiny.en only, print only")
    parser.add_argument("--speculative-only", action="store_true",
                        help="only the speculative comparison (plain vs MTP on the first --speculative-sentences "
                             "sentences of each set), judged by the first judge")
    args = parser.parse_args(argv)

    import torch

    import burble
    import burble.tts
    from burble.audio.resample import resample
    from burble.metrics.wer import corpus_word_errors
    from burble.precision import dtype_name
    from burble.testing.synthetic import piper_speech

    if args.temperature is None:
        args.temperature = burble.tts.SynthesisOptions().temperature

    torch.set_num_threads(args.threads)
    machine = machine_description()
    if args.quick:
        args.lj = args.everyday = 6
        args.judges, args.latency_sentences, args.speculative_sentences = "tiny.en", 3, 3
    judges = args.judges.split(",")
    if args.speculative_only:
        judges = judges[:1]
        args.lj, args.everyday = min(args.lj, args.speculative_sentences), min(args.everyday, args.speculative_sentences)
    asr = {name: burble.load_model(name) for name in judges}
    voice = burble.tts.load(args.voice, vocoder_dtype=args.vocoder_dtype)
    vocoder_dtype = dtype_name(next(voice.codec.vocoder.parameters()).dtype)
    codec, books = voice.codec, voice.model.config.num_books
    plain = burble.tts.SynthesisOptions(temperature=args.temperature)
    speculative = voice.heads is not None

    def transcribe(audio: np.ndarray) -> dict[str, str]:
        audio16 = resample(audio, voice.sample_rate, 16000)
        return {j: m.transcribe(audio16, beam_size=1, temperatures=(0.0,), condition_on_previous_text=False).text
                for j, m in asr.items()}

    def speculative_pair(text: str, n: int, spec: dict, spec_hyp: dict, spec_stats):
        """Plain and MTP sampling of one sentence with the same seed; returns the merged MTP stats."""
        for mode in ("off", "mtp"):
            r = voice.synthesize(text, burble.tts.SynthesisOptions(temperature=args.temperature, seed=1000 + n,
                                                                   speculative=mode))
            spec[mode][0] += r.stats.decoder_seconds
            spec[mode][1] += r.stats.target_passes
            spec[mode][2] += r.stats.generated
            spec[mode][3] += r.seconds
            spec_hyp[mode].append((text, transcribe(r.audio)[judges[0]]))
            if mode == "mtp":
                if spec_stats is None:
                    spec_stats = r.stats
                else:
                    spec_stats.merge(r.stats)
        return spec_stats

    sections = []
    spec_rows = []
    for set_name, sentences in test_sentences(args.lj, args.everyday).items():
        systems = ["Piper (reference)", f"copy-synthesis ({books} books)", f"burble TTS (T={args.temperature})"]
        if args.token_codes_row:
            systems.append(f"burble TTS (T={args.temperature}), token codes")
        acc = {s: {"hyp": {j: [] for j in judges}, "seconds": 0.0, "wall": 0.0, "ratio": [], "failed": 0} for s in systems}
        first_audio: list[float] = []
        stream_wall = [0.0, 0.0]  # wall seconds, audio seconds of the streamed sentences
        spec = {"off": [0.0, 0, 0, 0.0], "mtp": [0.0, 0, 0, 0.0]}  # decoder seconds, passes, tokens, synthesis seconds
        spec_hyp: dict[str, list[tuple[str, str]]] = {"off": [], "mtp": []}  # the first judge's transcripts
        spec_stats = None
        for n, (item_id, text) in enumerate(sentences):
            if args.speculative_only:
                spec_stats = speculative_pair(text, n, spec, spec_hyp, spec_stats)
                print(f"[{set_name}] {n + 1}/{len(sentences)} {item_id}", file=sys.stderr, flush=True)
                continue
            reference = piper_speech(text, sample_rate=voice.sample_rate)
            t0 = time.perf_counter()
            copy = codec.decode(codec.encode(reference, voice.sample_rate, books))[: reference.size]
            copy_wall = time.perf_counter() - t0
            options = burble.tts.SynthesisOptions(temperature=args.temperature, seed=1000 + n)
            result = voice.synthesize(text, options)
            outputs = {systems[0]: (reference, 0.0), systems[1]: (copy, copy_wall), systems[2]: (result.audio, result.seconds)}
            if args.token_codes_row:
                tokens = voice.synthesize(text, dataclasses.replace(options, expected_codes=False))
                outputs[systems[3]] = (tokens.audio, tokens.seconds)
                acc[systems[3]]["failed"] += sum(s.failed for s in tokens.sentences)
            for system, (audio, wall) in outputs.items():
                a = acc[system]
                seconds = audio.size / voice.sample_rate
                a["seconds"] += seconds
                a["wall"] += wall
                a["ratio"].append(seconds / (reference.size / voice.sample_rate))
                for j, hyp in transcribe(audio).items():
                    a["hyp"][j].append((text, hyp))
            acc[systems[2]]["failed"] += sum(s.failed for s in result.sentences)
            if n < args.latency_sentences:
                t0 = time.perf_counter()
                stream = voice.stream(text, options)
                samples = next(stream).size
                first_audio.append(time.perf_counter() - t0)
                samples += sum(chunk.size for chunk in stream)
                stream_wall[0] += time.perf_counter() - t0
                stream_wall[1] += samples / voice.sample_rate
            if speculative and n < args.speculative_sentences:
                spec_stats = speculative_pair(text, n, spec, spec_hyp, spec_stats)
            print(f"[{set_name}] {n + 1}/{len(sentences)} {item_id}", file=sys.stderr, flush=True)
        if speculative and spec_stats is not None and spec["mtp"][1]:
            rate = spec_stats.acceptance_rate_at
            spec_rows.append([set_name, min(args.speculative_sentences, len(sentences)),
                              f"{spec['off'][1] / max(spec['off'][2], 1):.2f}", f"{spec['mtp'][1] / max(spec['mtp'][2], 1):.2f}",
                              f"{spec_stats.mean_acceptance_length:.2f}", " / ".join(f"{r:.2f}" for r in rate),
                              f"{spec['off'][0] / spec['mtp'][0]:.2f}x", f"{spec['off'][3] / spec['mtp'][3]:.2f}x",
                              " / ".join(f"{100 * corpus_word_errors(spec_hyp[m]).rate:.1f}%" for m in ("off", "mtp"))])
        if args.speculative_only:
            continue
        rows = []
        for system in systems:
            a = acc[system]
            wers = [f"{100 * corpus_word_errors(a['hyp'][j]).rate:.1f}%" for j in judges]
            is_tts = system.startswith("burble")
            streamed = system == systems[2]  # stream() runs with the default options only
            rows.append([system, *wers, f"{statistics.mean(a['ratio']):.2f}",
                         f"{100 * a['failed'] / len(sentences):.1f}%" if is_tts else "-",
                         f"{a['wall'] / a['seconds']:.2f}" if a["wall"] else "-",
                         f"{stream_wall[0] / stream_wall[1]:.2f}" if streamed and stream_wall[1] else "-",
                         f"{1000 * statistics.median(first_audio):.0f} / {1000 * max(first_audio):.0f}" if streamed and first_audio else "-"])
        header = ["system", *[f"WER {j}" for j in judges], "duration / Piper", "failed", "RTF", "streamed RTF",
                  "first audio ms (median / max)"]
        seconds = acc[systems[0]]["seconds"]
        sections.append(f"**{set_name}**: {len(sentences)} sentences, {seconds:.0f} s of Piper speech\n\n"
                        + markdown_table(header, rows))
    spec_body = "" if speculative else "Speculative sampling: the voice ships no draft heads, so no speculative row."
    if spec_rows:
        spec_body = ("**Speculative sampling** (MTP draft heads, exact: the verifier keeps the target's distribution); "
                     "passes per token with and without drafts on the same sentences and seeds:\n\n"
                     + markdown_table(["set", "sentences", "passes/token plain", "passes/token mtp", "mean accepted length",
                                       "acceptance by position", "decoder speedup", "synthesis speedup",
                                       f"WER {judges[0]} plain / mtp"], spec_rows)
                     + "\n\nDecoder speedup: wall time of the codec LM's generation (drafting included), plain / mtp; "
                     "synthesis speedup: the whole `synthesize` (codec and vocoder included). "
                     + ("At temperature 0 both decode the same greedy tokens, so the two WER columns are equal."
                        if args.temperature == 0 else
                        "The two columns of WER sample the same distribution with different random draws."))
    if args.speculative_only:
        title = "TTS: speculative sampling with MTP draft heads"
        body = (f"Voice `{args.voice}`, temperature {args.temperature}, {args.threads} torch threads (the codec LM "
                "samples on one, as in `stream()`; the codec and vocoder use them all), "
                f"draft length {burble.tts.SynthesisOptions().draft_length}; `--speculative-only`: plain and MTP "
                "sampling of the same sentences with the same seeds, nothing else.\n\n" + spec_body)
    else:
        title = "TTS: codec-LM speech, intelligibility and speed"
        body = (f"Voice `{args.voice}`: codec LM {sum(p.numel() for p in voice.model.parameters()) / 1e6:.1f} M parameters, "
                f"{books} codec books ({codec.name}), temperature {args.temperature}, one seed per sentence, default options "
                f"(speculative `auto`: {'MTP draft heads, ' + str(burble.tts.SynthesisOptions().draft_length) + ' drafted tokens per pass' if speculative else 'off, no heads'}). Piper: "
                "`en_US-joe-medium`, noise 0 (the voice the LM learned from). WER: greedy burble Whisper on the 16 kHz "
                "resampled audio against the sentence text (normalised). RTF: wall time of `synthesize` (codec LM, codec "
                f"decoder and HiFi-GAN vocoder, the vocoder in {vocoder_dtype} (`--vocoder-dtype {args.vocoder_dtype}`)) "
                "per second of audio; copy-synthesis: codec encode + decode. burble TTS decodes each frame from its "
                "expected code vector under the LM's distribution (`expected_codes`, the default); the token-codes row "
                "decodes the sampled codes themselves (at T=0 the same tokens). First audio: "
                "`stream()` until its first chunk; streamed RTF: the whole `stream()` of the same sentences (codec LM, "
                "streaming codec decoder, exact streaming vocoder in chunks of 8 frames).\n\n" + "\n\n".join(sections)
                + ("\n\n" + spec_body if spec_body else ""))
    append_section(title, body, machine=machine, write=not args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
