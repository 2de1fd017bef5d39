#!/usr/bin/env python
"""Stage 4 of the TTS recipe: MTP draft heads for a trained voice, by self-distillation.

The codec LM is frozen. Its final hidden states over every training clip (teacher-forced, float32,
as at inference) are computed once; head ``i`` reads the state at position ``t`` and the
embeddings of tokens ``t + 1 .. t + 1 + i`` and learns the LM's own distribution of token
``t + 2 + i`` (soft targets: the cross-entropy to the LM's probabilities, grammar mask included),
so its drafts are what the LM would sample and speculative sampling accepts them often. The heads
predict over the whole codec-LM vocabulary (a few thousand tokens, no reduced draft vocabulary
needed).

Validation reports, per head, the teacher-forced acceptance rate of speculative sampling at the
synthesis temperature, ``E[sum_x min(p_T(x), q_T(x))]`` (the chance the verifier keeps a token
drafted from ``q`` when the ones before it were kept), and the mean accepted length of a chain of
all heads that those rates imply.

A checkpoint (heads, optimiser, step, log) is written every ``--checkpoint-every`` steps; a rerun
resumes from it (the hidden states are recomputed, a few minutes). The batch of step ``s`` is the
same whether or not the run was interrupted. At the end the heads are written to ``--out`` (the
voice's ``<name>.mtp.safetensors``, which ``burble.tts.load`` picks up).

Usage::

    python recipes/tts/local/heads.py --voice burble/tts/weights/joe.safetensors \\
        --data-dir ~/.cache/burble/tts/data --exp-dir ~/.cache/burble/tts/heads --out burble/tts/weights/joe.mtp.safetensors
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from burble.decoding.mtp import MTPConfig, MTPHeads  # noqa: E402
from burble.tts.model import CodecLM, load_state  # noqa: E402
from data import Example, collate, load_examples  # noqa: E402


@dataclass
class Positions:
    """Every position of a split, flattened: the LM's state there and what the heads need.

    Attributes:
      hidden: ``(N, D)`` the LM's final hidden state at each position.
      tokens: ``(N,)`` the input token at each position.
      slots: ``(N,)`` the grammar slot of the token each position predicts.
      remaining: ``(N,)`` positions left in the clip after this one (a head reading ``t`` needs
        ``t + 1 + i`` in the same clip).
    """

    hidden: torch.Tensor
    tokens: torch.Tensor
    slots: torch.Tensor
    remaining: torch.Tensor

    def __len__(self) -> int:
        return self.tokens.shape[0]


@torch.inference_mode()
def lm_positions(model: CodecLM, examples: list[Example], batch_clips: int = 8) -> Positions:
    """The frozen LM's hidden states over whole clips (batched by similar length)."""
    order = sorted(range(len(examples)), key=lambda i: examples[i].inputs.shape[0])
    hidden: list[torch.Tensor] = [torch.empty(0)] * len(examples)
    for a in range(0, len(order), batch_clips):
        chosen = [examples[i] for i in order[a:a + batch_clips]]
        batch = collate(chosen)
        states = model.encode_units(batch["units"], batch["unit_padding"])
        positions = torch.arange(batch["tokens"].shape[1])
        h = model.decode(batch["tokens"], model.condition(states, batch["features"]), positions)
        for j, e in enumerate(chosen):
            hidden[order[a + j]] = h[j, : e.inputs.shape[0]].clone()
    remaining = [torch.arange(e.inputs.shape[0] - 1, -1, -1) for e in examples]
    return Positions(hidden=torch.cat(hidden), tokens=torch.cat([e.inputs for e in examples]),
                     slots=torch.cat([e.features[:, 1] for e in examples]), remaining=torch.cat(remaining))


