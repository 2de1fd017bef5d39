"""Flags that mean the same in every command: ``--device`` and ``--dtype`` (compute), ``--threads``, and the
streaming recognizer's (``--encoder``, ``--lookahead``, ``--policy``, ``--alignatt-frames``).

Torch-free (argparse, and the torch-free :mod:`burble.streaming.factory` for the recognizer
flags' choices and defaults), so ``--help`` stays fast. How ``--threads`` turns into a thread count
is :func:`burble.cpu_threads.worker_threads`, shared with the batch engines.
"""

from __future__ import annotations

import argparse


def compute_device(value: str) -> str:
    """argparse type of ``--device``: a torch device name; a bare number is refused with a hint,
    because it is what a user who means a microphone types (that flag is ``--input-device``)."""
    if value.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a compute device (cpu, cuda, cuda:1); the microphone is chosen with --input-device"
        )
    return value


def thread_count(value: str) -> int:
    """argparse type of ``--threads``: a whole number >= 0."""
    try:
        threads = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if threads < 0:
        raise argparse.ArgumentTypeError("must be >= 0 (0: automatic)")
    return threads


def add_device_argument(parser: argparse.ArgumentParser, *, cuda_graphs: bool = True) -> None:
    """``--device``: where the model computes, ``--dtype``: in what precision, ``--cuda-graphs``: how."""
    from burble.precision import DEFAULT_DTYPE, DTYPE_NAMES

    parser.add_argument("--device", type=compute_device, default="cpu", help="compute device for the model: cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--dtype", choices=DTYPE_NAMES, default=DEFAULT_DTYPE,
        help="precision of weights and activations (logits stay float32); float16/bfloat16 are for GPUs",
    )
    if cuda_graphs:  # only the Whisper decoder has a static-shape step
        parser.add_argument(
            "--cuda-graphs", action="store_true",
            help="replay each single-token decoder step from a CUDA graph at static shapes (GPU; same tokens)",
        )


def add_threads_argument(parser: argparse.ArgumentParser, workers: str) -> None:
    """``--threads``, with one meaning everywhere (see :mod:`burble.cpu_threads`).

    Args:
      parser: the command's parser.
      workers: what a compute worker is in this command, e.g. ``"each --workers process"``.
    """
    parser.add_argument(
        "--threads", type=thread_count, default=0, metavar="N",
        help=f"torch CPU threads per compute worker ({workers}); 0: automatic, the CPU cores divided "
             "among the workers that compute in parallel (at least 1, and never more than that share)",
    )


# -- the streaming recognizer: one switch for stream, listen and serve --------------------------


class StreamingDefault:
    """The default of a flag that :class:`~burble.streaming.recognizer.StreamingOptions` owns.

    StreamingOptions imports torch, which ``--help`` must not, so the flag's default is this
    marker: the help shows the field's name, and :func:`streaming_overrides` leaves the field out,
    so the dataclass's own default applies.
    """

    def __init__(self, field: str) -> None:
        self.field = field

    def __repr__(self) -> str:
        return f"StreamingOptions().{self.field}"


def lookahead_seconds(value: str) -> float:
    """argparse type of ``--lookahead``: seconds in :class:`~burble.streaming.factory.RecognizerChoice`'s range."""
    from burble.streaming.factory import RecognizerChoice

    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    try:
        RecognizerChoice(lookahead_seconds=seconds)  # its own range check, the one source of it
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return seconds


def frame_count(value: str) -> int:
    """argparse type of ``--alignatt-frames``: a whole number >= 0."""
    try:
        frames = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if frames < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return frames


def add_recognizer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--encoder``, ``--lookahead``, ``--policy``, ``--alignatt-frames``: which streaming
    recognizer runs (``burble stream``, ``burble listen`` and ``burble serve`` alike).

    The defaults are :class:`~burble.streaming.factory.RecognizerChoice`'s and
    :class:`~burble.streaming.recognizer.StreamingOptions`' own, never copied here.
    """
    from burble.streaming.factory import COMMIT_POLICIES, ENCODERS, RecognizerChoice

    choice = RecognizerChoice()
    parser.add_argument(
        "--encoder", choices=ENCODERS, default=choice.encoder,
        help="cache-aware: encode each chunk of audio once, against cached encoder states (cost grows "
             "with the new audio); re-encode: re-encode the whole window, padded to 30 s, every chunk",
    )
    parser.add_argument(
        "--lookahead", type=lookahead_seconds, default=choice.lookahead_seconds, metavar="SECONDS",
        help="cache-aware encoder's right context: seconds of future audio each encoded chunk sees "
             "(0 to 2, rounded to 20 ms; commits never wait for it: the newest audio is encoded with "
             "every decode); ignored by re-encode",
    )
    parser.add_argument(
        "--policy", choices=COMMIT_POLICIES, default=StreamingDefault("policy"),
        help="when words are committed: local-agreement commits the words two consecutive hypotheses "
             "agree on; alignatt commits a word once the decoder's attention has moved past it",
    )
    parser.add_argument(
        "--alignatt-frames", type=frame_count, default=StreamingDefault("alignatt_frames"), metavar="N",
        help="alignatt: a word is committed once the attention lies at least N encoder frames (20 ms "
             "each) before the end of the audio received",
    )


def recognizer_choice_from_args(args: argparse.Namespace):
    """The :class:`~burble.streaming.factory.RecognizerChoice` of :func:`add_recognizer_arguments`' flags."""
    from burble.streaming.factory import RecognizerChoice

    return RecognizerChoice(encoder=args.encoder, lookahead_seconds=args.lookahead)


def streaming_overrides(args: argparse.Namespace) -> dict:
    """``StreamingOptions`` keyword arguments of the flags given (defaulted ones are left out)."""
    given = {"policy": args.policy, "alignatt_frames": args.alignatt_frames}
    return {name: value for name, value in given.items() if not isinstance(value, StreamingDefault)}
