"""What the codec recipe's two training stages share (stage 1 ``train.py``, stage 3 ``refine_decoder.py``):
the mel shards, the reconstruction loss, the held-out evaluation, the schedule and the step.

(Named for the recipe, not ``train``: the MTP recipe has a ``train`` module too, and both are
imported by the tests in one process.)
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from safetensors import safe_open

from burble.codecs.model import MelCodec


def load_mels(data_dir: Path, split: str, *, kind: str = "mel") -> list[torch.Tensor]:
    """Every clip's log-mel ``(80, frames)`` (``kind="mel"``) or 16-bit audio ``(samples,)`` (``"audio"``).

    Both kinds come in the same clip order (the shards', then the keys' sorted order).
    """
    tensors = []
    for path in sorted(data_dir.glob(f"{split}_*.safetensors")):
        with safe_open(str(path), "pt") as f:
            tensors += [f.get_tensor(k) for k in sorted(f.keys()) if k.endswith(f".{kind}")]
    if not tensors:
        raise SystemExit(f"no {split} shards in {data_dir}: run stage 0 first")
    return [t.float() for t in tensors] if kind == "mel" else tensors


def reconstruction_losses(out: torch.Tensor, mel: torch.Tensor, mel_std: torch.Tensor) -> dict[str, torch.Tensor]:
    """L1, L2 and delta-mel L1 of the reconstruction ``out`` of ``mel``, in units of each bin's std."""
    err = (out - mel) / mel_std
    delta = torch.diff(out, dim=2) - torch.diff(mel, dim=2)
    return {"l1": err.abs().mean(), "l2": err.pow(2).mean(), "delta": (delta / mel_std).abs().mean()}


@torch.no_grad()
def evaluate(model: MelCodec, mels: list[torch.Tensor]) -> dict[str, float]:
    """Held-out mean |log-mel error| (nats) at 1/2/4/8 books, whole clips."""
    model.eval()
    result = {}
    hop = model.config.hop
    for books in (1, 2, 4, 8):
        if books > model.config.num_books:
            continue
        total, frames = 0.0, 0
        for mel in mels:
            mel = mel[:, : mel.shape[1] // hop * hop]
            rec = model.decode(model.encode(mel[None], books))[0]
            total += float((rec - mel).abs().sum()) / mel.shape[0]
            frames += mel.shape[1]
        result[f"mel_l1@{books}"] = round(total / frames, 4)
    model.train()
    return result


def warmup_cosine(optimizer: torch.optim.Optimizer, *, warmup: int, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``warmup`` steps, then a cosine decay to 5% of the peak at ``steps``."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup) * max(
        0.05, 0.5 * (1 + math.cos(min(s, steps) / steps * math.pi))))


def optimise(loss: torch.Tensor, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
             schedule: torch.optim.lr_scheduler.LambdaLR) -> None:
    """One update: backward, clip the gradient norm to 1, step the optimiser and the schedule."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    schedule.step()


class RunningLog:
    """Averages the loss terms over ``every`` steps; ``record(step)`` gives them (and clears) at those steps."""

    def __init__(self, every: int = 50) -> None:
        self.every, self.sums = every, {}

    def add(self, parts: dict[str, torch.Tensor]) -> None:
        for k, v in parts.items():
            self.sums[k] = self.sums.get(k, 0.0) + float(v.detach())

    def due(self, step: int, last: int) -> bool:
        return step % self.every == 0 or step == last

    def record(self, step: int, lr: float) -> dict:
        record = {"step": step, **{k: round(v / self.every, 4) for k, v in self.sums.items()}, "lr": round(lr, 6)}
        self.sums = {}
        return record
