"""``burble score MANIFEST HYP_DIR -o REPORT_DIR``: WER/CER report of a transcription job."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "score",
        help="score transcripts against a manifest's references (WER/CER report with plots)",
        description=(
            "Score the outputs of `burble transcribe` (HYP_DIR/<id>.json or .txt) against the 'text' of each "
            "manifest item, with Whisper's English normaliser on both sides. Writes report.md, per_utterance.tsv, "
            "scores.json and PNG plots to --report-dir."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("manifest", help="JSONL manifest with 'text' references")
    parser.add_argument("hyp_dir", help="the --output-dir of burble transcribe")
    parser.add_argument("--report-dir", "-o", required=True, help="where the report goes")
    parser.add_argument("--records", default=None, help="the --records-file of the run (per-item latency)")
    parser.add_argument("--summary", default=None, help="the --summary-file of the run (RTF, audio hours)")
    parser.add_argument("--title", default="Evaluation report")
    parser.add_argument("--worst", type=int, default=10, help="how many worst utterances to show with diffs")


def run(args: argparse.Namespace) -> int:
    from burble.batch.inputs import InputError, read_manifest
    from burble.batch.job import read_records
    from burble.batch.report import write_report
    from burble.batch.scoring import score_items

    try:
        items = read_manifest(args.manifest)
        records = read_records(args.records) if args.records else []
        summary = json.loads(open(args.summary, encoding="utf-8").read()) if args.summary else None
        corpus = score_items(items, args.hyp_dir, records)
    except (InputError, OSError, ValueError) as error:
        print(f"burble score: error: {error}", file=sys.stderr)
        return 2
    report = write_report(corpus, args.report_dir, summary=summary, title=args.title, worst=args.worst)
    words = corpus.words
    print(f"WER {100 * words.rate:.2f}% ({words.errors}/{words.ref_len}), CER {100 * corpus.chars.rate:.2f}%, "
          f"{len(corpus.utterances)} utterances, {len(corpus.missing)} missing -> {report}")
    return 0
