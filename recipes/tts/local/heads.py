#!/usr/bin/env python
"""Stage 4b of the TTS recipe: MTP draft heads for a trained voice, by self-distillation.

The codec LM is frozen. Its final hidden states over every training clip (teacher-forced, float32,
as at inference) are computed once; head ``i`` reads the state at position ``t`` and the
embeddings of tokens ``t + 1 .. t + 1 + i`` and learns the LM's own choice of token ``t + 2 + i``
among the tokens the grammar allows there. What the heads learn is set by what decoding keeps:

* greedy decoding (burble's default, ``--target-temperature 0``) keeps a drafted token only if it
  is the LM's argmax, so the heads learn the argmax (cross-entropy to it), from the voice's own
  greedy streams (``--streams-dir``, from ``greedy_streams.py``): the contexts greedy decoding
  really meets, not Piper's codes;
* speculative sampling keeps a token drafted from ``q`` with probability ``sum min(p, q)``, so
  for sampling the heads learn the LM's distribution at a temperature (``--target-temperature T``,
  soft targets), e.g. over Piper's teacher-forced clips (``--data-dir``).

The heads predict over the whole codec-LM vocabulary (a few thousand tokens, no reduced draft
vocabulary needed). Validation reports, per head, the teacher-forced acceptance at the decoding
``--temperature`` (0: how often the head's argmax is the LM's; else ``E[sum min(p_T, q_T)]``),
and the mean accepted length of a chain of all heads that those rates imply.

A checkpoint (heads, optimiser, step, log) is written every ``--checkpoint-every`` steps; a rerun
resumes from it (the hidden states are recomputed, a few minutes). The batch of step ``s`` is the
same whether or not the run was interrupted. At the end the heads are written to ``--out`` (the
voice's ``<name>.mtp.safetensors``, which ``burble.tts.load`` picks up).

Usage::

    python recipes/tts/local/heads.py --voice burble/tts/weights/joe.safetensors \\
        --streams-dir ~/.cache/burble/tts/streams --exp-dir ~/.cache/burble/tts/heads \\
        --out burble/tts/weights/joe.mtp.safetensors
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
from data import Example, collate, load_examples, load_streams  # noqa: E402


@dataclass
class Positions:
    """Every position of a split, flattened: the LM's state there and what the heads need.

    Attributes:
      hidden: ``(N, D)`` the LM's final hidden state at each position.
      inputs: ``(N, D)`` the LM's decoder input at each position (token embedding plus conditioning).
      tokens: ``(N,)`` the input token at each position.
      slots: ``(N,)`` the grammar slot of the token each position predicts.
      remaining: ``(N,)`` positions left in the clip after this one (a head reading ``t`` needs
        ``t + 1 + i`` in the same clip).
    """

    hidden: torch.Tensor
    inputs: torch.Tensor
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
    inputs: list[torch.Tensor] = [torch.empty(0)] * len(examples)
    for a in range(0, len(order), batch_clips):
        chosen = [examples[i] for i in order[a:a + batch_clips]]
        batch = collate(chosen)
        states = model.encode_units(batch["units"], batch["unit_padding"])
        positions = torch.arange(batch["tokens"].shape[1])
        conditioning = model.condition(states, batch["features"])
        h = model.decode(batch["tokens"], conditioning, positions)
        x = model.token_embedding(batch["tokens"]) + conditioning  # what decode() adds up first
        for j, e in enumerate(chosen):
            hidden[order[a + j]] = h[j, : e.inputs.shape[0]].clone()
            inputs[order[a + j]] = x[j, : e.inputs.shape[0]].clone()
    remaining = [torch.arange(e.inputs.shape[0] - 1, -1, -1) for e in examples]
    return Positions(hidden=torch.cat(hidden), inputs=torch.cat(inputs), tokens=torch.cat([e.inputs for e in examples]),
                     slots=torch.cat([e.features[:, 1] for e in examples]), remaining=torch.cat(remaining))


def lm_log_probs(model: CodecLM, data: Positions, rows: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The LM's log-probabilities ``(n, V)`` of the token after each of ``rows`` (masked: ``-inf``)."""
    with torch.no_grad():
        return torch.log_softmax(model.logits(data.hidden[rows], data.slots[rows]) / temperature, dim=-1)


def head_inputs(model: CodecLM, data: Positions, rows: torch.Tensor, depth: int, decoder_inputs: bool) -> torch.Tensor:
    """What the heads read ``(n, depth, D)`` of the tokens at ``rows + 1 .. rows + depth``: their
    embeddings, or with ``decoder_inputs`` the LM's decoder inputs there (``MTPConfig.decoder_inputs``)."""
    following = rows[:, None] + 1 + torch.arange(depth)
    if decoder_inputs:
        return data.inputs[following]
    with torch.no_grad():
        return model.token_embedding(data.tokens[following])


def head_log_probs(model: CodecLM, data: Positions, logits: torch.Tensor, rows: torch.Tensor, temperature: float) -> torch.Tensor:
    """A head's log-probabilities over the tokens the grammar allows at ``rows`` (as drafting
    scores them: only the slot's codebook), at ``temperature`` (0: 1)."""
    masked = logits.float() / (temperature or 1.0) + model.slot_mask[data.slots[rows]]
    return torch.log_softmax(masked, dim=-1)


