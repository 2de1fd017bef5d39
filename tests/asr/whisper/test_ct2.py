import numpy as np
import pytest
import torch

from burble.asr.whisper.ct2 import read_ct2_variables
from burble.asr.whisper.loading import load_checkpoint, resolve_model_files
from burble.testing.ct2_files import write_ct2_file


def test_reader_dequantises_every_dtype_and_resolves_aliases_after(tmp_path):
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(4, 3)).astype(np.float32)
    scale = (127.0 / np.abs(weight).max(axis=1)).astype(np.float32)
    quantised = np.round(weight * scale[:, None]).astype(np.int8)
    path = tmp_path / "model.bin"
    write_ct2_file(
        path,
        {
            "a/f32": ("float32", weight),
            "a/f16": ("float16", weight),
            "a/bf16": ("bfloat16", torch.tensor(weight)),
            "a/i32": ("int32", np.arange(3)),
            "q/weight": ("int8", quantised),
            "q/weight_scale": ("float32", scale),
            "h/weight": ("int16", np.round(weight * 1000).astype(np.int16)),
            "h/weight_scale": ("float32", np.float32(1000.0)),
            "some/unknown_scalar": ("int8", np.int8(7)),
        },
        aliases={"tied/weight": "q/weight"},
    )
    spec, variables = read_ct2_variables(path)
    assert spec == "WhisperSpec"
    torch.testing.assert_close(variables["a/f32"], torch.tensor(weight))
    torch.testing.assert_close(variables["a/f16"], torch.tensor(weight), atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(variables["a/bf16"], torch.tensor(weight), atol=2e-2, rtol=2e-2)
    assert variables["a/i32"].tolist() == [0, 1, 2]
    torch.testing.assert_close(variables["q/weight"], torch.tensor(weight), atol=0.02, rtol=0.02)
    assert "q/weight_scale" not in variables
    torch.testing.assert_close(variables["h/weight"], torch.tensor(weight), atol=1e-3, rtol=0)
    # The alias points at the dequantised float tensor, not the raw int8 one.
    assert variables["tied/weight"].dtype == torch.float32
    torch.testing.assert_close(variables["tied/weight"], variables["q/weight"])
    assert int(variables["some/unknown_scalar"]) == 7


def test_truncated_file_is_a_clear_error(tmp_path):
    path = tmp_path / "model.bin"
    write_ct2_file(path, {"x": ("float32", np.zeros(8, np.float32))})
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(ValueError, match="truncated"):
        read_ct2_variables(path)


@pytest.mark.parametrize("name", ["tiny.en", pytest.param("base", marks=pytest.mark.slow)])
def test_packaged_checkpoints_load_without_missing_or_extra_keys(name):
    checkpoint = load_checkpoint(name)  # strict key check happens inside
    dims = checkpoint.model.dims
    assert dims.n_mels == 80 and dims.n_audio_ctx == 1500 and dims.n_text_ctx == 448
    assert (dims.n_text_layer, dims.n_text_state) == ({"tiny.en": 4, "base": 6}[name], {"tiny.en": 384, "base": 512}[name])
    assert dims.multilingual == (name == "base")
    assert checkpoint.alignment_heads and checkpoint.suppress_ids
    # The encoder positional table is used as stored (not recomputed).
    _, variables = read_ct2_variables(resolve_model_files(name)[0][0]) if name == "tiny.en" else (None, None)
    if variables is not None:
        assert torch.equal(checkpoint.model.encoder.positional_embedding, variables["encoder/position_encodings/encodings"])


def test_unknown_model_name_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="no model named"):
        load_checkpoint("tiny.fr")
