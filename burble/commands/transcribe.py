"""``burble transcribe INPUT...``: offline transcription of files, folders, globs and manifests.

One file or a million: inputs are collected into items (:mod:`burble.batch.inputs`), each item
gets ``<output-dir>/<id>.<fmt>`` outputs written atomically, unreadable inputs are reported and
skipped, and a summary closes the run. ``--batch-size`` switches from long-form decoding (one
30 s window at a time, each prompted with the previous text: the reference behaviour) to batched
windows; ``--workers`` runs model copies in parallel; ``--engine ray`` runs the same job on Ray
Data; ``--resume`` skips items whose outputs are complete.
"""

from __future__ import annotations

import argparse
import sys

from burble.asr.options import TranscribeOptions
from burble.batch.outputs import FORMATS
from burble.commands.common import add_device_argument, add_threads_argument


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "transcribe",
        help="transcribe audio files, folders and manifests",
        description=(
            "Transcribe audio with Whisper. INPUT is an audio file, a folder (searched recursively for "
            "audio files), a glob ('data/**/*.flac') or a JSONL manifest ({\"audio\": PATH, \"text\": ..., "
            "\"id\": ...} per line, or lhotse recordings/cuts). Each item gets outputs named after its id "
            "(file stem, path inside the folder, or manifest id) in --output-dir. A missing, corrupt or "
            "empty file is reported (and logged with --errors-file) and the others still complete."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="audio files, folders, globs or JSONL manifests")
    parser.add_argument("--model", default="tiny.en", help="tiny.en, base, or a checkpoint path")
    parser.add_argument("--beam-size", type=int, default=5, help="1 = greedy search")
    parser.add_argument("--temperature", type=float, nargs="+", default=None, help="fallback temperatures (default 0 0.2 ... 1.0)")
    parser.add_argument("--language", default=None, help="language code for multilingual models")
    parser.add_argument("--word-timestamps", action="store_true", help="align words to audio (cross-attention DTW)")
    parser.add_argument("--without-timestamps", action="store_true", help="decode text only: one segment per window")
    parser.add_argument("--no-condition-on-previous-text", action="store_true", help="do not prompt windows with earlier text")
    parser.add_argument("--initial-prompt", default=None, help="text to prompt the first window (every window when batched) with")
    parser.add_argument("--speculative", choices=("off", "ngram", "self", "mtp", "eagle", "auto"), default="off", help="lossless speculative decoding drafter (greedy only; the text is identical): mtp = the model's trained draft heads, eagle = its trained one-layer draft model (both shipped for tiny.en); auto = what measured fastest: offline the draft layer in 2-token chains where the model ships one (else plain), the previous hypothesis when streaming re-decodes")
    parser.add_argument("--draft-length", type=int, default=TranscribeOptions.draft_length, help="tokens per speculative draft (depth of an mtp draft tree)")
    parser.add_argument("--draft-tree", choices=("chain", "static", "dynamic"), default=TranscribeOptions.draft_tree, help="shape of mtp drafts: the heads' best chain, a fixed 10-node tree, or the most probable nodes; with eagle, static or dynamic adds the first position's next-best guesses beside the chain")
    parser.add_argument("--output-format", "-f", default="txt", help=f"{', '.join(FORMATS)}, all, or a comma list (json,txt)")
    parser.add_argument("--output-dir", "-o", default=".", help="where outputs are written")
    add_threads_argument(parser, "each --workers process or Ray actor, so 0 is cores // --workers")
    add_device_argument(parser)
    parser.add_argument("--quiet", action="store_true", help="print only the transcripts (stdout) and errors: no progress, output paths or summary")

    job = parser.add_argument_group("batch jobs")
    job.add_argument("--batch-size", type=int, default=None,
                     help="decode this many 30 s windows (of one long file or of several files) per forward pass; "
                          "windows are independent (no previous-text prompt). Default: long-form decoding, one window at a time")
    job.add_argument("--segmentation", choices=("auto", "vad", "fixed"), default="auto",
                     help="with --batch-size: how recordings are cut into windows (auto: files up to 30 s whole, longer ones by silero-vad)")
    job.add_argument("--workers", type=int, default=1, help="model copies working in parallel (processes, or Ray actors)")
    job.add_argument("--engine", choices=("local", "ray"), default="local", help="run here, or on Ray Data (pip install 'burble[ray]')")
    job.add_argument("--ray-address", default=None, help="Ray cluster to connect to (default: RAY_ADDRESS or a local instance)")
    job.add_argument("--resume", action="store_true", help="skip items whose outputs all exist and are complete")
    job.add_argument("--errors-file", default=None, help="write one JSON line per failed item here")
    job.add_argument("--records-file", default=None, help="write one JSON line per item (status, audio seconds, latency, text) here")
    job.add_argument("--summary-file", default=None, help="write the run summary (files, audio hours, wall time, RTF) here as JSON")

    from burble.asr.fusion.cli import add_biasing_arguments

    add_biasing_arguments(parser)