def distillation_loss(heads: MTPHeads, model: CodecLM, data: Positions, rows: torch.Tensor, *,
                      target_temperature: float = 1.0) -> tuple[torch.Tensor, list[float]]:
    """Mean over heads of the cross-entropy from the LM's distribution to each head's.

    ``target_temperature`` 0 trains each head on the LM's argmax (what greedy verification keeps);
    otherwise on the LM's distribution at that temperature. ``rows`` must leave every head a
    target in the same clip (``remaining >= num_heads``).
    """
    k = heads.config.num_heads
    logits = heads(data.hidden[rows], head_inputs(model, data, rows, k, heads.config.decoder_inputs))  # (k, n, V)
    losses = []
    for i in range(k):
        log_q = head_log_probs(model, data, logits[i], rows + 1 + i, 1.0)
        if target_temperature == 0:
            with torch.no_grad():
                best = model.logits(data.hidden[rows + 1 + i], data.slots[rows + 1 + i]).argmax(-1)
            losses.append(F.nll_loss(log_q, best))
        else:
            target = lm_log_probs(model, data, rows + 1 + i, target_temperature).exp()
            losses.append(-(target * log_q.clamp(min=-1e4)).sum(-1).mean())
    return torch.stack(losses).mean(), [float(x.detach()) for x in losses]


@torch.no_grad()
def acceptance(heads: MTPHeads, model: CodecLM, data: Positions, *, temperature: float, batch: int = 4096) -> list[float]:
    """Per head, the teacher-forced speculative acceptance: ``E[sum min(p_T, q_T)]`` when sampling,
    at temperature 0 how often the head's argmax is the LM's (what greedy verification keeps)."""
    k = heads.config.num_heads
    rows_all = torch.nonzero(data.remaining >= k).squeeze(1)
    totals = torch.zeros(k, dtype=torch.float64)
    for a in range(0, rows_all.shape[0], batch):
        rows = rows_all[a:a + batch]
        logits = heads(data.hidden[rows], head_inputs(model, data, rows, k, heads.config.decoder_inputs))
        for i in range(k):
            q = head_log_probs(model, data, logits[i], rows + 1 + i, temperature)
            if temperature == 0:
                best = model.logits(data.hidden[rows + 1 + i], data.slots[rows + 1 + i]).argmax(-1)
                totals[i] += (q.argmax(-1) == best).double().sum()
            else:
                p = lm_log_probs(model, data, rows + 1 + i, temperature).exp()
                totals[i] += torch.minimum(p, q.exp()).sum(-1).double().sum()
    return (totals / max(1, rows_all.shape[0])).tolist()


def chain_length(rates: list[float]) -> float:
    """Mean tokens per verification pass of a chain of all heads (independent acceptances)."""
    total, kept = 1.0, 1.0
    for r in rates:
        kept *= r
        total += kept
    return total


RESULTS_HEADING = "## Draft heads (stage 4)"


def write_results(path: Path, mtp: MTPConfig, step: int, valid: dict, *, temperature: float, size_mb: float,
                  source: str) -> None:
    """Replace (or append) the draft-heads section of the recipe's RESULTS.md."""
    rates = valid["acceptance"]
    measure = ("greedy decoding (how often a head's argmax is the LM's, the chance the verifier keeps a "
               "drafted token)" if temperature == 0 else
               f"speculative sampling at temperature {temperature} (`sum min(p, q)`, the chance the verifier "
               "keeps a drafted token)")
    section = "\n".join([
        RESULTS_HEADING, "",
        f"{mtp.num_heads} sequentially dependent MTP heads (inner width {mtp.inner_size}, the whole "
        f"{mtp.draft_vocab_size}-token vocabulary), {step} steps of self-distillation on the frozen voice "
        f"({source}); {size_mb:.1f} MB (float16).", "",
        f"Teacher-forced acceptance of {measure} on the validation sentences:", "",
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
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data-dir", type=Path, help="prepare.py's shards: Piper's codes, teacher-forced")
    source.add_argument("--streams-dir", type=Path, help="greedy_streams.py's shards: the voice's own greedy streams")
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path, help="where the trained heads are written")
    parser.add_argument("--steps", type=int, default=12000)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--inner-size", type=int, default=256,
                        help="width of each head's MLP (1024 drafts better but costs more per drafted token than it saves on 2 cores)")
    parser.add_argument("--decoder-inputs", action=argparse.BooleanOptionalAction, default=True,
                        help="heads read the LM's decoder inputs (token embedding plus the phoneme, slot and frame "
                             "conditioning) of the tokens before their own, not bare token embeddings")
    parser.add_argument("--batch", type=int, default=2048, help="positions per step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="decoding temperature the acceptance is measured at (0: greedy, burble's default)")
    parser.add_argument("--target-temperature", type=float, default=0.0,
                        help="the LM distribution the heads learn: at this temperature, 0 its argmax")
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
                        draft_vocab_size=config.vocab_size, target=f"codec-lm:{args.voice.name}",
                        decoder_inputs=args.decoder_inputs)
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
        load = (lambda split: load_examples(args.data_dir, split, config)) if args.data_dir else \
            (lambda split: load_streams(args.streams_dir, split, config))
        train = lm_positions(model, load("train"))
        valid = lm_positions(model, load("valid"))
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
        loss, per_head = distillation_loss(heads, model, train, rows, target_temperature=args.target_temperature)
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
        source = ("the LM's argmax over its own greedy streams" if args.streams_dir and args.target_temperature == 0
                  else f"its distribution at T={args.target_temperature} over "
                  + ("its own greedy streams" if args.streams_dir else "Piper's clips"))
        write_results(args.results, mtp, step, last, temperature=args.temperature, size_mb=args.out.stat().st_size / 1e6,
                      source=source)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB; validation acceptance at T={args.temperature}: "
          f"{[round(r, 3) for r in last['acceptance']] if last else '-'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
