#!/usr/bin/env python
"""Stage 2 of the TTS recipe: checkpoint -> the voice burble ships.

Writes ``burble/tts/weights/<name>.safetensors`` (bfloat16 weights, upcast to float32 on load;
the model config, the phoneme inventory and the codec's name in the metadata);
``burble.tts.load(name)`` reads it.

Usage::

    python recipes/tts/local/export.py --checkpoint ~/.cache/burble/tts/exp/checkpoint.pt --out burble/tts/weights/joe.safetensors
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from burble.tts.model import CodecLM, CodecLMConfig, param_count  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--codec", default="mel-21hz", help="the codec whose tokens the LM was trained on")
    args = parser.parse_args(argv)
    state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    model = CodecLM(CodecLMConfig.from_dict(state["config"]))
    model.load_state_dict(state["model"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    valid = [r["valid"]["loss"] for r in state["log"] if "valid" in r]
    model.save(str(args.out), inventory=state["inventory"],
               extra={"codec": args.codec, "steps": state["step"], "recipe": "recipes/tts",
                      "valid_loss": valid[-1] if valid else None})
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, {param_count(model) / 1e6:.1f} M parameters, "
          f"step {state['step']}, {model.config.num_books} books")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
