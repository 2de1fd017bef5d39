"""Reader for CTranslate2 ``model.bin`` files and their mapping onto burble's Whisper.

File layout (little-endian): ``u32 version``, ``string spec`` (u16 length incl. NUL), ``u32 revision``,
``u32 n_variables``, then per variable ``string name, u8 rank, u32 dims[rank], u8 dtype, u32 nbytes,
raw bytes``, then ``u32 n_aliases`` and ``(string alias, string target)`` pairs. Quantised weights
(int8, int16) come with a ``<name>_scale`` variable: ``weight = q / scale`` row-wise.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

# CTranslate2's DataType enum.
_DTYPES = {
    0: np.dtype("<f4"),
    1: np.dtype("i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<f2"),
    5: "bfloat16",
}


def _read(stream: BinaryIO, fmt: str) -> tuple:
    size = struct.calcsize(fmt)
    data = stream.read(size)
    if len(data) != size:
        raise ValueError("truncated CTranslate2 model file")
    return struct.unpack(fmt, data)


def _read_string(stream: BinaryIO) -> str:
    (length,) = _read(stream, "<H")
    return stream.read(length).rstrip(b"\0").decode("utf-8")


def read_ct2_variables(path: "str | Path | BinaryIO") -> tuple[str, dict[str, torch.Tensor]]:
    """Read every variable of a CTranslate2 model file, dequantised to float32, aliases resolved.

    Returns:
      ``(spec_name, {name: tensor})``; scalar variables are 0-d tensors.
    """
    raw: dict[str, torch.Tensor] = {}
    with (open(path, "rb") if isinstance(path, (str, Path)) else path) as stream:
        (version,) = _read(stream, "<I")
        if version < 5:
            raise ValueError(f"unsupported CTranslate2 model version {version} (need >= 5)")
        spec = _read_string(stream)
        _read(stream, "<I")  # spec revision
        (count,) = _read(stream, "<I")
        for _ in range(count):
            name = _read_string(stream)
            (rank,) = _read(stream, "<B")
            dims = _read(stream, f"<{rank}I") if rank else ()
            dtype_id, nbytes = _read(stream, "<BI")
            buffer = stream.read(nbytes)
            if dtype_id not in _DTYPES:
                raise ValueError(f"variable {name}: unknown dtype id {dtype_id}")
            dtype = _DTYPES[dtype_id]
            if dtype == "bfloat16":
                values = torch.frombuffer(bytearray(buffer), dtype=torch.bfloat16)
            else:
                values = torch.from_numpy(np.frombuffer(buffer, dtype=dtype).copy())
            raw[name] = values.reshape(dims)
        aliases: dict[str, str] = {}
        (n_aliases,) = _read(stream, "<I")
        for _ in range(n_aliases):
            alias = _read_string(stream)
            aliases[alias] = _read_string(stream)

    variables: dict[str, torch.Tensor] = {}
    for name, value in raw.items():
        if name.endswith("_scale") and name[: -len("_scale")] in raw:
            continue
        scale = raw.get(name + "_scale")
        if scale is not None and value.dtype in (torch.int8, torch.int16):
            scale = scale.float()
            value = value.float() / (scale.unsqueeze(-1) if scale.dim() and value.dim() > 1 else scale)
        elif value.is_floating_point():
            value = value.float()
        variables[name] = value
    # Aliases are resolved after dequantisation so a tied projection gets the float weights.
    for alias, target in aliases.items():
        variables[alias] = variables[target]
    return spec, variables


def _linear(out: dict[str, torch.Tensor], prefix: str, variables: dict[str, torch.Tensor], source: str) -> None:
    out[f"{prefix}.weight"] = variables[f"{source}/weight"]
    if f"{source}/bias" in variables:
        out[f"{prefix}.bias"] = variables[f"{source}/bias"]


def _norm(out: dict[str, torch.Tensor], prefix: str, variables: dict[str, torch.Tensor], source: str) -> None:
    out[f"{prefix}.weight"] = variables[f"{source}/gamma"]
    out[f"{prefix}.bias"] = variables[f"{source}/beta"]


def _split_rows(tensor: torch.Tensor, parts: int) -> list[torch.Tensor]:
    return list(torch.chunk(tensor, parts, dim=0))


def _self_attention(out: dict, prefix: str, v: dict, source: str) -> None:
    _norm(out, f"{prefix}.attn_ln", v, f"{source}/layer_norm")
    q, k, val = _split_rows(v[f"{source}/linear_0/weight"], 3)
    qb, _key_bias_is_zero, vb = _split_rows(v[f"{source}/linear_0/bias"], 3)
    out[f"{prefix}.attn.query.weight"], out[f"{prefix}.attn.query.bias"] = q, qb
    out[f"{prefix}.attn.key.weight"] = k
    out[f"{prefix}.attn.value.weight"], out[f"{prefix}.attn.value.bias"] = val, vb
    _linear(out, f"{prefix}.attn.out", v, f"{source}/linear_1")


def _ffn(out: dict, prefix: str, v: dict, source: str) -> None:
    _norm(out, f"{prefix}.mlp_ln", v, f"{source}/layer_norm")
    _linear(out, f"{prefix}.mlp.0", v, f"{source}/linear_0")
    _linear(out, f"{prefix}.mlp.2", v, f"{source}/linear_1")


def ct2_to_whisper_state_dict(variables: dict[str, torch.Tensor]) -> tuple[dict, dict[str, int]]:
    """Map CTranslate2 Whisper variables to burble/OpenAI parameter names.

    Returns:
      ``(state_dict, dims)`` where dims are the ``WhisperDims`` fields.
    """
    v = variables
    for scalar in ("encoder/activation", "decoder/activation"):
        # 3 is CTranslate2's exact GELU; anything else would need another activation.
        if scalar in v and int(v[scalar]) != 3:
            raise ValueError(f"{scalar}={int(v[scalar])}: only GELU Whisper checkpoints are supported")
    out: dict[str, torch.Tensor] = {}
    n_audio_layer = sum(1 for n in v if n.startswith("encoder/layer_") and n.endswith("/ffn/linear_0/weight"))
    n_text_layer = sum(1 for n in v if n.startswith("decoder/layer_") and n.endswith("/ffn/linear_0/weight"))
    out["encoder.conv1.weight"], out["encoder.conv1.bias"] = v["encoder/conv1/weight"], v["encoder/conv1/bias"]
    out["encoder.conv2.weight"], out["encoder.conv2.bias"] = v["encoder/conv2/weight"], v["encoder/conv2/bias"]
    out["encoder.positional_embedding"] = v["encoder/position_encodings/encodings"]
    for i in range(n_audio_layer):
        _self_attention(out, f"encoder.blocks.{i}", v, f"encoder/layer_{i}/self_attention")
        _ffn(out, f"encoder.blocks.{i}", v, f"encoder/layer_{i}/ffn")
    _norm(out, "encoder.ln_post", v, "encoder/layer_norm")

    out["decoder.token_embedding.weight"] = v["decoder/embeddings/weight"]
    out["decoder.positional_embedding"] = v["decoder/position_encodings/encodings"]
    for i in range(n_text_layer):
        prefix, source = f"decoder.blocks.{i}", f"decoder/layer_{i}"
        _self_attention(out, prefix, v, f"{source}/self_attention")
        _norm(out, f"{prefix}.cross_attn_ln", v, f"{source}/attention/layer_norm")
        _linear(out, f"{prefix}.cross_attn.query", v, f"{source}/attention/linear_0")
        k, val = _split_rows(v[f"{source}/attention/linear_1/weight"], 2)
        _kb, vb = _split_rows(v[f"{source}/attention/linear_1/bias"], 2)
        out[f"{prefix}.cross_attn.key.weight"] = k
        out[f"{prefix}.cross_attn.value.weight"], out[f"{prefix}.cross_attn.value.bias"] = val, vb
        _linear(out, f"{prefix}.cross_attn.out", v, f"{source}/attention/linear_2")
        _ffn(out, prefix, v, f"{source}/ffn")
    _norm(out, "decoder.ln", v, "decoder/layer_norm")

    projection = v.get("decoder/projection/weight")
    if projection is not None and not torch.equal(projection, out["decoder.token_embedding.weight"]):
        raise ValueError("output projection is not tied to the token embedding; unsupported Whisper variant")

    d_audio = out["encoder.conv1.weight"].shape[0]
    d_text = out["decoder.token_embedding.weight"].shape[1]
    dims = dict(
        n_mels=out["encoder.conv1.weight"].shape[1],
        n_audio_ctx=out["encoder.positional_embedding"].shape[0],
        n_audio_state=d_audio,
        n_audio_head=int(v["encoder/num_heads"]),
        n_audio_layer=n_audio_layer,
        n_vocab=out["decoder.token_embedding.weight"].shape[0],
        n_text_ctx=out["decoder.positional_embedding"].shape[0],
        n_text_state=d_text,
        n_text_head=int(v["decoder/num_heads"]),
        n_text_layer=n_text_layer,
    )
    return out, dims
