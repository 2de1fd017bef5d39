#!/usr/bin/env python
"""Stage 1-2 of the MTP-heads recipe: the draft vocabulary, then training the heads (Whisper frozen).

Rows come from the shards of stage 0: the target's hidden state at position ``t`` and the tokens
``t + 1 ..`` of Whisper's own greedy transcript. Head ``i`` reads the state and the embeddings of
tokens ``t + 1 .. t + 1 + i`` (teacher forcing: under greedy verification a head only ever drafts
after an accepted prefix, which is exactly the truth) and learns token ``t + 2 + i`` by cross
entropy over the draft vocabulary. The last ``--val-shards`` shards are held out: their chain
acceptance (consecutive correct heads at each position, what one verification pass accepts) is
measured after every epoch.

Resumable: ``<exp>/checkpoint.pt`` holds the heads, the optimiser, the epoch, the position in the
epoch's (seeded) order and the history; it is rewritten atomically every ``--save-every`` steps.

Usage::

    python recipes/mtp_heads/local/train.py --data exp/data --exp-dir exp --epochs 12
"""

from __future__ import annotations

import argparse
import json
import math
import os
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
from burble.decoding.mtp import MTPConfig, MTPHeads  # noqa: E402

IGNORE = -100


class Rows:
    """Training rows of many clips, kept in clip order.

    Attributes:
      hidden: ``(N, D)`` fp16 target states.
      following: ``(N, span)`` token ids after each state (``-1`` past the end of its clip).
      offsets: ``(C + 1,)`` first row of each clip.
      audio: per clip ``(S, D)`` fp16 encoder states, or ``None`` when the shards have none.
    """

    def __init__(self, hidden: torch.Tensor, following: torch.Tensor, offsets: torch.Tensor, audio: list[torch.Tensor] | None) -> None:
        self.hidden, self.following, self.offsets, self.audio = hidden, following, offsets, audio

    @property
    def clips(self) -> int:
        return len(self.offsets) - 1

    def select(self, clips: list[int]) -> tuple[torch.Tensor, list[int]]:
        """Row indices of ``clips`` (in that order) and each clip's row count."""
        ranges = [torch.arange(int(self.offsets[c]), int(self.offsets[c + 1])) for c in clips]
        return torch.cat(ranges), [len(r) for r in ranges]


def read_shards(paths: list[Path], span: int, with_audio: bool = False) -> Rows:
    """The rows of every clip in ``paths``; ``following[r]`` holds the ``span`` tokens after row ``r``."""
    hidden, following, counts, audio = [], [], [], []
    for path in paths:
        with safe_open(str(path), framework="pt") as f:
            names = set(f.keys())
            clips = sorted({k.split(".")[0] for k in names}, key=int)
            for c in clips:
                if with_audio and f"{c}.audio" not in names:
                    raise ValueError(f"{path}: no encoder states ({c}.audio); remake the data with this recipe's stage 0")
                tokens = f.get_tensor(f"{c}.tokens").long()
                states = f.get_tensor(f"{c}.hidden")
                rows = states.shape[0]
                padded = torch.cat([tokens, torch.full((span,), -1, dtype=torch.long)])
                index = torch.arange(rows)[:, None] + 1 + torch.arange(span)[None]
                hidden.append(states)
                following.append(padded[index])
                counts.append(rows)
                if with_audio:
                    audio.append(f.get_tensor(f"{c}.audio"))
    offsets = torch.cumsum(torch.tensor([0] + counts), dim=0)
    return Rows(torch.cat(hidden), torch.cat(following), offsets, audio if with_audio else None)


def audio_memory(rows: Rows, whisper_model) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Per clip the last decoder layer's cross-attention keys/values ``(C, H, S, d)`` fp16
    (what the heads read at inference, where the target has computed them anyway)."""
    if rows.audio is None:
        return None
    block = whisper_model.decoder.blocks[-1].cross_attn
    keys, values = [], []
    with torch.no_grad():
        for features in rows.audio:
            k, v = block.project_kv(features.float()[None])
            keys.append(k[0].half())
            values.append(v[0].half())
    return torch.stack(keys), torch.stack(values)


def draft_vocabulary(following: torch.Tensor, size: int) -> tuple[torch.Tensor, float]:
    """The ``size`` most frequent transcript tokens and the share of tokens they cover."""
    counts = Counter(following[:, 0][following[:, 0] >= 0].tolist())
    common = [t for t, _ in counts.most_common(size)]
    covered = sum(counts[t] for t in common) / max(1, sum(counts.values()))
    if len(common) < size:  # a tiny corpus: pad with unused ids so the shape stays fixed
        used = set(common)
        common += [t for t in range(size * 2) if t not in used][: size - len(common)]
    return torch.tensor(common), covered


def targets_and_inputs(following: torch.Tensor, lookup: torch.Tensor, num_heads: int, pad_token: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft-vocabulary targets ``(N, H)`` (``IGNORE`` past the end or outside) and input ids ``(N, H)``."""
    inputs = following[:, :num_heads].clone()
    inputs[inputs < 0] = pad_token
    future = following[:, 1 : num_heads + 1]
    targets = torch.full_like(future, IGNORE)
    valid = future >= 0
    targets[valid] = lookup[future[valid]]
    return targets, inputs


