#!/usr/bin/env python
"""Stage 4 of the codec recipe: a low-latency HiFi-GAN, distilled from the pretrained one.

The pretrained HiFi-GAN V1 reads 12.7 mel frames (148 ms) ahead of each output sample, which
alone breaks the codec's 100 ms latency budget. The student is the same generator with its first
stage causal (``conv_pre``, the 8x upsampler and its three residual blocks read only the past)
and ``lookahead`` frames of lookahead at ``conv_pre``: 698 samples (32 ms) of right reach with
``lookahead`` 1. The later stages, which reach 1.7 frames, keep the pretrained weights, so the
shipped file holds only the first stage (float16 differences, ~21 MB).

A causal kernel cannot read the future its pretrained version read, so each causal layer is fit
in turn by ridge regression (closed form, float64) to reproduce the teacher's activation at that
point from the student's own input there: later layers make up for the errors of earlier ones,
and the part of the future that matters is predicted from the past. On held-out Piper clips the
fit gives a mel distance of 0.28 against 0.26 for the pretrained generator (folding the taps it
cannot read onto its newest one: 0.45; the kernels merely shifted: 0.9). Gradient fine-tuning
after the fit (log-mel L1 plus multi-resolution STFT loss, no discriminator, on the codec's
reconstructions and the original mels) made it worse (0.285 -> 0.307 in 75 steps at lr 1e-5),
so the fit is what ships.

The fit reads ``fit_clips`` training clips (~3.5 min on 2 cores for 24) and writes
``vocoder.pt`` (weights, options and the held-out evaluation) to the experiment directory; a
rerun with that file present only reports it (delete it to fit again). The evaluation: held-out
mean |log-mel difference| between the student's audio and the original, from the original mel
and from the codec's reconstruction at its default books (4), beside the pretrained generator's.

Usage::

    python recipes/codec/local/distill_vocoder.py --data-dir exp/data --exp-dir exp/vocoder \\
        --codec burble/codecs/weights/mel-21hz.safetensors
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

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors import safe_open  # noqa: E402

from burble.codecs import load  # noqa: E402
from burble.codecs.mel import HOP, log_mel  # noqa: E402
from burble.codecs.vocoder import (  # noqa: E402
    LEAKY_SLOPE, RESBLOCK_KERNELS, HiFiGAN, PaddedConv1d, Upsample, VocoderLayout, load_vocoder,
)


def load_mels(data_dir: Path, split: str) -> list[torch.Tensor]:
    """The log-mel ``(80, frames)`` of every clip in the ``split`` shards."""
    mels = []
    for path in sorted(data_dir.glob(f"{split}_*.safetensors")):
        with safe_open(str(path), "pt") as f:
            mels += [f.get_tensor(f"{i}.mel").float() for i in range(len(json.loads(f.metadata()["clips"])))]
    if not mels:
        raise SystemExit(f"no {split} shards in {data_dir}: run stage 0 first")
    return mels


def _taps(x: torch.Tensor, conv: PaddedConv1d) -> torch.Tensor:
    """``(in_channels * kernel + 1, T)``: what ``conv`` reads for each output of ``x`` ``(1, C, T)``, and a 1."""
    padded = F.pad(x, (conv.left, conv.right))
    kernel, dilation, length = conv.kernel_size[0], conv.dilation[0], x.shape[2]
    columns = torch.stack([padded[0, :, j * dilation: j * dilation + length] for j in range(kernel)], dim=1)
    return torch.cat([columns.reshape(-1, length), x.new_ones(1, length)])


def _ridge(pairs, ridge: float) -> torch.Tensor:
    """The least-squares ``W`` (features x outputs) of ``Y ~ X^T W`` over ``(X, Y)`` pairs, in float64."""
    gram, cross = 0.0, 0.0
    for features, targets in pairs:
        features, targets = features.double(), targets.double()
        gram = gram + features @ features.T
        cross = cross + features @ targets.T
    gram = gram + ridge * torch.trace(gram) / gram.shape[0] * torch.eye(gram.shape[0], dtype=gram.dtype)
    return torch.linalg.solve(gram, cross).float()


def _fit_conv(conv: PaddedConv1d, inputs: list[torch.Tensor], targets: list[torch.Tensor], ridge: float) -> None:
    weight = _ridge(((_taps(x, conv), y[0]) for x, y in zip(inputs, targets)), ridge).T
    conv.weight.data.copy_(weight[:, :-1].reshape(conv.weight.shape))
    conv.bias.data.copy_(weight[:, -1])


def _fit_upsample(up: Upsample, inputs: list[torch.Tensor], targets: list[torch.Tensor], ridge: float) -> None:
    """A causal upsampler's output ``s i + r`` reads inputs ``i`` (tap ``r``) and ``i - 1`` (tap ``r + s``):
    one regression per phase ``r`` (the bias stays the teacher's)."""
    stride, channels = up.stride[0], up.in_channels
    assert up.crop == 0 and up.kernel_size[0] == 2 * stride, "only the causal 2x-stride kernel is fit"
    weight = torch.zeros_like(up.weight)
    for phase in range(stride):
        pairs = ((torch.cat([x[0], F.pad(x, (1, 0))[0, :, :-1]]), y[0, :, phase::stride] - up.bias[:, None])
                 for x, y in zip(inputs, targets))
        fitted = _ridge(pairs, ridge)
        weight[:, :, phase], weight[:, :, phase + stride] = fitted[:channels], fitted[channels:]
    up.weight.data.copy_(weight)


def _lrelu(xs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [F.leaky_relu(x, LEAKY_SLOPE) for x in xs]


@torch.no_grad()
def least_squares_student(teacher: HiFiGAN, layout: VocoderLayout, mels: list[torch.Tensor],
                          ridge: float = 1e-3) -> HiFiGAN:
    """``teacher`` in ``layout``, each causal layer fit by ridge regression, in order, so that on
    ``mels`` its output matches the teacher's activation there, given the student's own input
    (the layer makes up for the errors of the layers before it). A causal kernel cannot read the
    future its pretrained version read; the fit predicts that part from the past instead.

    Args:
        teacher: the pretrained generator.
        layout: the student's layout (its first ``causal_stages`` stages are fit, and ``conv_pre``).
        mels: log-mel clips ``(80, frames)`` the activations are taken from.
        ridge: Tikhonov weight, relative to the mean feature energy.
    """
    student = HiFiGAN(layout)
    student.load_state_dict(teacher.state_dict())
    n = len(RESBLOCK_KERNELS)
    inputs = [m[None] for m in mels]
    _fit_conv(student.conv_pre, inputs, [teacher.conv_pre(x) for x in inputs], ridge)
    xs, xt = [student.conv_pre(x) for x in inputs], [teacher.conv_pre(x) for x in inputs]
    for stage in range(layout.causal_stages):
        up_s, up_t = student.ups[stage], teacher.ups[stage]
        xs, xt = _lrelu(xs), _lrelu(xt)
        _fit_upsample(up_s, xs, [up_t(x) for x in xt], ridge)
        xs, xt = [up_s(x) for x in xs], [up_t(x) for x in xt]
        outputs_s, outputs_t = [], []
        for block_s, block_t in zip(student.resblocks[stage * n:(stage + 1) * n], teacher.resblocks[stage * n:(stage + 1) * n]):
            ys, yt = xs, xt
            for c1s, c2s, c1t, c2t in zip(block_s.convs1, block_s.convs2, block_t.convs1, block_t.convs2):
                hs, ht = _lrelu(ys), [c1t(h) for h in _lrelu(yt)]
                _fit_conv(c1s, hs, ht, ridge)
                hs, ht = _lrelu([c1s(h) for h in hs]), _lrelu(ht)
                ot = [c2t(h) for h in ht]
                # c2 closes the residual: student y + c2(h) should equal the teacher's y + c2(h)
                _fit_conv(c2s, hs, [a + o - b for a, o, b in zip(yt, ot, ys)], ridge)
                ys, yt = [y + c2s(h) for y, h in zip(ys, hs)], [y + o for y, o in zip(yt, ot)]
            outputs_s.append(ys)
            outputs_t.append(yt)
        xs = [sum(parts) / n for parts in zip(*outputs_s)]
        xt = [sum(parts) / n for parts in zip(*outputs_t)]
        print(f"stage {stage + 1} fit", flush=True)
    return student


@torch.no_grad()
def evaluate(generator: HiFiGAN, heldout: list[torch.Tensor], codec) -> dict[str, float]:
    """Held-out mean |log-mel difference| of ``generator``'s audio to the original, from the original
    mel (``mel_dist``) and from the codec's reconstruction at its default books (``mel_dist@codec``)."""
    result = {}
    for books in (0, codec.default_books):
        distances = []
        for mel in heldout:
            source = mel if books == 0 else codec.model.decode(codec.model.encode(mel[None], books))[0]
            audio = generator(source[None])[0]
            frames = min(audio.shape[0] // HOP, mel.shape[1])
            distances.append(float((log_mel(audio[: frames * HOP]) - mel[:, :frames]).abs().mean()))
        result["mel_dist" if books == 0 else "mel_dist@codec"] = round(float(np.mean(distances)), 4)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--exp-dir", required=True, type=Path)
    parser.add_argument("--codec", required=True, help="the trained codec (name or .safetensors path) the evaluation decodes with")
    parser.add_argument("--teacher", default="universal", help="the pretrained generator")
    parser.add_argument("--lookahead", type=int, default=1, help="mel frames conv_pre reads ahead")
    parser.add_argument("--causal-stages", type=int, default=1)
    parser.add_argument("--fit-clips", type=int, default=24, help="training clips the fit reads")
    parser.add_argument("--ridge", type=float, default=1e-4, help="Tikhonov weight, relative to the mean feature energy")
    parser.add_argument("--eval-clips", type=int, default=8, help="held-out clips scored (the last ones: "
                        "benchmarks/codec.py scores the first)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.exp_dir.mkdir(parents=True, exist_ok=True)
    out = args.exp_dir / "vocoder.pt"
    if out.is_file():
        state = torch.load(out, map_location="cpu", weights_only=False)
        print(f"{out} exists (delete it to fit again): {json.dumps(state['evaluation'])}")
        return 0
    train = load_mels(args.data_dir, "train")
    heldout = load_mels(args.data_dir, "heldout")[-args.eval_clips:]
    teacher = load_vocoder(args.teacher)
    layout = VocoderLayout(causal_stages=args.causal_stages, lookahead=args.lookahead)
    started = time.perf_counter()
    student = least_squares_student(teacher, layout, train[: args.fit_clips], ridge=args.ridge)
    seconds = time.perf_counter() - started
    codec = load(args.codec)
    evaluation = {"student": evaluate(student, heldout, codec), "teacher": evaluate(teacher, heldout, codec),
                  "right_reach": {"student": student.right_reach(), "teacher": teacher.right_reach()},
                  "fit_seconds": round(seconds), "fit_clips": args.fit_clips, "books": codec.default_books}
    print(json.dumps(evaluation), flush=True)
    tmp = out.with_suffix(".tmp")
    torch.save({"model": student.state_dict(), "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "evaluation": evaluation}, tmp)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
