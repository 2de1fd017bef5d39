#!/usr/bin/env python
"""Stages 2 and 5 of the codec recipe: checkpoints -> the inference weights burble ships.

The codec: ``burble/codecs/weights/<name>.safetensors`` (fp32, encoder + codebooks + decoder + mel
statistics, the config and the vocoder's name in the metadata); ``burble.codecs.load(name)``
reads it. The distilled vocoder: ``burble/codecs/vocoders/<name>.safetensors`` (the weights that
differ from the pretrained generator, float16, and its layout); ``--codec`` then names it as
that codec's vocoder, so ``burble.codecs.load()`` decodes through it.

Usage::

    python recipes/codec/local/export.py --checkpoint exp/train/checkpoint.pt --out burble/codecs/weights/mel-21hz.safetensors
    python recipes/codec/local/export.py --vocoder-checkpoint exp/vocoder/vocoder.pt \
        --out burble/codecs/vocoders/low-latency.safetensors --codec burble/codecs/weights/mel-21hz.safetensors
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
from burble.codecs.vocoder import HiFiGAN, VocoderLayout, save_distilled  # noqa: E402


def export_vocoder(checkpoint: Path, out: Path, codec: Path | None) -> int:
    """The distilled generator -> ``out``; ``codec``'s metadata then names it as the codec's vocoder."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    options = state["options"]
    model = HiFiGAN(VocoderLayout(causal_stages=options["causal_stages"], lookahead=options["lookahead"]))
    model.load_state_dict(state["model"])
    save_distilled(model, out, base=options["teacher"], extra={"evaluation": state["evaluation"], "recipe": "recipes/codec"})
    name = out.name[: -len(".safetensors")]
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB, right reach {model.right_reach()} samples")
    if codec is not None:
        with safe_open(str(codec), "pt") as f:
            metadata, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
        save_file(tensors, str(codec), metadata={**metadata, "vocoder": name})
        print(f"{codec}: now decodes through vocoder {name!r}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, help="the codec's training checkpoint (stage 1)")
    parser.add_argument("--vocoder-checkpoint", type=Path, help="the distilled vocoder (stage 4's vocoder.pt)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--vocoder", default="universal", help="the exported codec's vocoder")
    parser.add_argument("--codec", type=Path, help="with --vocoder-checkpoint: the exported codec that decodes through it")
    parser.add_argument("--default-books", type=int, default=4, help="what `burble codec encode` uses by default")
    args = parser.parse_args(argv)
    if (args.checkpoint is None) == (args.vocoder_checkpoint is None):
        parser.error("give one of --checkpoint (the codec) or --vocoder-checkpoint (the distilled vocoder)")
    if args.vocoder_checkpoint is not None:
        return export_vocoder(args.vocoder_checkpoint, args.out, args.codec)
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