@torch.no_grad()
def evaluate(heads: MTPHeads, embedding: torch.Tensor, rows: Rows, targets: torch.Tensor, inputs: torch.Tensor,
             memory: tuple[torch.Tensor, torch.Tensor] | None) -> dict:
    """Per-head top-1 accuracy and chain acceptance (mean accepted tokens per pass, bonus included)."""
    heads.eval()
    correct_rows, target_rows = [], []
    for lo in range(0, rows.clips, 32):
        clips = list(range(lo, min(lo + 32, rows.clips)))
        index, segments = rows.select(clips)
        batch_memory = None if memory is None else (memory[0][clips].float(), memory[1][clips].float())
        logits = heads(rows.hidden[index].float(), embedding[inputs[index]], batch_memory, segments)
        pred = logits.argmax(dim=-1).T  # (n, H)
        t = targets[index]
        correct_rows.append((pred == t) & (t != IGNORE))
        target_rows.append(t)
    correct, targets = torch.cat(correct_rows), torch.cat(target_rows)
    valid = targets != IGNORE
    # Positions whose first target exists: a chain there accepts its run of correct heads.
    first = valid[:, 0]
    run = torch.cumprod(correct[first].int(), dim=1).sum(dim=1).float()
    heads.train()
    return {
        "head_accuracy": [round(float(correct[:, i].sum() / valid[:, i].sum().clamp(min=1)), 4) for i in range(correct.shape[1])],
        "mean_accepted_length": round(1.0 + float(run.mean()), 4),
    }


def init_memory_queries(heads: MTPHeads, whisper_model) -> None:
    """Start each head's audio query as Whisper's last cross-attention query applied to ``h``, so
    the heads first look where the target looked (the word being decoded) and learn to look ahead."""
    query = whisper_model.decoder.blocks[-1].cross_attn.query
    dim = query.weight.shape[1]
    if heads.config.memory_heads != whisper_model.dims.n_text_head:
        return  # another head layout: keep the random start
    with torch.no_grad():
        for head in heads.heads:
            head.query.weight.zero_()
            head.query.weight[:, :dim] = query.weight.float()
            head.query.bias.copy_(query.bias.float())


