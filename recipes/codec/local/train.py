#!/usr/bin/env python
"""Stage 1 of the codec recipe: train the mel codec by plain regression (no GAN).

The model is ``burble.codecs.model.MelCodec``. Every step takes ``batch_size`` random windows of
``segment`` mel frames from the training shards (the windows of step ``s`` are drawn from a
generator seeded with ``s``, so a resumed run sees exactly the data it would have seen). Loss:
L1 + L2 on the normalised log-mel, L1 on its frame-to-frame differences (delta-mel: keeps onsets
sharp), and the VQ commitment loss. Quantiser dropout: a row is coded with a uniform 1..n books
with probability ``dropout``, with one of ``--favoured-books`` (the bitrates the codec is used at)
with probability ``--favoured-share``, else with all of them, so every prefix of books decodes.

``--init-from`` starts from another run's checkpoint (its weights and VQ statistics; a fresh
optimiser, schedule and step count): a fine-tune. If this run's ``--codebook-size`` is a multiple
of the checkpoint's, every code is split into copies a small step apart (LBG splitting), so the
grown books start as the trained ones and the EMA updates pull the copies apart.

A checkpoint (model with its VQ statistics, optimiser, step) is written every ``save_every``
steps and at the end; a rerun resumes from it. ``train.log`` gets one JSON line per logged step,
with held-out mel L1 at 1/2/4/8 books every ``eval_every`` steps.

Usage::

    python recipes/codec/local/train.py --data-dir exp/data --exp-dir exp/train --steps 6000
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

from burble.codecs.model import CodecConfig, MelCodec  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from codec_training import RunningLog, evaluate, load_mels, optimise, reconstruction_losses, warmup_cosine  # noqa: E402


def sample_batch(mels: list[torch.Tensor], lengths: torch.Tensor, step: int, batch_size: int, segment: int,
                 hop: int) -> torch.Tensor:
    """``batch_size`` windows of ``segment`` frames (clips drawn by length; shorter ones are repeated)."""
    g = torch.Generator().manual_seed(step)
    picks = torch.multinomial(lengths.float(), batch_size, replacement=True, generator=g)
    out = []
    for i in picks.tolist():
        mel = mels[i]
        while mel.shape[1] < segment:
            mel = torch.cat([mel, mels[i]], dim=1)
        start = int(torch.randint(0, (mel.shape[1] - segment) // hop + 1, (1,), generator=g)) * hop
        out.append(mel[:, start:start + segment])
    return torch.stack(out)


def book_counts(step: int, batch_size: int, num_books: int, *, dropout: float, favoured: list[int],
                favoured_share: float) -> torch.Tensor:
    """How many books each row of step ``step``'s batch is coded with (quantiser dropout).

    A row gets a uniform 1..``num_books`` with probability ``dropout``, one of ``favoured`` (the
    bitrates the codec is meant for) with probability ``favoured_share``, else all the books. The
    draws come from a generator seeded with the step, so a resumed run draws the same counts.
    """
    g = torch.Generator().manual_seed(10_000_000 + step)
    draw = torch.rand(batch_size, generator=g)
    books = torch.where(draw < dropout, torch.randint(1, num_books + 1, (batch_size,), generator=g),
                        torch.full((batch_size,), num_books))
    if favoured and favoured_share > 0:  # the top share of the draws: a favoured count
        pick = torch.tensor(favoured)[torch.randint(0, len(favoured), (batch_size,), generator=g)]
        books = torch.where(draw >= 1 - favoured_share, pick, books)
    return books


@torch.no_grad()
def start_from(model: MelCodec, checkpoint: Path) -> None:
    """Load ``checkpoint``'s codec into ``model``, splitting its codes if ``model``'s books are larger.

    A code ``c`` of ``k`` becomes codes ``c, c + k, c + 2k, ...``; each copy gets an equal share
    of the code's usage and a random offset of 1% of its book's spread, so nearest-code search
    divides the old cell between them and the EMA moves them apart.
    """
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]
    embed, usage = state["quantizer.embed"], state["quantizer.usage"]
    size = model.config.codebook_size
    if size % embed.shape[1] or embed.shape[0] != model.config.num_books:
        raise SystemExit(f"{checkpoint}: {embed.shape[0]} books of {embed.shape[1]} cannot grow into "
                         f"{model.config.num_books} of {size}")
    copies = size // embed.shape[1]
    if copies > 1:
        g = torch.Generator().manual_seed(0)
        spread = embed.std(dim=1, keepdim=True)
        grown = embed.repeat(1, copies, 1)
        grown[:, embed.shape[1]:] += 0.01 * spread * torch.randn(grown[:, embed.shape[1]:].shape, generator=g)
        state["quantizer.usage"] = usage.repeat(1, copies) / copies
        state["quantizer.embed"] = grown
        state["quantizer.embed_sum"] = grown * state["quantizer.usage"][..., None]
    model.load_state_dict(state)


def losses(model: MelCodec, mel: torch.Tensor, books) -> dict[str, torch.Tensor]:
    out = model(mel, books)
    return {**reconstruction_losses(out.mel, mel, model.mel_std), "commit": out.commitment}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--clips", type=int, default=1200,
                        help="train on the first N training clips (the shipped codec: 1200; stage 3 uses them all)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--segment", type=int, default=256, help="mel frames per training window (~3 s)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--dropout", type=float, default=0.6, help="probability of a random 1..n books per row")
    parser.add_argument("--commit-weight", type=float, default=0.25)
    parser.add_argument("--num-books", type=int, default=8)
    parser.add_argument("--codebook-size", type=int, default=1024)
    parser.add_argument("--down-stages", type=int, default=2, help="2: 21.5 Hz code frames, 1: 43 Hz")
    parser.add_argument("--channels", default="",
                        help="conv widths per rate, finest first (default 128,192,256 cut to --down-stages + 1)")
    parser.add_argument("--decoder-units", type=int, default=2, help="residual units per decoder rate")
    parser.add_argument("--favoured-books", default="",
                        help="book counts trained most (e.g. 4,2: the codec's default and the TTS model's)")
    parser.add_argument("--favoured-share", type=float, default=0.0,
                        help="share of rows coded with one of --favoured-books (with --dropout: at most 1)")
    parser.add_argument("--init-from", type=Path, default=None,
                        help="start from this run's checkpoint.pt (a fine-tune; its codes split if --codebook-size is larger)")
    parser.add_argument("--save-every", type=int, default=250)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.exp_dir.mkdir(parents=True, exist_ok=True)
    train = load_mels(args.data_dir, "train")[: args.clips]
    heldout = load_mels(args.data_dir, "heldout")[:20]
    lengths = torch.tensor([m.shape[1] for m in train])
    if args.channels:
        channels = tuple(int(c) for c in args.channels.split(","))
    else:
        channels = (128, 192, 256, 256)[: args.down_stages + 1]
    if args.favoured_share + args.dropout > 1:
        parser.error("--favoured-share + --dropout must be at most 1")
    config = CodecConfig(down_stages=args.down_stages, channels=channels, num_books=args.num_books,
                         codebook_size=args.codebook_size, decoder_units=args.decoder_units)
    torch.manual_seed(0)
    model = MelCodec(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.8, 0.99), weight_decay=1e-4)
    schedule = warmup_cosine(optimizer, warmup=args.warmup, steps=args.steps)
    checkpoint = args.exp_dir / "checkpoint.pt"
    step = 0
    if checkpoint.is_file():
        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        step = state["step"]
        print(f"resumed at step {step}", flush=True)
    elif args.init_from is not None:
        start_from(model, args.init_from)
        print(f"started from {args.init_from}", flush=True)
        (args.exp_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=1))
    else:
        all_frames = torch.cat(train, dim=1)
        model.mel_mean.copy_(all_frames.mean(1, keepdim=True))
        model.mel_std.copy_(all_frames.std(1, keepdim=True).clamp_min(0.1))
        (args.exp_dir / "config.json").write_text(json.dumps(config.to_dict(), indent=1))
    print(f"{len(train)} training clips ({int(lengths.sum()) * 256 / 22050 / 3600:.2f} h), "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {config.frame_rate:.2f} Hz code frames",
          flush=True)

    def save() -> None:
        tmp = checkpoint.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "schedule": schedule.state_dict(), "step": step, "config": config.to_dict()}, tmp)
        os.replace(tmp, checkpoint)

    model.train()
    log = open(args.exp_dir / "train.log", "a")
    started, running = time.perf_counter(), RunningLog()
    first_step = step
    favoured = [min(int(b), config.num_books) for b in args.favoured_books.split(",") if b]
    while step < args.steps:
        mel = sample_batch(train, lengths, step, args.batch_size, args.segment, config.hop)
        books = book_counts(step, args.batch_size, config.num_books, dropout=args.dropout, favoured=favoured,
                            favoured_share=args.favoured_share)
        parts = losses(model, mel, books)
        loss = parts["l1"] + parts["l2"] + parts["delta"] + args.commit_weight * parts["commit"]
        optimise(loss, list(model.parameters()), optimizer, schedule)
        step += 1
        running.add(parts)
        if running.due(step, args.steps):
            record = running.record(step, schedule.get_last_lr()[0])
            if step % args.eval_every == 0 or step == args.steps:
                record.update(evaluate(model, heldout))
            rate = (step - first_step) / (time.perf_counter() - started)
            print(json.dumps(record) + f"  ({rate:.2f} steps/s)", flush=True)
            log.write(json.dumps(record) + "\n")
            log.flush()
        if step % args.save_every == 0 or step == args.steps:
            save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
