"""Write small CTranslate2 ``model.bin`` files, to test the reader on every dtype and on aliases."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import torch

DTYPE_IDS = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4, "bfloat16": 5}


def _string(text: str) -> bytes:
    data = text.encode("utf-8") + b"\0"
    return struct.pack("<H", len(data)) + data


def write_ct2_file(path: str | Path, variables: dict[str, tuple[str, np.ndarray | torch.Tensor]], aliases: dict[str, str] | None = None, *, spec: str = "WhisperSpec") -> None:
    """Write ``{name: (dtype name, array)}`` and ``{alias: target}`` in CTranslate2's format (version 6)."""
    out = [struct.pack("<I", 6), _string(spec), struct.pack("<I", 3), struct.pack("<I", len(variables))]
    for name, (dtype, value) in variables.items():
        if dtype == "bfloat16":
            raw = torch.as_tensor(value, dtype=torch.bfloat16).view(torch.int16).numpy().tobytes()
            shape = tuple(torch.as_tensor(value).shape)
        else:
            array = np.asarray(value, dtype={"float32": "<f4", "int8": "i1", "int16": "<i2", "int32": "<i4", "float16": "<f2"}[dtype])
            raw, shape = array.tobytes(), array.shape
        out.append(_string(name) + struct.pack("<B", len(shape)) + struct.pack(f"<{len(shape)}I", *shape))
        out.append(struct.pack("<BI", DTYPE_IDS[dtype], len(raw)) + raw)
    aliases = aliases or {}
    out.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out.append(_string(alias) + _string(target))
    Path(path).write_bytes(b"".join(out))
