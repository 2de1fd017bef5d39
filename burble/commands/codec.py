"""``burble codec encode|decode|info``: audio -> a few integer codes per frame (.npz) -> audio.

``encode`` reads any audio file, resamples it to the codec's 22.05 kHz and writes its codes with
what ``decode`` needs to undo it (the codec's name, the input's length) to an ``.npz``;
``decode`` turns such a file back into a 22.05 kHz 16-bit WAV; ``info`` describes a codec:
frame rate, books, bitrates, vocoder and latency. Both writes go through a temporary file in the
output's folder and a rename, so a killed run leaves the old file or none, never half a file.

The codes file (``format`` = ``burble-codec-1``) holds ``codes`` (int16, ``books x frames``),
``codec`` (a shipped name, or the absolute path of a ``.safetensors`` file), ``sample_rate``,
``frame_rate``, ``num_samples`` (the input's length at ``sample_rate``; decoding trims the
padding of the last frame to it), ``codebook_size`` and ``format``.

Torch-free at import (the codec is imported in ``run``), so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from burble.commands.common import add_device_argument

FORMAT = "burble-codec-1"
APPROXIMATE_LOOKAHEAD = 2  # mel frames: the approximate streaming vocoder's lookahead shown by `info`
FIELDS = ("codes", "codec", "sample_rate", "frame_rate", "num_samples", "codebook_size", "format")


class CommandError(Exception):
    """A user mistake, reported as one ``burble codec: error: ...`` line and exit code 2."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "codec",
        help="neural speech codec: encode audio to integer codes (.npz) and decode them back",
        description=(
            "A causal neural speech codec: 22.05 kHz log-mel frames are encoded to a few integer codes "
            "per frame (residual VQ: each extra book refines the one before) and decoded back to mel and "
            "through a HiFi-GAN vocoder to audio. The default codec, mel-43hz, codes 23 ms frames (2 books of 2048 "
            "= 947 bit/s); mel-21hz, the TTS voice's, 46 ms frames (4 books = 861 bit/s). "
            "`burble codec encode IN -o codes.npz` writes the codes, `burble codec decode codes.npz -o out.wav` "
            "the audio, `burble codec info` describes the codec."
        ),
    )
    parser.set_defaults(codec_parser=parser)
    actions = parser.add_subparsers(dest="codec_command", metavar="ACTION")
    codec_help = "a shipped codec name (see `burble codec info`) or a path to a codec .safetensors file"

    encode = actions.add_parser(
        "encode", help="audio file -> codes (.npz)",
        description=(
            "Encode an audio file (wav, flac, ogg, mp3, ...; any rate, channels averaged) to codes. Writes an "
            ".npz with the codes (int16, books x frames) and what decoding needs: the codec's name and the "
            "input's length. Prints frames, books, bitrate and duration."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    encode.add_argument("input", metavar="IN", help="the audio file to encode")
    encode.add_argument("--output", "-o", required=True, metavar="CODES.npz", help="where the codes go")
    encode.add_argument("--books", type=int, default=None, metavar="N",
                        help="codebooks per frame (1 to the codec's number of books; more: better and more bits). "
                             "Default: the codec's default, its <= 1 kbps setting (mel-43hz: 2 books, 947 bit/s; mel-21hz: 4, 861 bit/s)")
    encode.add_argument("--codec", default=None, help=codec_help + " (default: mel-43hz)")
    add_device_argument(encode, cuda_graphs=False)

    decode = actions.add_parser(
        "decode", help="codes (.npz) -> 22.05 kHz WAV",
        description=(
            "Decode a codes file written by `burble codec encode` to a 22.05 kHz 16-bit WAV as long as the "
            "encoded audio. The codec named in the file is used unless --codec says otherwise."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    decode.add_argument("input", metavar="CODES.npz", help="a file written by `burble codec encode`")
    decode.add_argument("--output", "-o", required=True, metavar="OUT.wav", help="where the WAV goes")
    decode.add_argument("--codec", default=None, help=codec_help + " (default: the one named in the file)")
    decode.add_argument("--vocoder", default=None,
                        help="the generator that turns decoded mels into audio: low-latency (causal first stage, "
                             "32 ms of lookahead), universal or LJSpeech (the pretrained HiFi-GAN V1, 148 ms), "
                             "or a .safetensors path (default: the codec's own)")
    add_device_argument(decode, cuda_graphs=False)

    info = actions.add_parser(
        "info", help="frame rate, books, bitrates, vocoder and latency of a codec",
        description="Describe a codec: frame rate, books and codebook size, bitrate per number of books, "
                    "vocoder, algorithmic latency, and the codecs that ship with burble.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    info.add_argument("--codec", default=None, help=codec_help + " (default: mel-43hz)")


# -- helpers ------------------------------------------------------------------------------------


def load_codec(name: str | None, device: str = "cpu", dtype: str = "float32", vocoder: str | None = None):
    """``burble.codecs.codec.load`` with any failure (unknown name or vocoder, unreadable file, no
    such device) as a CommandError."""
    from burble.codecs.codec import DEFAULT_CODEC, load

    name = name or DEFAULT_CODEC
    try:
        return load(name, device=device, dtype=dtype, vocoder=vocoder)
    except Exception as error:  # unknown name, a file that is not a codec, corrupt safetensors: all user input
        raise CommandError(f"cannot load codec {name!r}: {error}") from None


def codec_reference(name: str | None) -> str:
    """What a codes file records as its codec: the shipped name, or a path made absolute."""
    from burble.codecs.codec import DEFAULT_CODEC

    name = name or DEFAULT_CODEC
    return str(Path(name).resolve()) if name.endswith(".safetensors") else name


def codec_metadata(name: str | None) -> dict[str, str]:
    """The metadata of a codec's weights file (``load`` keeps the vocoder's name only as the model)."""
    from safetensors import safe_open

    from burble.codecs.codec import DEFAULT_CODEC, WEIGHTS_DIR

    name = name or DEFAULT_CODEC
    path = Path(name) if name.endswith(".safetensors") else WEIGHTS_DIR / f"{name}.safetensors"
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


def check_books(codec, books: int | None) -> int:
    count = codec.config.num_books
    if books is not None and not 1 <= books <= count:
        raise CommandError(f"--books must be 1..{count} for codec {codec.name!r}, got {books}")
    return codec.default_books if books is None else books


def read_codes_file(path: str) -> dict[str, Any]:
    """The fields of a codes file, checked; a missing, corrupt or foreign file is a CommandError."""
    import zipfile

    import numpy as np

    if not Path(path).is_file():
        raise CommandError(f"{path}: no such file")
    not_ours = f"{path}: not a burble codec file (written by `burble codec encode`)"
    try:
        data = np.load(path, allow_pickle=False)
        if not hasattr(data, "files"):  # a bare .npy array
            raise CommandError(f"{not_ours}: it holds one array, not the codec fields")
        with data:
            missing = [k for k in FIELDS if k not in data.files]
            if missing:
                raise CommandError(f"{not_ours}: it lacks {', '.join(missing)}")
            fields = {k: data[k] for k in FIELDS}
    except CommandError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise CommandError(f"{not_ours}: cannot read it ({error})") from None
    try:
        if str(fields["format"]) != FORMAT:
            raise CommandError(f"{path}: format {str(fields['format'])!r} is not {FORMAT!r}")
        out = {
            "codes": fields["codes"], "codec": str(fields["codec"]), "format": FORMAT,
            "sample_rate": int(fields["sample_rate"]), "frame_rate": float(fields["frame_rate"]),
            "num_samples": int(fields["num_samples"]), "codebook_size": int(fields["codebook_size"]),
        }
    except (TypeError, ValueError) as error:  # e.g. a field that is an array, not a number
        raise CommandError(f"{not_ours}: a field has the wrong type ({error})") from None
    return out


# -- the actions --------------------------------------------------------------------------------


def encode(args: argparse.Namespace) -> None:
    import numpy as np

    from burble.audio.io import AudioDecodeError, load_audio
    from burble.codecs.codec import CodecInputError

    codec = load_codec(args.codec, args.device, args.dtype)
    books = check_books(codec, args.books)
    try:
        audio = load_audio(args.input, codec.sample_rate)
        codes = codec.encode(audio, codec.sample_rate, books)
    except (FileNotFoundError, AudioDecodeError, CodecInputError) as error:
        message = str(error)
        raise CommandError(message if args.input in message else f"{args.input}: {message}") from None
    dtype = np.int16 if codec.config.codebook_size <= np.iinfo(np.int16).max + 1 else np.int32
    fields = {
        "codes": codes.astype(dtype), "codec": np.array(codec_reference(args.codec)),
        "sample_rate": np.array(codec.sample_rate), "frame_rate": np.array(codec.config.frame_rate),
        "num_samples": np.array(audio.size), "codebook_size": np.array(codec.config.codebook_size),
        "format": np.array(FORMAT),
    }
    from burble.batch.outputs import atomic_write

    try:
        atomic_write(args.output, lambda f: np.savez(f, **fields))
    except OSError as error:
        raise CommandError(f"cannot write {args.output}: {error}") from None
    seconds = audio.size / codec.sample_rate
    bitrate = codec.config.bitrate(books)
    print(f"{args.input}: {seconds:.2f} s -> {args.output}: {codes.shape[1]} frames x {books} books "
          f"at {codec.config.frame_rate:.2f} Hz, {bitrate:.0f} bit/s ({codec.name})")


def decode(args: argparse.Namespace) -> None:
    import numpy as np
    import soundfile as sf

    from burble.codecs.codec import CodecInputError

    data = read_codes_file(args.input)
    codec = load_codec(args.codec or data["codec"], args.device, args.dtype, vocoder=args.vocoder)
    config = codec.config
    if data["sample_rate"] != codec.sample_rate or abs(data["frame_rate"] - config.frame_rate) > 1e-6 * config.frame_rate \
            or data["codebook_size"] != config.codebook_size:
        raise CommandError(
            f"{args.input}: encoded for {data['sample_rate']} Hz, {data['frame_rate']:.2f} Hz frames, {data['codebook_size']} "
            f"codes, but codec {codec.name!r} is {codec.sample_rate} Hz, {config.frame_rate:.2f} Hz, {config.codebook_size}")
    codes = data["codes"]
    try:
        codes = codec.check_codes(codes)
    except CodecInputError as error:
        raise CommandError(f"{args.input}: {error}") from None
    books, frames = codes.shape
    if not (frames - 1) * codec.samples_per_frame < data["num_samples"] <= frames * codec.samples_per_frame:
        raise CommandError(f"{args.input}: num_samples {data['num_samples']} does not fit {frames} frames "
                           f"of {codec.samples_per_frame} samples")
    audio = codec.decode(codes)[: data["num_samples"]]
    audio = np.clip(audio, -1.0, 1.0)
    from burble.batch.outputs import atomic_write

    try:
        atomic_write(args.output, lambda f: sf.write(f, audio, codec.sample_rate, format="WAV", subtype="PCM_16"))
    except OSError as error:
        raise CommandError(f"cannot write {args.output}: {error}") from None
    print(f"{args.input}: {frames} frames x {books} books ({codec.name}) -> {args.output}: "
          f"{audio.size / codec.sample_rate:.2f} s at {codec.sample_rate} Hz")


def info(args: argparse.Namespace) -> None:
    from burble.codecs.codec import available_codecs

    codec = load_codec(args.codec)
    config = codec.config
    try:
        vocoder = codec_metadata(args.codec).get("vocoder", "?")
    except Exception:  # load() just read this file; nothing should fail here, but info is only a description
        vocoder = "?"
    rate = codec.sample_rate
    bits = math.log2(config.codebook_size)
    exact, approximate = codec.algorithmic_latency(), codec.algorithmic_latency(APPROXIMATE_LOOKAHEAD)
    print(f"codec        {codec.name}" + (f" ({args.codec})" if args.codec and args.codec != codec.name else ""))
    print(f"audio        {rate} Hz mono; log-mel frames at {rate / 256:.2f} Hz (hop 256)")
    print(f"frame rate   {config.frame_rate:.2f} Hz ({codec.samples_per_frame} samples, {config.hop} mel frames per code frame)")
    print(f"books        {config.num_books} of {config.codebook_size} codes ({bits:g} bits each); default {codec.default_books}")
    print("bitrate      " + ", ".join(
        f"{b}: {config.bitrate(b):.0f}" + (" (default)" if b == codec.default_books else "")
        for b in range(1, config.num_books + 1)) + " bit/s")
    print(f"vocoder      HiFi-GAN V1 {vocoder} (22.05 kHz)")
    print(f"latency      {1000 * exact / rate:.1f} ms algorithmic when streaming ({exact} samples: the code frame, "
          "the STFT window's reach, the exact vocoder's lag)")
    print(f"             {1000 * approximate / rate:.1f} ms with the approximate chunked vocoder "
          f"(stream_decoder(lookahead={APPROXIMATE_LOOKAHEAD})); other input rates add the resampler's delay")
    print(f"available    {', '.join(available_codecs()) or 'none shipped'}")


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "codec_command", None)
    if action is None:
        args.codec_parser.print_help(sys.stderr)
        return 2
    try:
        {"encode": encode, "decode": decode, "info": info}[action](args)
    except CommandError as error:
        print(f"burble codec: error: {error}", file=sys.stderr)
        return 2
    return 0