def save_checkpoint(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, type=Path, help="directory of stage-0 shards")
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--inner-size", type=int, default=1024)
    parser.add_argument("--memory-heads", type=int, default=6, help="cross-attention heads over the audio (0: text-only heads)")
    parser.add_argument("--draft-vocab", type=int, default=4096)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=512, help="rows per step (whole clips: about this many)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--val-shards", type=int, default=2)
    parser.add_argument("--save-every", type=int, default=200, help="steps between checkpoints")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores; 1 on a busy machine, where spinning threads thrash)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.exp_dir.mkdir(parents=True, exist_ok=True)
    shards = sorted(args.data.glob("shard_*.safetensors"))
    if len(shards) <= args.val_shards:
        print(f"train.py: need more than {args.val_shards} shards in {args.data}, found {len(shards)}", file=sys.stderr)
        return 2
    train_shards, val_shards = shards[: -args.val_shards], shards[-args.val_shards :]
    span = args.num_heads + 1
    train_rows = read_shards(train_shards, span, with_audio=args.memory_heads > 0)
    val_rows = read_shards(val_shards, span, with_audio=args.memory_heads > 0)
    train_following = train_rows.following

    asr = load_model(args.model)
    embedding = asr.whisper.model.decoder.token_embedding.weight.detach().float()
    eot = asr.whisper.tokenizer.eot
    vocab_path = args.exp_dir / "draft_vocab.json"
    if vocab_path.is_file():  # fixed once: a resumed run must keep the same rows
        vocab = json.loads(vocab_path.read_text())
        draft_ids, coverage = torch.tensor(vocab["ids"]), vocab["coverage"]
    else:
        draft_ids, coverage = draft_vocabulary(train_following, args.draft_vocab)
        vocab_path.write_text(json.dumps({"ids": draft_ids.tolist(), "coverage": coverage}))
    train_memory = audio_memory(train_rows, asr.whisper.model)
    val_memory = audio_memory(val_rows, asr.whisper.model)
    print(f"rows: {train_rows.hidden.shape[0]} train ({len(train_shards)} shards), {val_rows.hidden.shape[0]} held out; "
          f"draft vocabulary {len(draft_ids)} tokens covers {coverage:.2%} of transcript tokens", flush=True)
    lookup = torch.full((embedding.shape[0],), IGNORE, dtype=torch.long)
    lookup[draft_ids] = torch.arange(len(draft_ids))
    train_targets, train_inputs = targets_and_inputs(train_following, lookup, args.num_heads, eot)
    val_targets, val_inputs = targets_and_inputs(val_rows.following, lookup, args.num_heads, eot)

    config = MTPConfig(hidden_size=embedding.shape[1], num_heads=args.num_heads, inner_size=args.inner_size,
                       draft_vocab_size=len(draft_ids), target=args.model, memory_heads=args.memory_heads)
    heads = MTPHeads(config, draft_ids)
    heads.init_projection(embedding)
    if args.memory_heads:
        init_memory_queries(heads, asr.whisper.model)
    optimizer = torch.optim.AdamW(heads.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    rows_per_clip = train_rows.hidden.shape[0] / train_rows.clips
    clips_per_step = max(1, round(args.batch_size / rows_per_clip))
    steps_per_epoch = math.ceil(train_rows.clips / clips_per_step)
    total_steps = steps_per_epoch * args.epochs
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps))
    )
    state = {"epoch": 0, "step_in_epoch": 0, "history": [], "seconds": 0.0}
    checkpoint = args.exp_dir / "checkpoint.pt"
    if checkpoint.is_file():
        saved = torch.load(checkpoint, weights_only=False)
        heads.load_state_dict(saved["heads"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        state = saved["state"]
        print(f"resumed at epoch {state['epoch']} step {state['step_in_epoch']}", flush=True)
    if not state["history"]:
        state["history"].append({"step": 0, "epoch": 0, **evaluate(heads, embedding, val_rows, val_targets, val_inputs, val_memory)})
        print(f"before training: {state['history'][-1]}", flush=True)

    def snapshot() -> dict:
        return {"heads": heads.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                "state": state, "config": vars(args) | {"data": str(args.data), "exp_dir": str(args.exp_dir)}}

    heads.train()
    weights = torch.ones(args.num_heads)
    while state["epoch"] < args.epochs:
        order = torch.randperm(train_rows.clips, generator=torch.Generator().manual_seed(args.seed * 1000 + state["epoch"])).tolist()
        started, losses = time.perf_counter(), []
        for step in range(state["step_in_epoch"], steps_per_epoch):
            clips = order[step * clips_per_step : (step + 1) * clips_per_step]
            batch, segments = train_rows.select(clips)
            memory = None if train_memory is None else (train_memory[0][clips].float(), train_memory[1][clips].float())
            logits = heads(train_rows.hidden[batch].float(), embedding[train_inputs[batch]], memory, segments)
            targets = train_targets[batch].T  # (H, n)
            loss_per_head = torch.stack([
                torch.nn.functional.cross_entropy(logits[i], targets[i], ignore_index=IGNORE) for i in range(args.num_heads)
            ])
            loss = (weights * torch.nan_to_num(loss_per_head)).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(float(loss.detach()))
            state["step_in_epoch"] = step + 1
            if (step + 1) % args.save_every == 0:
                state["seconds"] += time.perf_counter() - started
                started = time.perf_counter()
                save_checkpoint(checkpoint, snapshot())
        state["seconds"] += time.perf_counter() - started
        state["epoch"] += 1
        state["step_in_epoch"] = 0
        record = {"step": state["epoch"] * steps_per_epoch, "epoch": state["epoch"],
                  "train_loss": round(sum(losses) / max(1, len(losses)), 4),
                  **evaluate(heads, embedding, val_rows, val_targets, val_inputs, val_memory)}
        state["history"].append(record)
        save_checkpoint(checkpoint, snapshot())
        print(f"epoch {state['epoch']}/{args.epochs} ({state['seconds']:.0f} s): {record}", flush=True)
    heads.eval()
    heads.save(args.exp_dir / "heads.safetensors")
    (args.exp_dir / "history.json").write_text(json.dumps({"history": state["history"], "train_seconds": state["seconds"],
                                                           "train_rows": int(train_rows.hidden.shape[0]), "val_rows": int(val_rows.hidden.shape[0]),
                                                           "train_shards": len(train_shards), "val_shards": len(val_shards),
                                                           "draft_vocab_coverage": coverage, "config": asdict(config)}, indent=1, default=str))
    print(f"wrote {args.exp_dir / 'heads.safetensors'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
