#!/usr/bin/env python3
"""Stage 0 of the eval recipes: validate a manifest and write it with absolute audio paths.

Usage: prepare_manifest.py SRC.jsonl DST.jsonl [--limit N] [--require-text] [--ids REGEX]

Accepts burble manifests ({"audio", "text", "id"}) and lhotse recordings/cuts; writes burble's
format (id, absolute audio path, text, and start/duration for cuts) so later stages do not depend
on the source folder. Prints the item count and total duration.
"""

import argparse
import json
import re
import sys
from pathlib import Path

from burble.batch.inputs import InputError, read_manifest
from burble.batch.job import audio_duration


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--limit", type=int, default=0, help="keep the first N items (0 = all)")
    parser.add_argument("--require-text", action="store_true", help="drop items without a reference")
    parser.add_argument("--ids", default=None, help="keep items whose id matches this regular expression")
    args = parser.parse_args()
    try:
        items = read_manifest(args.src)
    except InputError as error:
        print(f"prepare_manifest: {error}", file=sys.stderr)
        return 2
    if args.ids:
        pattern = re.compile(args.ids)
        items = [it for it in items if pattern.search(it.id)]
    if args.require_text:
        items = [it for it in items if it.text is not None]
    if args.limit:
        items = items[: args.limit]
    if not items:
        print("prepare_manifest: no items left after filtering", file=sys.stderr)
        return 2
    missing = [it.audio for it in items if not Path(it.audio).is_file()]
    if missing:
        print(f"prepare_manifest: {len(missing)} audio file(s) missing, e.g. {missing[0]}", file=sys.stderr)
        return 2
    dst = Path(args.dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "w", encoding="utf-8") as f:
        for it in items:
            row = {"id": it.id, "audio": str(Path(it.audio).resolve()), "text": it.text}
            if it.start or it.duration is not None:
                row.update(start=it.start, duration=it.duration)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    seconds = sum(audio_duration(it) for it in items)
    print(f"{dst}: {len(items)} items, {seconds / 60:.1f} min of audio, {sum(it.text is not None for it in items)} with references")
    return 0


if __name__ == "__main__":
    sys.exit(main())
