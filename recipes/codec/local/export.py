#!/usr/bin/env python
"""Stage 2 of the codec recipe: checkpoint -> the inference weights burble ships.

Writes ``burble/codecs/weights/<name>.safetensors`` (fp32, encoder + codebooks + decoder + mel
statistics, the config in the metadata); ``burble.codecs.load(name)`` reads it.

Usage::

    python recipes/codec/local/export.py --checkpoint exp/train/checkpoint.pt --out burble/codecs/weights/mel-21hz.safetensors
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from burble.codecs.codec import save_codec  # noqa: E402
from burble.codecs.model import CodecConfig, MelCodec  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--vocoder", default="universal", choices=("universal", "LJSpeech"))
    parser.add_argument("--default-books", type=int, default=4, help="what `burble codec encode` uses by default")
    args = parser.parse_args(argv)
    state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    model = MelCodec(CodecConfig.from_dict(state["config"]))
    model.load_state_dict(state["model"])
    save_codec(model, args.out, vocoder=args.vocoder, default_books=args.default_books,
               extra={"steps": state["step"], "recipe": "recipes/codec"})
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, step {state['step']}, "
          f"{model.config.frame_rate:.2f} Hz, default {args.default_books} books = "
          f"{model.config.bitrate(args.default_books):.0f} bit/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
