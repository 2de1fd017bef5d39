#!/usr/bin/env python
"""Stage 1 of the MTP-heads recipe with ``--drafter eagle``: an EAGLE-style draft layer for Whisper.

The layer (:class:`burble.decoding.eagle.EagleLayer`) starts as a copy of Whisper's last decoder
block and learns to predict Whisper's next final-norm feature from the current one and the next
token's embedding, cross-attending to the audio through the last block's keys/values (computed
here once per clip from the stage-0 encoder states, as the target computes them when decoding).

Each step unrolls ``--passes`` drafting steps (``EagleLayer.unrolled``): pass ``s`` is fed pass
``s - 1``'s predictions, exactly as drafting feeds back its own, so the chain is trained as it
runs. With ``--feature-layers`` the input feature of a verified position fuses Whisper's block
outputs with its final-norm state (EAGLE-3; ``local/layer_states.py`` makes them once per shard).
Loss per pass: smooth L1 on the predicted feature (in units of the features' standard
deviation) plus ``--token-weight`` x cross-entropy of the next-next token over the draft
vocabulary (Whisper's own greedy transcript: self-distillation).

The last ``--val-shards`` shards are held out: per-pass top-1 accuracy and the chain acceptance
(tokens one verification pass would accept, bonus included) are measured after every epoch.

Resumable: ``<exp>/eagle_checkpoint.pt`` holds the layer, the optimiser, the schedule, the epoch,
the position in the epoch's seeded order and the history, rewritten atomically every
``--save-every`` steps.

Usage::

    python recipes/mtp_heads/local/train_eagle.py --data exp/data --exp-dir exp --epochs 8
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

from burble.asr.pipeline import load_model  # noqa: E402
from burble.decoding.eagle import EagleConfig, EagleLayer, chain_acceptance  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layer_states import ensure_layer_states, layers_path  # noqa: E402
from train import IGNORE, save_checkpoint  # noqa: E402  (the heads' trainer, beside this file)


class Clips:
    """Per clip: target features ``(n, D)`` fp16, tokens ``(n + 1,)`` and the encoder states
    ``(S, D)`` fp16, which a batch projects to the last block's audio keys/values (keeping those for
    every clip took 2.3 MB a clip: 5400 clips outgrew 24 GB); with ``feature_layers``, those
    blocks' outputs ``(n, L, D)`` fp16 too."""

    def __init__(self, paths: list[Path], block: torch.nn.Module, feature_layers: tuple[int, ...] = ()) -> None:
        self.block = block
        self.features: list[torch.Tensor] = []
        self.tokens: list[torch.Tensor] = []
        self.audio: list[torch.Tensor] = []
        self.blocks: list[torch.Tensor] = []
        for path in paths:
            if feature_layers:
                with safe_open(str(layers_path(path)), framework="pt") as f:
                    count = len(list(f.keys()))
                    self.blocks += [f.get_tensor(f"{c}.layers")[:, list(feature_layers)].contiguous() for c in range(count)]
            with safe_open(str(path), framework="pt") as f:
                names = set(f.keys())
                for c in sorted({k.split(".")[0] for k in names}, key=int):
                    if f"{c}.audio" not in names:
                        raise ValueError(f"{path}: no encoder states; remake the data with this recipe's stage 0")
                    self.features.append(f.get_tensor(f"{c}.hidden"))
                    self.tokens.append(f.get_tensor(f"{c}.tokens").long())
                    self.audio.append(f.get_tensor(f"{c}.audio"))
        if feature_layers and len(self.blocks) != len(self.features):
            raise ValueError(f"{len(self.blocks)} clips of block outputs for {len(self.features)} clips (remake them: local/layer_states.py)")

    def __len__(self) -> int:
        return len(self.features)

    @property
    def rows(self) -> int:
        return sum(f.shape[0] for f in self.features)

    def batch(self, clips: list[int], embedding: torch.Tensor, lookup: torch.Tensor) -> dict[str, torch.Tensor]:
        """Padded tensors of ``clips``: input features (and block outputs) and next-token embeddings,
        target features and target draft rows (``IGNORE`` where there is none)."""
        t = max(self.features[c].shape[0] for c in clips)
        d = embedding.shape[1]
        b = len(clips)
        features = torch.zeros(b, t, d)
        following = torch.zeros(b, t, dtype=torch.long)
        target_features = torch.zeros(b, t, d)
        targets = torch.full((b, t), IGNORE, dtype=torch.long)
        blocks = torch.zeros(b, t, self.blocks[0].shape[1], d) if self.blocks else None
        for row, c in enumerate(clips):
            f, tokens = self.features[c].float(), self.tokens[c]
            n = f.shape[0]
            features[row, :n] = f
            following[row, :n] = tokens[1 : n + 1]
            target_features[row, : n - 1] = f[1:]
            targets[row, : n - 1] = lookup[tokens[2 : n + 1]]
            if blocks is not None:
                blocks[row, :n] = self.blocks[c].float()
        with torch.no_grad():  # Whisper's own (frozen) projections, as the target computes them
            keys, values = self.block.project_kv(torch.stack([self.audio[c] for c in clips]).float())
        return {"features": features, "embeddings": embedding[following], "target_features": target_features, "targets": targets,
                "keys": keys, "values": values, "blocks": blocks}


