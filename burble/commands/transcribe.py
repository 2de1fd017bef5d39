"""``burble transcribe FILE...``: offline transcription to txt / srt / vtt / json."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

FORMATS = ("txt", "srt", "vtt", "json")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "transcribe",
        help="transcribe audio files",
        description=(
            "Transcribe audio files with Whisper. Each input FILE gets outputs named after its stem "
            "in --output-dir. A missing or undecodable file is reported and the others still complete."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="audio files (wav, flac, ogg, mp3, ...)")
    parser.add_argument("--model", default="tiny.en", help="tiny.en, base, or a checkpoint path")
    parser.add_argument("--beam-size", type=int, default=5, help="1 = greedy search")
    parser.add_argument("--temperature", type=float, nargs="+", default=None, help="fallback temperatures (default 0 0.2 ... 1.0)")
    parser.add_argument("--language", default=None, help="language code for multilingual models")
    parser.add_argument("--word-timestamps", action="store_true", help="align words to audio (cross-attention DTW)")
    parser.add_argument("--no-condition-on-previous-text", action="store_true", help="do not prompt windows with earlier text")
    parser.add_argument("--initial-prompt", default=None, help="text to prompt the first window with")
    parser.add_argument("--speculative", choices=("off", "ngram", "self", "auto"), default="off", help="lossless speculative decoding drafter (greedy only)")
    parser.add_argument("--draft-length", type=int, default=4, help="tokens per speculative draft")
    parser.add_argument("--output-format", "-f", choices=FORMATS + ("all",), default="txt")
    parser.add_argument("--output-dir", "-o", default=".", help="where outputs are written")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no transcript on stdout")


def options_from_args(args: argparse.Namespace):
    from burble.asr.options import TranscribeOptions

    fields = dict(
        beam_size=args.beam_size,
        language=args.language,
        word_timestamps=args.word_timestamps,
        condition_on_previous_text=not args.no_condition_on_previous_text,
        initial_prompt=args.initial_prompt,
        speculative=args.speculative,
        draft_length=args.draft_length,
    )
    if args.temperature:
        fields["temperatures"] = tuple(args.temperature)
    return TranscribeOptions(**fields)


def write_outputs(result, stem: str, output_dir: Path, output_format: str) -> list[Path]:
    """Write each requested format atomically (temp file + rename); return the paths."""
    from burble.asr.results import WRITERS

    output_dir.mkdir(parents=True, exist_ok=True)
    formats = FORMATS if output_format == "all" else (output_format,)
    written = []
    for fmt in formats:
        path = output_dir / f"{stem}.{fmt}"
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(WRITERS[fmt](result), encoding="utf-8")
        temporary.replace(path)
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    import burble
    from burble.asr.frontend import AudioDecodeError, load_audio

    options = options_from_args(args)
    asr = burble.load_model(args.model, device=args.device, threads=args.threads or None)
    failures = 0
    for name in args.files:
        path = Path(name)
        try:
            audio = load_audio(path)
        except (FileNotFoundError, AudioDecodeError) as error:
            print(f"burble transcribe: error: {error}", file=sys.stderr)
            failures += 1
            continue
        duration = len(audio) / 16000
        with tqdm(total=round(duration, 2), unit="s", desc=path.name, disable=args.quiet, leave=False,
                  bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s audio [{elapsed}<{remaining}]") as bar:
            result = asr.transcribe(audio, options, progress=lambda seconds: bar.update(min(seconds, bar.total - bar.n)))
        outputs = write_outputs(result, path.stem, Path(args.output_dir), args.output_format)
        if not args.quiet:
            print(result.text)
            print(f"  -> {', '.join(str(p) for p in outputs)}", file=sys.stderr)
    if failures:
        print(f"burble transcribe: {failures} of {len(args.files)} file(s) failed", file=sys.stderr)
    return 1 if failures else 0
