"""A Whisper checkpoint made ready to decode: the model on its device, the tokenizer, its token lists.

:class:`LoadedWhisper` is what every decoding module below :class:`~burble.asr.pipeline.WhisperASR`
receives. It is read-only after loading, so one instance serves many concurrent callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from burble.asr.tokenizer import WhisperTokenizer
from burble.asr.whisper.loading import Checkpoint
from burble.asr.whisper.model import Whisper, WhisperTextModel
from burble.asr.whisper.static_decoder import StaticSteps, StaticWhisperTextModel
from burble.decoding.eagle import EagleLayer
from burble.decoding.mtp import MTPHeads
from burble.kernels.attention import KeysValues

# Trained multi-token-prediction draft heads shipped with burble (recipes/mtp_heads reproduces them).
HEADS_DIR = Path(__file__).resolve().parent / "whisper" / "heads"


def shipped_draft_heads(name: str, dtype: torch.dtype = torch.float32) -> Optional[MTPHeads]:
    """The draft heads trained for checkpoint ``name``, or ``None`` when burble ships none."""
    path = HEADS_DIR / f"{name}.mtp.safetensors"
    if not path.is_file():
        return None
    heads = MTPHeads.load(path, dtype=dtype)
    return heads if heads.config.target in ("", name) else None


def shipped_draft_layer(name: str) -> Optional[EagleLayer]:
    """The EAGLE-style draft layer trained for checkpoint ``name`` (``None``: burble ships none)."""
    path = HEADS_DIR / f"{name}.eagle.safetensors"
    if not path.is_file():
        return None
    layer = EagleLayer.load(path)
    return layer if layer.config.target in ("", name) else None


@dataclass(frozen=True)
class LoadedWhisper:
    """The parts of a loaded checkpoint that decoding uses.

    Attributes:
      name: the checkpoint's name.
      model: the PyTorch model, on its device, in eval mode.
      tokenizer: the shared tokenizer (it holds no per-call state).
      suppress_ids: the checkpoint's non-speech token list (``None``: the tokenizer's default set).
      suppress_ids_begin: tokens forbidden as the first token of a window (blank, end-of-text).
      draft_heads: trained MTP draft heads for ``--speculative mtp`` (``None``: none for this model).
      draft_layer: the trained EAGLE-style draft layer for ``--speculative eagle`` (``None``: none
        for this model).
      static_steps: run single-token decoder passes at static shapes (CUDA graphs on a GPU; see
        :mod:`burble.asr.whisper.static_decoder`); ``None``: the dynamic path.
    """

    name: str
    model: Whisper
    tokenizer: WhisperTokenizer
    suppress_ids: tuple[int, ...] | None
    suppress_ids_begin: tuple[int, ...]
    draft_heads: Optional[MTPHeads] = None
    draft_layer: Optional[EagleLayer] = None
    static_steps: Optional[StaticSteps] = None

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: Checkpoint,
        device: str | torch.device = "cpu",
        *,
        dtype: torch.dtype = torch.float32,
        static_decode: bool = False,
    ) -> "LoadedWhisper":
        model = checkpoint.model.to(device=device, dtype=dtype)
        tokenizer = WhisperTokenizer(checkpoint.tokenizer_path, multilingual=model.dims.multilingual)
        if checkpoint.alignment_heads:
            model.alignment_heads = [(int(layer), int(head)) for layer, head in checkpoint.alignment_heads]
        begin = checkpoint.suppress_ids_begin or [tokenizer.encode(" ")[0], tokenizer.eot]
        return cls(
            name=checkpoint.name,
            model=model,
            tokenizer=tokenizer,
            suppress_ids=tuple(checkpoint.suppress_ids) if checkpoint.suppress_ids else None,
            suppress_ids_begin=tuple(begin),
            draft_heads=_heads_on(shipped_draft_heads(checkpoint.name), model),
            draft_layer=_layer_on(shipped_draft_layer(checkpoint.name), model),
            static_steps=StaticSteps() if static_decode else None,
        )

    @property
    def device(self) -> torch.device:
        return self.model.device

    def text_model(
        self, audio_features: torch.Tensor, cross: Optional[list[KeysValues]] = None,
        cross_rows: Optional[list[list[KeysValues]]] = None,
    ) -> WhisperTextModel:
        """The decoder bound to ``audio_features`` ``(1 or B, 1500, D)``, static or dynamic
        (``cross``: their cross-attention K/V per layer, if the caller has them; ``cross_rows``:
        each row's own instead, rows of different streams' audio)."""
        if cross_rows is not None:  # rows of different streams: the dynamic decoder (static steps are for batch 1)
            return WhisperTextModel(self.model, audio_features, cross_rows=cross_rows)
        if self.static_steps is not None:
            return StaticWhisperTextModel(self.model, audio_features, self.static_steps, cross=cross)
        return WhisperTextModel(self.model, audio_features, cross=cross)

    @torch.inference_mode()
    def encode(self, mel: torch.Tensor) -> torch.Tensor:
        """Encoder states ``(B, 1500, D)`` of ``(n_mels, 3000)`` or ``(B, n_mels, 3000)`` features."""
        if mel.dim() == 2:
            mel = mel.unsqueeze(0)
        return self.model.embed_audio(mel.to(self.device))


def _heads_on(heads: Optional[MTPHeads], model: Whisper) -> Optional[MTPHeads]:
    """The heads on the model's device and dtype, if their width matches the model's."""
    if heads is None or heads.config.hidden_size != model.dims.n_text_state:
        return None
    return heads.to(device=model.device, dtype=model.dtype)


def _layer_on(layer: Optional[EagleLayer], model: Whisper) -> Optional[EagleLayer]:
    """The draft layer on the model's device (float16 weights, as shipped: see
    ``burble.decoding.eagle._linear``), if its width matches the model's."""
    if layer is None or layer.config.hidden_size != model.dims.n_text_state:
        return None
    return layer.to(device=model.device)