def unrolled(layer: EagleLayer, batch: dict, passes: int, noise: float = 0.0) -> list[torch.Tensor]:
    """The layer's unrolled chains over a batch, from its input features (fused, for a layer with
    ``feature_layers``) plus Gaussian ``noise`` of that standard deviation (EAGLE's regulariser)."""
    features = layer.features(batch["features"], batch["blocks"])
    if noise:
        features = features + torch.randn_like(features) * noise
    return layer.unrolled(features, batch["embeddings"], (batch["keys"], batch["values"]), passes)


def losses(
    layer: EagleLayer, batch: dict, passes: int, feature_scale: float, noise: float = 0.0,
    teacher_rows: torch.Tensor | None = None, kd_weight: float = 0.0,
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """Per pass: the feature loss, the token loss and which rows' tokens were right (valid rows only).

    With ``kd_weight``, the token loss adds that times the KL divergence from Whisper's own
    distribution over the draft vocabulary (its target feature times ``teacher_rows``, its output
    embedding's draft rows) to the layer's: soft targets beside the greedy token.
    """
    outputs = unrolled(layer, batch, passes, noise)
    rows = torch.arange(batch["targets"].shape[1])
    feature_losses, token_losses, correct = [], [], []
    for s, predicted in enumerate(outputs):
        valid = (batch["targets"] != IGNORE) & (rows >= s)[None]
        pred, target = predicted[valid], batch["target_features"][valid]
        feature_losses.append(torch.nn.functional.smooth_l1_loss(pred / feature_scale, target / feature_scale))
        logits = layer.logits(pred)
        tokens = batch["targets"][valid]
        token_loss = torch.nn.functional.cross_entropy(logits, tokens)
        if kd_weight:
            teacher = torch.log_softmax(target @ teacher_rows.T, dim=-1)  # type: ignore[union-attr]
            student = torch.log_softmax(logits, dim=-1)
            token_loss = token_loss + kd_weight * torch.nn.functional.kl_div(student, teacher, log_target=True, reduction="batchmean")
        token_losses.append(token_loss)
        correct.append(logits.argmax(dim=-1) == tokens)
    return feature_losses, token_losses, correct


@torch.no_grad()
def evaluate(layer: EagleLayer, clips: Clips, embedding: torch.Tensor, lookup: torch.Tensor, passes: int, feature_scale: float) -> dict:
    """Per-pass accuracy and mean chain acceptance at every position that has all ``passes`` targets."""
    layer.eval()
    per_pass: list[list[torch.Tensor]] = [[] for _ in range(passes)]
    chains: list[torch.Tensor] = []
    for lo in range(0, len(clips), 32):
        batch = clips.batch(list(range(lo, min(lo + 32, len(clips)))), embedding, lookup)
        outputs = unrolled(layer, batch, passes)
        targets = batch["targets"]
        hits = [(layer.logits(o).argmax(dim=-1) == targets) & (targets != IGNORE) for o in outputs]
        for s in range(passes):
            valid = targets != IGNORE
            valid[:, :s] = False
            per_pass[s].append(hits[s][valid])
        # The chain from verified position i drafts rows i .. i + passes - 1 (pass s at row i + s).
        t = targets.shape[1]
        for i in range(t):
            if i + passes > t:
                break
            starts = targets[:, i] != IGNORE
            chains.append(chain_acceptance([hits[s][:, i + s] & starts for s in range(passes)])[starts])
    layer.train()
    return {"pass_accuracy": [round(float(torch.cat(p).float().mean()), 4) for p in per_pass],
            "mean_accepted_length": round(float(torch.cat(chains).mean()), 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="directory of stage-0 shards")
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--draft-vocab", type=int, default=8192)
    parser.add_argument("--passes", type=int, default=4, help="drafting steps unrolled per training step")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--clips-per-step", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--token-weight", type=float, default=0.5, help="weight of the token cross-entropy beside the feature loss")
    parser.add_argument("--init", choices=("last-block", "random"), default="last-block",
                        help="start the layer from Whisper's last decoder block, or from PyTorch's random initialisation")
    parser.add_argument("--feature-noise", type=float, default=0.2,
                        help="Gaussian noise on the input features in training, in units of their standard deviation (EAGLE's regulariser)")
    parser.add_argument("--feature-layers", default="0,2",
                        help="comma-separated Whisper decoder blocks whose outputs join the final-norm feature (EAGLE-3); empty: none")
    parser.add_argument("--kd-weight", type=float, default=1.0,
                        help="weight of the KL divergence from Whisper's distribution over the draft vocabulary (soft targets); 0: the greedy token only")
    parser.add_argument("--freeze-projection", action="store_true", help="keep the target's own output rows (no fine-tuning)")
    parser.add_argument("--val-shards", type=int, default=2)
    parser.add_argument("--save-every", type=int, default=50, help="steps between checkpoints")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.exp_dir.mkdir(parents=True, exist_ok=True)
    shards = sorted(args.data.glob("shard_*.safetensors"))
    if len(shards) <= args.val_shards:
        print(f"train_eagle.py: need more than {args.val_shards} shards in {args.data}, found {len(shards)}", file=sys.stderr)
        return 2
    feature_layers = tuple(int(x) for x in args.feature_layers.split(",") if x)
    if feature_layers:
        ensure_layer_states(args.data, args.model)
    asr = load_model(args.model)
    whisper = asr.whisper.model
    block = whisper.decoder.blocks[-1]
    embedding = whisper.decoder.token_embedding.weight.detach().float()
    started = time.perf_counter()
    train = Clips(shards[: -args.val_shards], block.cross_attn, feature_layers)
    val = Clips(shards[-args.val_shards :], block.cross_attn, feature_layers)
    print(f"{len(train)} training clips ({train.rows} positions), {len(val)} held out ({val.rows}); "
          f"loaded in {time.perf_counter() - started:.0f} s", flush=True)

    vocab_path = args.exp_dir / "eagle_draft_vocab.json"
    if vocab_path.is_file():  # fixed once: a resumed run keeps the same rows
        vocab = json.loads(vocab_path.read_text())
    else:
        counts = Counter(t for tokens in train.tokens for t in tokens[1:].tolist())
        common = [t for t, _ in counts.most_common(args.draft_vocab)]
        vocab = {"ids": sorted(common), "coverage": sum(counts[t] for t in common) / sum(counts.values())}
        vocab_path.write_text(json.dumps(vocab))
    draft_ids = torch.tensor(vocab["ids"])
    lookup = torch.full((embedding.shape[0],), IGNORE, dtype=torch.long)
    lookup[draft_ids] = torch.arange(len(draft_ids))
    teacher_rows = embedding[draft_ids]  # Whisper's (tied) output rows of the draft vocabulary
    feature_scale = float(torch.cat([f[:64].float() for f in train.features[:200]]).std())
    print(f"draft vocabulary: {len(draft_ids)} tokens covering {vocab['coverage']:.2%}; feature std {feature_scale:.2f}", flush=True)

    config = EagleConfig(hidden_size=embedding.shape[1], num_attention_heads=whisper.dims.n_text_head,
                         mlp_size=block.mlp[0].out_features, draft_vocab_size=len(draft_ids), target=args.model,
                         feature_layers=feature_layers)
    layer = EagleLayer(config, draft_ids)
    if args.init == "last-block":
        layer.init_from_block(block)
    if feature_layers:
        sample = train.blocks[:200]
        scales = [float(torch.cat([b[:64, i].float() for b in sample]).std()) for i in range(len(feature_layers))]
        layer.init_fuse(torch.tensor(scales + [feature_scale]))
    layer.init_projection(embedding)
    if args.freeze_projection:
        layer.projection.requires_grad_(False)
    parameters = [p for p in layer.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = math.ceil(len(train) / args.clips_per_step)
    total = steps_per_epoch * args.epochs
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    state = {"epoch": 0, "step_in_epoch": 0, "history": [], "seconds": 0.0}
    checkpoint = args.exp_dir / "eagle_checkpoint.pt"
    if checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=False)
        layer.load_state_dict(saved["layer"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        state = saved["state"]
        print(f"resumed at epoch {state['epoch']} step {state['step_in_epoch']}", flush=True)
    if not state["history"]:
        state["history"].append({"step": 0, "epoch": 0, **evaluate(layer, val, embedding, lookup, args.passes, feature_scale)})
        print(f"before training: {state['history'][-1]}", flush=True)

    def snapshot() -> dict:
        return {"layer": layer.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(), "state": state,
                "config": vars(args) | {"data": str(args.data), "exp_dir": str(args.exp_dir)}}

    layer.train()
    while state["epoch"] < args.epochs:
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed * 1000 + state["epoch"])).tolist()
        # Clips of similar length share a step (less padding): sort within groups of 8 steps' clips.
        group = 8 * args.clips_per_step
        order = [c for g in range(0, len(order), group) for c in sorted(order[g : g + group], key=lambda c: train.features[c].shape[0])]
        tic, totals = time.perf_counter(), []
        for step in range(state["step_in_epoch"], steps_per_epoch):
            clips = order[step * args.clips_per_step : (step + 1) * args.clips_per_step]
            batch = train.batch(clips, embedding, lookup)
            feature_losses, token_losses, _ = losses(layer, batch, args.passes, feature_scale, noise=args.feature_noise * feature_scale,
                                                     teacher_rows=teacher_rows, kd_weight=args.kd_weight)
            loss = sum(f + args.token_weight * t for f, t in zip(feature_losses, token_losses)) / args.passes
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            schedule.step()
            totals.append([float(x.detach()) for x in feature_losses + token_losses])
            state["step_in_epoch"] = step + 1
            if (step + 1) % args.save_every == 0:
                state["seconds"] += time.perf_counter() - tic
                tic = time.perf_counter()
                save_checkpoint(checkpoint, snapshot())
                mean = torch.tensor(totals[-args.save_every :]).mean(dim=0).tolist()
                print(f"  step {step + 1}/{steps_per_epoch}: feature {[round(x, 3) for x in mean[: args.passes]]} "
                      f"token {[round(x, 3) for x in mean[args.passes :]]} ({state['seconds']:.0f} s)", flush=True)
        state["seconds"] += time.perf_counter() - tic
        state["epoch"] += 1
        state["step_in_epoch"] = 0
        mean = torch.tensor(totals).mean(dim=0).tolist() if totals else []
        record = {"step": state["epoch"] * steps_per_epoch, "epoch": state["epoch"],
                  "train_feature_loss": [round(x, 4) for x in mean[: args.passes]], "train_token_loss": [round(x, 4) for x in mean[args.passes :]],
                  **evaluate(layer, val, embedding, lookup, args.passes, feature_scale)}
        state["history"].append(record)
        save_checkpoint(checkpoint, snapshot())
        print(f"epoch {state['epoch']}/{args.epochs} ({state['seconds']:.0f} s): {record}", flush=True)
    layer.eval()
    layer.save(args.exp_dir / "eagle.safetensors")
    (args.exp_dir / "eagle_history.json").write_text(json.dumps(
        {"history": state["history"], "train_seconds": state["seconds"], "train_rows": train.rows, "val_rows": val.rows,
         "train_clips": len(train), "val_clips": len(val), "draft_vocab_coverage": vocab["coverage"], "config": asdict(config),
         "passes": args.passes, "kd_weight": args.kd_weight}, indent=1))
    print(f"wrote {args.exp_dir / 'eagle.safetensors'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
