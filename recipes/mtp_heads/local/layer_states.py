#!/usr/bin/env python
"""The decoder's block outputs along each stage-0 clip, for a draft layer that fuses them.

Stage 0 keeps each clip's final-norm states, tokens and encoder states. A draft layer with
``--feature-layers`` (EAGLE-3's low-, mid- and high-level features) also reads the outputs of
earlier decoder blocks: one teacher-forced decoder pass per clip gives them, without making the
speech again. The pass needs the clip's whole prompt; stage 0 kept its length, and a prompted clip's
prompt is the previous clip's transcript (the tokens of the clip before it in the shard). The pass's
final-norm states must match the stored ones (a check that the prompt was rebuilt right).

Per shard ``shard_NNNN.safetensors`` it writes ``layers_NNNN.safetensors`` beside it: per clip
``{c}.layers`` ``(n, blocks, D)`` float16, every block's output at the rows of ``{c}.hidden``.
Files already there are kept (a rerun resumes).

Usage::

    python recipes/mtp_heads/local/layer_states.py --data exp/data
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from burble.asr.options import TranscribeOptions  # noqa: E402
from burble.asr.pipeline import load_model  # noqa: E402
from burble.asr.prompt import build_prompt  # noqa: E402
from burble.asr.whisper.model import WhisperTextModel  # noqa: E402

# Relative difference allowed between the rebuilt pass's final-norm states and stage 0's: the
# encoder states are kept in float16 (stage 0 decoded from float32 ones); a wrong prompt differs by ~1.
MATCH_TOLERANCE = 0.1


def layers_path(shard: Path) -> Path:
    return shard.with_name(shard.name.replace("shard_", "layers_", 1))


@torch.inference_mode()
def block_outputs(model, sequence: list[int], audio: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(T, blocks, D)`` block outputs and ``(T, D)`` final-norm states of a teacher-forced pass."""
    text_model = WhisperTextModel(model, audio[None].float())
    cache = text_model.new_cache(1, len(sequence))
    outputs: list[torch.Tensor] = []
    final, _ = model.decoder.hidden_states(torch.tensor([sequence]), cache, block_outputs=outputs)
    return torch.stack(outputs, dim=2)[0], final[0]


def shard_layers(shard: Path, model, tokenizer) -> dict[str, torch.Tensor]:
    options = TranscribeOptions(beam_size=1, temperatures=(0.0,))
    tensors: dict[str, torch.Tensor] = {}
    with safe_open(str(shard), framework="pt") as f:
        meta = json.loads((f.metadata() or {})["clips"])
        previous: list[int] = []
        for c, clip in enumerate(meta):
            tokens = f.get_tensor(f"{c}.tokens").long().tolist()
            conditioned = previous if clip["prompt_tokens"] > 1 else []
            prompt = build_prompt(tokenizer, model.dims.n_text_ctx, conditioned, options)
            if len(prompt) != clip["prompt_tokens"]:
                raise ValueError(f"{shard} clip {c}: rebuilt a {len(prompt)}-token prompt, stage 0 used {clip['prompt_tokens']}")
            first = len(prompt) - 1  # the stored rows start at the prompt's last token
            layers, final = block_outputs(model, prompt[:-1] + tokens, f.get_tensor(f"{c}.audio"))
            stored = f.get_tensor(f"{c}.hidden").float()
            mismatch = float(((final[first:-1] - stored).abs() / (1 + stored.abs())).max())
            if mismatch > MATCH_TOLERANCE:
                raise ValueError(f"{shard} clip {c}: rebuilt states differ from stage 0's ({mismatch:.3f})")
            tensors[f"{c}.layers"] = layers[first:-1].to(torch.float16).contiguous()
            previous = [t for t in tokens[1:-1] if t < tokenizer.eot]  # what prompts the next clip
    return tensors


def ensure_layer_states(data: Path, model_name: str) -> None:
    """Write the missing ``layers_NNNN.safetensors`` files of the shards in ``data``."""
    shards = [s for s in sorted(data.glob("shard_*.safetensors")) if not layers_path(s).is_file()]
    if not shards:
        return
    asr = load_model(model_name)
    started = time.perf_counter()
    for i, shard in enumerate(shards):
        tensors = shard_layers(shard, asr.whisper.model, asr.whisper.tokenizer)
        tmp = layers_path(shard).with_suffix(".tmp")
        save_file(tensors, str(tmp))
        os.replace(tmp, layers_path(shard))
        print(f"block outputs of {shard.name} ({i + 1}/{len(shards)}, {time.perf_counter() - started:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="directory of stage-0 shards")
    parser.add_argument("--model", default="tiny.en")
    args = parser.parse_args(argv)
    ensure_layer_states(args.data, args.model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
