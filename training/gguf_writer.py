"""A small GGUF v3 writer for files that `peregrine convert` does not make (the Medusa heads).

Layout (the same that gguf_reader.py reads): "GGUF", u32 version, u64 tensor_count, u64 kv_count,
kv pairs (string key, u32 type, value), tensor infos (string name, u32 n_dims, u64 dims[n_dims]
in ggml order (dims[0] is the contiguous one), u32 type, u64 offset into the data section),
zero padding to the alignment (32), then each tensor's data padded to the alignment.
Only what the heads need is supported: u32 / f32 / string values and f32 tensors.
"""
import os
import struct
from pathlib import Path

import numpy as np

ALIGNMENT = 32
_U32, _F32, _STRING = 4, 6, 8
_GGML_F32 = 0


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(v) -> bytes:
    """Type tag and payload. Python int -> u32 (refused outside its range), float -> f32, str."""
    if isinstance(v, bool):
        raise TypeError("bool metadata is not supported by this writer")
    if isinstance(v, int):
        if not 0 <= v < 2**32:
            raise ValueError(f"integer {v} does not fit a u32")
        return struct.pack("<I", _U32) + struct.pack("<I", v)
    if isinstance(v, float):
        return struct.pack("<I", _F32) + struct.pack("<f", v)
    if isinstance(v, str):
        return struct.pack("<I", _STRING) + _string(v)
    raise TypeError(f"unsupported metadata value {v!r}")


def _pad(n: int) -> int:
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def write_gguf(path: Path, metadata: dict, tensors: dict):
    """metadata: key -> int (u32) | float (f32) | str, written in insertion order.
    tensors: name -> numpy array (any float dtype; stored as little-endian f32). A numpy array of
    shape (rows, cols) is stored row-major with GGUF dims {cols, rows} (ggml order: ne0 = cols),
    so a torch Linear weight [out, in] becomes {in, out}. Written to PATH.tmp, then renamed."""
    blobs, infos, offset = [], [], 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(np.asarray(arr, dtype="<f4"))
        if a.ndim == 0:
            raise ValueError(f"tensor {name} is a scalar")
        dims = list(reversed(a.shape))
        infos.append(_string(name) + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", _GGML_F32, offset))
        data = a.tobytes()
        blobs.append(data + b"\0" * _pad(len(data)))
        offset += len(blobs[-1])
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    header += b"".join(_string(k) + _value(v) for k, v in metadata.items())
    header += b"".join(infos)
    header += b"\0" * _pad(len(header))
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(header)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