def options_from_args(args: argparse.Namespace):
    from burble.asr.options import TranscribeOptions

    fields = dict(
        beam_size=args.beam_size,
        language=args.language,
        word_timestamps=args.word_timestamps,
        without_timestamps=getattr(args, "without_timestamps", False),
        condition_on_previous_text=not args.no_condition_on_previous_text,
        initial_prompt=args.initial_prompt,
        speculative=args.speculative,
        draft_length=args.draft_length,
        draft_tree=args.draft_tree,
    )
    if args.temperature:
        fields["temperatures"] = tuple(args.temperature)
    return TranscribeOptions(**fields)


def config_from_args(args: argparse.Namespace):
    """The :class:`~burble.batch.job.JobConfig` and :class:`~burble.batch.runner.RunOptions` of the flags."""
    from burble.asr.fusion.cli import biasing_from_args
    from burble.batch.batched import BatchOptions
    from burble.batch.job import JobConfig
    from burble.batch.outputs import parse_formats
    from burble.batch.runner import RunOptions

    biasing = biasing_from_args(args)
    config = JobConfig(
        output_dir=args.output_dir,
        formats=parse_formats(args.output_format),
        model=args.model,
        device=args.device,
        dtype=args.dtype,
        static_decode=args.cuda_graphs,
        threads=args.threads,
        options=options_from_args(args),
        batch=BatchOptions(batch_size=args.batch_size, segmentation=args.segmentation) if args.batch_size else None,
        biasing=biasing if biasing.enabled else None,
    )
    run = RunOptions(
        engine=args.engine, workers=args.workers, resume=args.resume, progress=not args.quiet,
        errors_file=args.errors_file, records_file=args.records_file, summary_file=args.summary_file, ray_address=args.ray_address,
    )
    return config, run


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from burble.batch.inputs import InputError, collect_inputs
    from burble.batch.local import WorkerStartError
    from burble.batch.runner import run_job

    try:
        if args.batch_size is not None and args.batch_size < 1:
            raise ValueError("--batch-size must be >= 1")
        config, run_options = config_from_args(args)
        items = collect_inputs(args.inputs)
    except (InputError, ValueError) as error:
        print(f"burble transcribe: error: {error}", file=sys.stderr)
        return 2

    def report(record) -> None:
        if record.status == "failed":
            message = record.error if record.audio in (record.error or "") else f"{record.audio}: {record.error}"
            tqdm.write(f"burble transcribe: error: {message}", file=sys.stderr)
        elif record.status == "ok":
            tqdm.write(record.text or "", file=sys.stdout)
            if not args.quiet:
                tqdm.write(f"  -> {', '.join(record.outputs)}", file=sys.stderr)

    try:
        summary = run_job(items, config, run_options, on_record=report)
    except (WorkerStartError, FileNotFoundError, ImportError, RuntimeError, ValueError) as error:  # e.g. the model
        print(f"burble transcribe: error: {error}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"burble transcribe: {summary.format()}", file=sys.stderr)
    if summary.failed:
        print(f"burble transcribe: {summary.failed} of {summary.files} file(s) failed", file=sys.stderr)
    return 1 if summary.failed else 0