def lm_log_probs(model: CodecLM, data: Positions, rows: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The LM's log-probabilities ``(n, V)`` of the token after each of ``rows`` (masked: ``-inf``)."""
    with torch.no_grad():
        return torch.log_softmax(model.logits(data.hidden[rows], data.slots[rows]) / temperature, dim=-1)


def head_inputs(model: CodecLM, data: Positions, rows: torch.Tensor, depth: int) -> torch.Tensor:
    """Embeddings ``(n, depth, D)`` of the tokens at ``rows + 1 .. rows + depth``."""
    with torch.no_grad():
        following = data.tokens[rows[:, None] + 1 + torch.arange(depth)]
        return model.token_embedding(following)


def distillation_loss(heads: MTPHeads, model: CodecLM, data: Positions, rows: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """Mean over heads of the cross-entropy from the LM's distribution to each head's.

    ``rows`` must leave every head a target in the same clip (``remaining >= num_heads``).
    """
    k = heads.config.num_heads
    logits = heads(data.hidden[rows], head_inputs(model, data, rows, k))  # (k, n, V)
    losses = []
    for i in range(k):
        target = lm_log_probs(model, data, rows + 1 + i).exp()
        log_q = torch.log_softmax(logits[i].float(), dim=-1)
        losses.append(-(target * log_q).sum(-1).mean())
    return torch.stack(losses).mean(), [float(x.detach()) for x in losses]


@torch.no_grad()
def acceptance(heads: MTPHeads, model: CodecLM, data: Positions, *, temperature: float, batch: int = 4096) -> list[float]:
    """Per head, the teacher-forced speculative-sampling acceptance ``E[sum min(p_T, q_T)]``."""
    k = heads.config.num_heads
    rows_all = torch.nonzero(data.remaining >= k).squeeze(1)
    totals = torch.zeros(k, dtype=torch.float64)
    for a in range(0, rows_all.shape[0], batch):
        rows = rows_all[a:a + batch]
        logits = heads(data.hidden[rows], head_inputs(model, data, rows, k))
        for i in range(k):
            p = lm_log_probs(model, data, rows + 1 + i, temperature).exp()
            q = torch.softmax(logits[i].float() / temperature, dim=-1)
            totals[i] += torch.minimum(p, q).sum(-1).double().sum()
    return (totals / max(1, rows_all.shape[0])).tolist()


def chain_length(rates: list[float]) -> float:
    """Mean tokens per verification pass of a chain of all heads (independent acceptances)."""
    total, kept = 1.0, 1.0
    for r in rates:
        kept *= r
        total += kept
    return total


RESULTS_HEADING = "## Draft heads (stage 4)"


def write_results(path: Path, mtp: MTPConfig, step: int, valid: dict, *, temperature: float, size_mb: float) -> None:
    """Replace (or append) the draft-heads section of the recipe's RESULTS.md."""
    rates = valid["acceptance"]
    section = "\n".join([
        RESULTS_HEADING, "",
        f"{mtp.num_heads} sequentially dependent MTP heads (inner width {mtp.inner_size}, the whole "
        f"{mtp.draft_vocab_size}-token vocabulary), {step} steps of self-distillation on the frozen voice; "
        f"{size_mb:.1f} MB (float16).", "",
        f"Teacher-forced acceptance of speculative sampling at temperature {temperature} on the validation "
        "sentences (`sum min(p, q)`, the chance the verifier keeps a drafted token):", "",
        "| head | drafts token | acceptance |", "|---|---|---|",
        *[f"| {i} | t + {i + 2} | {r:.3f} |" for i, r in enumerate(rates)], "",
        f"A chain of all heads would keep {valid['chain_length']:.2f} tokens per decoder pass if acceptances were "
        "independent; what decoding really gets, and the speedup: `python benchmarks/tts.py` (BENCHMARKS.md).", ""])
    text = path.read_text() if path.is_file() else ""
    if RESULTS_HEADING in text:
        head, _, rest = text.partition(RESULTS_HEADING)
        nxt = rest.find("\n## ")
        text = head + section + (rest[nxt + 1:] if nxt >= 0 else "")
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section
    path.write_text(text)


def learning_rate(step: int, *, peak: float, warmup: int, total: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--voice", required=True, type=Path, help="the voice file the heads draft for")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path, help="where the trained heads are written")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--inner-size", type=int, default=256,
                        help="width of each head's MLP (1024 drafts better but costs more per drafted token than it saves on 2 cores)")
    parser.add_argument("--batch", type=int, default=2048, help="positions per step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=0.5, help="sampling temperature the acceptance is measured at")
    parser.add_argument("--checkpoint-every", type=int, default=250)
    parser.add_argument("--validate-every", type=int, default=500)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    parser.add_argument("--results", type=Path, default=None, help="RESULTS.md whose draft-heads section is (re)written")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.exp_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = args.exp_dir / "checkpoint.pt"

    model, _, _ = load_state(str(args.voice))
    model.eval().requires_grad_(False)
    config = model.config
    state = torch.load(checkpoint, map_location="cpu", weights_only=False) if checkpoint.is_file() else None
    if state is not None:
        mtp = MTPConfig(**state["mtp_config"])
        print(f"resuming from step {state['step']}", flush=True)
    else:
        mtp = MTPConfig(hidden_size=config.width, num_heads=args.num_heads, inner_size=args.inner_size,
                        draft_vocab_size=config.vocab_size, target=f"codec-lm:{args.voice.name}")
    torch.manual_seed(0)
    heads = MTPHeads(mtp, torch.arange(config.vocab_size))
    heads.init_projection(model.output.weight)
    optimizer = torch.optim.AdamW([p for n, p in heads.named_parameters()], lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    step, log = 0, []
    if state is not None:
        heads.load_state_dict(state["heads"])
        optimizer.load_state_dict(state["optimizer"])
        step, log = state["step"], state["log"]

    if step < args.steps:  # a finished run goes straight to the export
        started = time.perf_counter()
        train = lm_positions(model, load_examples(args.data_dir, "train", config))
        valid = lm_positions(model, load_examples(args.data_dir, "valid", config))
        print(f"hidden states of {len(train)} training and {len(valid)} validation positions in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        usable = torch.nonzero(train.remaining >= mtp.num_heads).squeeze(1)

    def save() -> None:
        tmp = checkpoint.with_suffix(".tmp")
        torch.save({"mtp_config": mtp.__dict__, "heads": heads.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step, "log": log, "voice": args.voice.name}, tmp)
        os.replace(tmp, checkpoint)

    def validate() -> dict:
        heads.eval()
        rates = acceptance(heads, model, valid, temperature=args.temperature)
        heads.train()
        return {"acceptance": rates, "chain_length": chain_length(rates)}

    if step == 0 and step < args.steps:
        log.append({"step": 0, "valid": validate()})
        print(f"step 0: acceptance {[round(r, 3) for r in log[-1]['valid']['acceptance']]}", flush=True)
    heads.train()
    clock = time.perf_counter()
    while step < args.steps:
        rng = np.random.default_rng([1, step])
        rows = usable[torch.from_numpy(rng.integers(0, usable.shape[0], args.batch))]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, peak=args.lr, warmup=args.warmup, total=args.steps)
        loss, per_head = distillation_loss(heads, model, train, rows)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(heads.parameters(), 1.0)
        optimizer.step()
        step += 1
        entry: dict = {"step": step, "loss": loss.item(), "per_head": per_head}
        if step % args.validate_every == 0 or step == args.steps:
            entry["valid"] = validate()
        log.append(entry)
        if step % 50 == 0 or "valid" in entry:
            extra = ""
            if "valid" in entry:
                v = entry["valid"]
                extra = f" acceptance {[round(r, 3) for r in v['acceptance']]} chain {v['chain_length']:.2f}"
            print(f"step {step}/{args.steps} loss {entry['loss']:.3f} "
                  f"{(time.perf_counter() - clock) / 50:.2f} s/step{extra}", flush=True)
            clock = time.perf_counter()
        if step % args.checkpoint_every == 0 or step == args.steps:
            save()

    heads.eval()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    heads.save(args.out)
    last = next((e["valid"] for e in reversed(log) if "valid" in e), None)
    (args.exp_dir / "summary.json").write_text(json.dumps({"step": step, "valid": last, "config": mtp.__dict__}, indent=1))
    if args.results is not None and last is not None:
        write_results(args.results, mtp, step, last, temperature=args.temperature, size_mb=args.out.stat().st_size / 1e6)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB; validation acceptance at T={args.temperature}: "
          f"{[round(r, 3) for r in last['acceptance']] if last else '-'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
