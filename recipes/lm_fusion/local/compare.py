#!/usr/bin/env python3
"""Last stage of lm_fusion: one markdown table comparing the systems' reports (scores.json).

Usage: compare.py OUT.md NAME=EXP_DIR [NAME=EXP_DIR ...]
"""

import json
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    rows = ["| system | WER | CER | sub | del | ins | ref words | RTF |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for spec in sys.argv[2:]:
        name, _, exp_dir = spec.partition("=")
        scores = json.loads((Path(exp_dir) / "report" / "scores.json").read_text())
        rtf = scores.get("rtf")
        rows.append(
            f"| {name} | {100 * scores['wer']:.2f}% | {100 * scores['cer']:.2f}% | {scores['substitutions']} | "
            f"{scores['deletions']} | {scores['insertions']} | {scores['reference_words']} | "
            f"{'n/a' if rtf is None else f'{rtf:.3f}'} |"
        )
    out.write_text("\n".join(rows) + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
