"""``burble.codecs.load(name)``: audio -> integer codes -> audio, whole or streamed.

A ``Codec`` is the trained mel codec (``burble.codecs.model``) plus the pretrained HiFi-GAN
vocoder (``burble.codecs.vocoder``). Audio at any rate is resampled to the vocoder's 22.05 kHz,
turned into log-mel frames, encoded into ``books x frames`` codes, and decoded back to log-mel
and through the vocoder to 22.05 kHz audio. The weights ship in the package
(``burble/codecs/weights/<name>.safetensors``, config in the metadata), trained by
``recipes/codec``.

Streaming: ``stream_encoder()`` takes audio in pieces and returns each code frame as soon as the
audio it covers is in; ``stream_decoder()`` takes code frames and returns audio once the vocoder's
lookahead has arrived. Streaming state lives on the layers (``burble.codecs.streaming``), so each
stream works on its own copy of the (small) networks and streams never share state.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from burble.audio.resample import StreamingResampler, resample
from burble.codecs.mel import HOP, SAMPLE_RATE, StreamingLogMel, log_mel
from burble.codecs.model import CodecConfig, MelCodec
from burble.codecs.streaming import streaming
from burble.codecs.vocoder import ExactStreamingVocoder, HiFiGAN, StreamingVocoder, load_vocoder, vocode
from burble.precision import native_bfloat16, torch_dtype

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DEFAULT_CODEC = "mel-43hz"
SILENCE_PEAK = 1e-4  # below this peak (about -80 dBFS) there is nothing to encode
N_FFT_REACH = 640  # mel frame i reads samples up to 256 i + 640 (HOP i - PAD + N_FFT)


class CodecInputError(ValueError):
    """Audio or codes the codec cannot work with (empty, silent, corrupt, out of range)."""


def available_codecs() -> list[str]:
    return sorted(p.name[: -len(".safetensors")] for p in WEIGHTS_DIR.glob("*.safetensors"))


def save_codec(model: MelCodec, path: Path, *, vocoder: str = "universal", default_books: int = 4,
               extra: Optional[dict] = None) -> None:
    """Write the inference weights of ``model`` (fp32: code assignment is an argmin) with its config."""
    from safetensors.torch import save_file

    state = {k: v.contiguous() for k, v in model.state_dict().items()
             if not k.startswith("quantizer.") or k == "quantizer.embed"}
    metadata = {"config": json.dumps(model.config.to_dict()), "vocoder": vocoder,
                "default_books": str(default_books), "extra": json.dumps(extra or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata=metadata)


def load(name: str = DEFAULT_CODEC, *, device: str | torch.device = "cpu", dtype: str | torch.dtype | None = None,
         vocoder: Optional[str] = None, vocoder_dtype: str | torch.dtype | None = None) -> "Codec":
    """The shipped codec ``name`` (see ``available_codecs()``) or a ``.safetensors`` path.

    Args:
      name: codec name or path.
      device: where ``encode``/``decode`` compute (the streaming variants run on the CPU).
      dtype: precision of the encoder, decoder and vocoder (``"float32"``, ``"float16"``,
        ``"bfloat16"``); the quantiser's nearest-code search stays float32.
      vocoder: the generator that turns decoded mels into audio (``burble.codecs.vocoder.
        available_vocoders()``); default: the one the codec ships with.
      vocoder_dtype: the vocoder's precision, if not ``dtype``. ``"auto"``: bfloat16 for a float32
        codec where the device has native bfloat16 (``burble.precision.native_bfloat16``), where
        the vocoder, most of the decoding time, runs 2-2.5x faster at the same mel distance.
    """
    dtype = torch_dtype(dtype)
    device = torch.device(device)
    if vocoder_dtype == "auto":
        native = dtype == torch.float32 and native_bfloat16(device)
        vocoder_dtype = torch.bfloat16 if native else dtype
    return _load_on(name, str(device), dtype, vocoder, dtype if vocoder_dtype is None else torch_dtype(vocoder_dtype))


@functools.lru_cache(maxsize=4)
def _load_on(name: str, device: str, dtype: torch.dtype, vocoder: Optional[str], vocoder_dtype: torch.dtype) -> "Codec":
    """One copy per (codec, device, dtypes, vocoder): loading twice gives the same object."""
    codec = _load_on_cpu(name, vocoder)
    if device == "cpu" and dtype == vocoder_dtype == torch.float32:
        return codec
    return codec.to(device=device, dtype=dtype, vocoder_dtype=vocoder_dtype)


@functools.lru_cache(maxsize=4)
def _load_on_cpu(name: str, vocoder: Optional[str]) -> "Codec":
    from safetensors import safe_open

    path = Path(name) if name.endswith(".safetensors") else WEIGHTS_DIR / f"{name}.safetensors"
    if not path.is_file():
        raise CodecInputError(f"no codec {name!r}; shipped: {', '.join(available_codecs()) or 'none'}")
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        state = {k: f.get_tensor(k) for k in f.keys()}
    model = MelCodec(CodecConfig.from_dict(json.loads(metadata["config"])))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("quantizer.") or k == "quantizer.embed"]
    if missing or unexpected:
        raise RuntimeError(f"{path}: weights do not match the codec (missing {missing}, unexpected {unexpected})")
    model.eval().requires_grad_(False)
    return Codec(name=path.name[: -len(".safetensors")], model=model, vocoder=load_vocoder(vocoder or metadata["vocoder"]),
                 default_books=int(metadata["default_books"]))


def to_codec_rate(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    """Validated mono float32 audio at 22.05 kHz (clear errors for empty, silent or non-finite input)."""
    audio = np.asarray(audio, dtype=np.float32)
    if audio.size == 0:
        raise CodecInputError("the audio is empty")
    # (samples, channels) is averaged; more channels than samples is channels-first (or not audio),
    # which averaging along axis 1 would silently turn into a few samples.
    if audio.ndim == 2 and audio.shape[1] <= audio.shape[0]:
        audio = audio.mean(axis=1)
    if audio.ndim != 1:
        raise CodecInputError(f"expected mono audio (samples,) or (samples, channels), got an array of shape {audio.shape}")
    if not np.all(np.isfinite(audio)):
        raise CodecInputError("the audio holds NaN or infinite samples")
    if float(np.abs(audio).max()) < SILENCE_PEAK:
        raise CodecInputError("the audio is silent (peak below -80 dBFS): nothing to encode")
    return resample(audio, int(sample_rate), SAMPLE_RATE)


@dataclass
class Codec:
    """A trained mel codec with its vocoder. Codes are ``int64`` arrays ``(books, frames)``."""

    name: str
    model: MelCodec
    vocoder: HiFiGAN
    default_books: int

    sample_rate: int = SAMPLE_RATE

    @property
    def config(self) -> CodecConfig:
        return self.model.config

    @property
    def samples_per_frame(self) -> int:
        return HOP * self.config.hop

    def algorithmic_latency(self, lookahead: Optional[int] = None) -> int:
        """Worst-case delay in 22.05 kHz samples from a sample entering ``stream_encoder`` to its
        reconstruction leaving ``stream_decoder(lookahead=...)`` (compute time not included).

        Sample ``n`` leaves the vocoder once ``lag`` more samples' worth of mel frames are decoded
        (``lag``: the vocoder's ``right_reach()``, or ``lookahead * 256``); a code frame is decoded as soon as it
        is encoded, and it is encoded once the STFT window of its last mel frame is in (``384``
        samples past the frame's end). The worst ``n`` is found over one code frame.
        """
        lag = self.vocoder.right_reach() if lookahead is None else lookahead * HOP
        frame = self.samples_per_frame
        worst = 0
        for n in range(frame):  # the pattern repeats every code frame
            mel_frames = -(-(n + 1 + lag) // HOP)
            code_frames = -(-mel_frames // self.config.hop)
            worst = max(worst, code_frames * frame + (N_FFT_REACH - HOP) - n)
        return worst

    @property
    def device(self) -> torch.device:
        return self.model.mel_mean.device

    def to(self, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
           vocoder_dtype: Optional[torch.dtype] = None) -> "Codec":
        """A copy on ``device`` with encoder and decoder in ``dtype`` (the quantiser in float32)
        and the vocoder in ``vocoder_dtype`` (default: ``dtype``)."""
        model = copy.deepcopy(self.model).to(device=device)
        model.encoder.to(dtype)
        model.decoder.to(dtype)
        vocoder = copy.deepcopy(self.vocoder).to(device=device, dtype=vocoder_dtype or dtype)
        return Codec(name=self.name, model=model, vocoder=vocoder, default_books=self.default_books)

    def _check_streaming_device(self) -> None:
        if self.device.type != "cpu":
            raise CodecInputError("the streaming codec runs on the CPU: load it with device='cpu'")

    def check_books(self, books: Optional[int]) -> int:
        books = self.default_books if books is None else int(books)
        if not 1 <= books <= self.config.num_books:
            raise CodecInputError(f"books must be 1..{self.config.num_books}, got {books}")
        return books

    def encode(self, audio: np.ndarray, sample_rate: int, books: Optional[int] = None) -> np.ndarray:
        """Codes ``(books, frames)`` of mono ``audio`` at ``sample_rate`` (zero-padded to whole frames)."""
        books = self.check_books(books)
        x = to_codec_rate(audio, sample_rate)
        frames = -(-x.size // self.samples_per_frame)
        x = np.pad(x, (0, frames * self.samples_per_frame - x.size))
        with torch.inference_mode():
            codes = self.model.encode(log_mel(x)[None].to(self.device), books)[0]
        return codes.cpu().numpy()

    def decode_mel(self, codes: np.ndarray) -> torch.Tensor:
        codes = self.check_codes(codes)
        return self.model.decode(torch.from_numpy(codes)[None].to(self.device))[0]

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """22.05 kHz float32 audio for codes ``(books, frames)`` (any 1..num_books leading books), or
        for distributions over codes ``(books, frames, codebook_size)`` (float, each row summing to 1):
        each frame is then decoded from its expected code vector, the mean of each book's codebook
        under its distribution (a codec LM's posterior mean; a one-hot row is its code)."""
        return vocode(self.vocoder, self.decode_mel(codes)).numpy()

    def check_codes(self, codes: np.ndarray) -> np.ndarray:
        """Valid codes as ``int64``, or valid distributions over codes as ``float32``."""
        codes = np.asarray(codes)
        if codes.ndim == 3 and np.issubdtype(codes.dtype, np.floating):
            return self._check_distributions(codes)
        if codes.ndim != 2 or codes.shape[1] == 0:
            raise CodecInputError(f"codes must be a (books, frames) array with frames > 0, got shape {codes.shape}")
        if not np.issubdtype(codes.dtype, np.integer):
            raise CodecInputError(f"codes must be integers, got {codes.dtype}")
        self.check_books(codes.shape[0])
        if codes.min() < 0 or codes.max() >= self.config.codebook_size:
            raise CodecInputError(f"codes must lie in 0..{self.config.codebook_size - 1}, "
                                  f"got {codes.min()}..{codes.max()}")
        return codes.astype(np.int64)

    def _check_distributions(self, distributions: np.ndarray) -> np.ndarray:
        books, frames, size = distributions.shape
        if frames == 0 or size != self.config.codebook_size:
            raise CodecInputError(f"distributions over codes must be a (books, frames, {self.config.codebook_size}) "
                                  f"array with frames > 0, got shape {distributions.shape}")
        self.check_books(books)
        if not np.all(np.isfinite(distributions)) or distributions.min() < 0:
            raise CodecInputError("distributions over codes must be finite and non-negative")
        sums = distributions.sum(axis=-1, dtype=np.float64)
        if np.abs(sums - 1).max() > 1e-3:
            raise CodecInputError(f"each distribution over codes must sum to 1, got sums {sums.min():.4f}..{sums.max():.4f}")
        return distributions.astype(np.float32)

    def stream_encoder(self, sample_rate: int, books: Optional[int] = None) -> "StreamingEncoder":
        self._check_streaming_device()
        return StreamingEncoder(self, sample_rate, self.check_books(books))

    def stream_decoder(self, *, lookahead: Optional[int] = None) -> "StreamingDecoder":
        """A streaming decoder. ``lookahead=None``: the exact streaming vocoder (the whole-file
        audio, each sample computed once, the vocoder's ``right_reach()`` of lag: 32 ms for
        ``low-latency``, 148 ms for the pretrained generators); ``lookahead=R``: chunks vocoded
        with 16 frames of context and ``R`` of lookahead (lower latency, an approximation, and
        about ``(20 + R) / 4`` times the vocoder's compute)."""
        self._check_streaming_device()
        return StreamingDecoder(self, lookahead=lookahead)


class StreamingEncoder:
    """Audio in pieces -> code frames ``(books, k)`` as soon as each frame's audio is in.

    A code frame covers ``samples_per_frame`` samples at 22.05 kHz and is known once its last mel
    frame is: ``640 - 256`` samples after the frame's end (the STFT window's reach), plus the
    resampler's delay for other input rates.
    """

    def __init__(self, codec: Codec, sample_rate: int, books: int) -> None:
        self.codec, self.books = codec, books
        self._resampler = StreamingResampler(int(sample_rate), SAMPLE_RATE)
        self._mel = StreamingLogMel()
        self._encoder = copy.deepcopy(codec.model.encoder)
        self._stream = streaming(self._encoder)
        self._stream.__enter__()
        self._samples = 0

    def push(self, audio: np.ndarray) -> np.ndarray:
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if not np.all(np.isfinite(audio)):
            raise CodecInputError("the audio holds NaN or infinite samples")
        x = self._resampler.process(audio)
        self._samples += x.size
        return self._codes(self._mel.push(x))

    def flush(self) -> np.ndarray:
        """The last code frames (the tail zero-padded to a whole frame, as ``Codec.encode`` does)."""
        x = self._resampler.flush()
        self._samples += x.size
        pad = -self._samples % self.codec.samples_per_frame
        mel = torch.cat([self._mel.push(np.concatenate([x, np.zeros(pad, np.float32)])), self._mel.flush()], dim=1)
        codes = self._codes(mel)
        self._stream.__exit__(None, None, None)
        return codes

    @torch.inference_mode()
    def _codes(self, mel: torch.Tensor) -> np.ndarray:
        model = self.codec.model
        if mel.shape[1] == 0:
            return np.zeros((self.books, 0), dtype=np.int64)
        latent = self._encoder(((mel - model.mel_mean) / model.mel_std)[None])[0]
        if latent.shape[1] == 0:
            return np.zeros((self.books, 0), dtype=np.int64)
        return model.quantizer(latent.t(), self.books).codes[:, : self.books].t().numpy()


class StreamingDecoder:
    """Code frames in pieces -> 22.05 kHz audio (see ``Codec.stream_decoder``)."""

    def __init__(self, codec: Codec, *, lookahead: Optional[int]) -> None:
        self.codec = codec
        self._decoder = copy.deepcopy(codec.model.decoder)
        self._stream = streaming(self._decoder)
        self._stream.__enter__()
        self._vocoder: StreamingVocoder | ExactStreamingVocoder = (
            ExactStreamingVocoder(codec.vocoder) if lookahead is None
            else StreamingVocoder(codec.vocoder, left=16, right=lookahead, chunk=codec.config.hop))

    @torch.inference_mode()
    def push(self, codes: np.ndarray) -> np.ndarray:
        """Audio for the next code frames: codes ``(books, n)`` or distributions over codes
        ``(books, n, codebook_size)``, as ``Codec.decode`` takes them."""
        codes = np.asarray(codes)
        if codes.ndim in (2, 3) and codes.shape[1] == 0:
            return np.zeros(0, dtype=np.float32)
        codes = torch.from_numpy(self.codec.check_codes(codes)).transpose(0, 1)  # (frames, books[, size])
        model = self.codec.model
        vectors = model.quantizer.expected(codes) if codes.is_floating_point() else model.quantizer.decode(codes)
        latent = vectors.t()[None]
        mel = self._decoder(latent)[0] * model.mel_std + model.mel_mean
        return self._vocoder.push(mel).numpy()

    def flush(self) -> np.ndarray:
        audio = self._vocoder.flush().numpy()
        self._stream.__exit__(None, None, None)
        return audio
