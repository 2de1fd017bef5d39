#!/usr/bin/env python3
"""Stage 1 of lm_fusion: a Kneser-Ney n-gram LM on a domain text corpus (burble.asr.fusion.build_lm).

Usage: build_lm.py CORPUS OUT.arpa [--order 3] [--text-column N] [--exclude MANIFEST]

``--exclude`` drops corpus lines equal (after normalisation) to a reference of the evaluation
manifest, so the LM never saw the exact sentences it is asked to help recognise.
"""

import argparse
import sys

from burble.asr.fusion.lm import build_lm, read_corpus
from burble.asr.fusion.normalize import LMTextNormalizer
from burble.batch.inputs import read_manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus")
    parser.add_argument("output")
    parser.add_argument("--order", type=int, default=3)
    parser.add_argument("--text-column", type=int, default=None, help="tab-separated column holding the text")
    parser.add_argument("--exclude", default=None, help="a manifest whose references must not be in the LM corpus")
    parser.add_argument("--backend", default="auto", choices=("auto", "kenlm", "kaldingram"))
    args = parser.parse_args()
    normalize = LMTextNormalizer()
    lines = list(read_corpus(args.corpus, text_column=args.text_column))
    if args.exclude:
        held = {" ".join(normalize(it.text)) for it in read_manifest(args.exclude) if it.text}
        before = len(lines)
        lines = [line for line in lines if " ".join(normalize(line)) not in held]
        print(f"excluded {before - len(lines)} corpus line(s) equal to an evaluation reference", file=sys.stderr)
    path = build_lm(lines, args.output, args.order, normalizer=normalize, backend=args.backend)
    print(f"{path}: {args.order}-gram LM on {len(lines)} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
