"""OpenAI .pt and Hugging Face safetensors checkpoints load into the same model as the packaged one."""

import dataclasses
import json

import pytest
import torch

from burble.asr.whisper.loading import _HF_NAMES, load_checkpoint
from burble.asr.whisper.model import WhisperTextModel


@pytest.fixture(scope="module")
def reference():
    return load_checkpoint("tiny.en").model


def _logits(model, mel):
    features = model.embed_audio(mel)
    text = WhisperTextModel(model, features)
    cache = text.new_cache(1, 8)
    return text.forward(torch.tensor([[50257, 50362, 843]]), cache)


def test_openai_pt_roundtrip(tmp_path, reference):
    path = tmp_path / "tiny.en.pt"
    torch.save({"dims": dataclasses.asdict(reference.dims), "model_state_dict": reference.state_dict()}, path)
    loaded = load_checkpoint(path).model
    mel = torch.randn(1, 80, 3000)
    torch.testing.assert_close(_logits(loaded, mel), _logits(reference, mel))


def test_hugging_face_directory_roundtrip(tmp_path, reference):
    safetensors = pytest.importorskip("safetensors.torch")
    inverse = {}
    for name, tensor in reference.state_dict().items():
        hf = name
        for old, new in reversed(_HF_NAMES):
            hf = hf.replace(new, old)
        inverse[hf] = tensor.contiguous()
    inverse["proj_out.weight"] = reference.decoder.token_embedding.weight.contiguous().clone()
    safetensors.save_file(inverse, str(tmp_path / "model.safetensors"))
    d = reference.dims
    config = dict(num_mel_bins=d.n_mels, max_source_positions=d.n_audio_ctx, d_model=d.n_audio_state,
                  encoder_attention_heads=d.n_audio_head, encoder_layers=d.n_audio_layer, vocab_size=d.n_vocab,
                  max_target_positions=d.n_text_ctx, decoder_attention_heads=d.n_text_head, decoder_layers=d.n_text_layer)
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = load_checkpoint(tmp_path).model
    mel = torch.randn(1, 80, 3000)
    torch.testing.assert_close(_logits(loaded, mel), _logits(reference, mel))
