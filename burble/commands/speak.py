"""``burble speak``: text -> speech with burble's codec-LM voice.

``burble speak "text" -o out.wav`` writes a 22.05 kHz 16-bit WAV; ``--text-file`` reads the
text from a file (``-`` for stdin: each line is spoken as soon as it is complete); ``--play``
plays through the default output device while it is generated; ``--raw`` writes signed 16-bit
little-endian PCM to stdout (``| aplay -f S16_LE -r 22050``). Several outputs may be combined.
Audio streams out as the codec LM generates it (``burble.tts.pipeline``).

Torch-free at import, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time


class CommandError(Exception):
    """A user mistake, reported as one ``burble speak: error: ...`` line and exit code 2."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "speak",
        help="text to speech: write a WAV, play it, or stream raw PCM",
        description=(
            "Speak English text with burble's voice: text is normalised (numbers, money, abbreviations), "
            "turned into phonemes with espeak-ng, and a codec language model decoded by the same loop "
            "as Whisper samples neural-codec tokens, which the codec turns into 22.05 kHz audio. Audio "
            "streams out while it is generated. Example: burble speak \"Hello there.\" -o hello.wav"
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("text", nargs="?", default=None, help="the text to speak (or use --text-file)")
    parser.add_argument("--text-file", metavar="FILE", default=None,
                        help="read the text from FILE ('-': stdin, each line spoken as soon as it is complete)")
    parser.add_argument("--output", "-o", metavar="OUT.wav", default=None, help="write a 16-bit WAV here")
    parser.add_argument("--play", action="store_true", help="play through the default output device (sounddevice)")
    parser.add_argument("--output-device", default=None, metavar="N", help="output device index or name for --play")
    parser.add_argument("--raw", action="store_true",
                        help="write raw s16le mono PCM at 22.05 kHz to stdout (progress goes to stderr)")
    parser.add_argument("--voice", default=None, help="a shipped voice name or a voice .safetensors path (default: joe)")
    parser.add_argument("--temperature", type=float, default=argparse.SUPPRESS,  # the voice's default: greedy
                        help="sampling temperature (default 0: greedy, the most intelligible; e.g. 0.5 for varied speech)")
    parser.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    parser.add_argument("--seed", type=int, default=None, help="random seed when sampling (--temperature > 0), for the same audio on every run")
    parser.add_argument("--speculative", choices=("auto", "off", "mtp"), default="auto",
                        help="mtp: speculative sampling with the voice's MTP draft heads (exact: the same distribution "
                             "of speech in fewer decoder passes); auto: mtp when the voice ships heads")
    parser.add_argument("--token-codes", action="store_true",
                        help="decode the sampled codec codes themselves; by default each frame is decoded from its "
                             "expected code vector under the codec LM's distribution (clearer speech)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")


def _text_source(args: argparse.Namespace):
    from burble.tts.pipeline import TextLines, TextPieces

    if args.text is not None and args.text_file is not None:
        raise CommandError("give the text or --text-file, not both")
    if args.text_file == "-":
        return TextLines(sys.stdin)
    if args.text_file is not None:
        try:
            with open(args.text_file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(f"cannot read {args.text_file}: {error}") from None
        pieces = [p for p in text.split("\n\n") if p.strip()]  # paragraphs, each streamed as it is made
        if not pieces:
            raise CommandError(f"{args.text_file}: no text to speak")
        return TextPieces(pieces)
    if args.text is None or not args.text.strip():
        raise CommandError("nothing to speak: give the text as an argument or --text-file FILE")
    return TextPieces([args.text])


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except CommandError as error:
        print(f"burble speak: error: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if not (args.output or args.play or args.raw):
        raise CommandError("say where the audio goes: -o OUT.wav, --play and/or --raw")
    if args.raw and sys.stdout.isatty():
        raise CommandError("--raw writes binary PCM: redirect stdout to a file or a player")
    source = _text_source(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    import burble.tts
    from burble.tts.normalize import TTSInputError
    from burble.tts.pipeline import PcmSink, SpeakerSink, TTSStage, WavSink, run_synthesis

    try:
        temperature = getattr(args, "temperature", burble.tts.synthesizer.DEFAULT_TEMPERATURE)
        options = burble.tts.SynthesisOptions(temperature=temperature, top_k=args.top_k, seed=args.seed,
                                              speculative=args.speculative, expected_codes=not args.token_codes)
        synthesizer = burble.tts.load(args.voice or burble.tts.synthesizer.DEFAULT_VOICE)
        if options.speculative == "mtp" and synthesizer.heads is None:
            raise TTSInputError(f"the voice {synthesizer.name!r} ships no draft heads: use --speculative off")
    except TTSInputError as error:
        raise CommandError(str(error)) from None
    sinks = []
    try:
        if args.output:
            sinks.append(WavSink(args.output, synthesizer.sample_rate))
        if args.raw:
            sinks.append(PcmSink())
        if args.play:
            device = int(args.output_device) if args.output_device and args.output_device.isdigit() else args.output_device
            sinks.append(SpeakerSink(synthesizer.sample_rate, device=device))
    except Exception as error:  # a folder that does not exist, no output device, ...
        raise CommandError(f"cannot open the output: {error}") from None
    started = time.perf_counter()
    stage = TTSStage(synthesizer, options)
    try:
        samples = asyncio.run(run_synthesis(source, stage, sinks))
    except TTSInputError as error:
        raise CommandError(str(error)) from None
    except KeyboardInterrupt:
        return 130
    seconds = samples / synthesizer.sample_rate
    wall = time.perf_counter() - started
    where = ", ".join(w for w in [args.output, "speaker" if args.play else None, "stdout" if args.raw else None] if w)
    print(f"spoke {seconds:.2f} s of audio in {wall:.2f} s (RTF {wall / max(seconds, 1e-9):.2f}) -> {where}", file=sys.stderr)
    underruns = sum(sink.underruns for sink in sinks if isinstance(sink, SpeakerSink))
    if underruns:
        print(f"the speaker paused {underruns} time(s) to refill: synthesis was slower than real time "
              "(a busy machine?)", file=sys.stderr)
    return 0
