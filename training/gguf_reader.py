"""A small, independent GGUF reader (v2/v3) for checking peregrine's files from Python.

Layout: "GGUF", u32 version, u64 tensor_count, u64 kv_count, then kv pairs (string key, u32 type,
value), tensor infos (string name, u32 n_dims, u64 dims[n_dims], u32 type, u64 offset), padding to
general.alignment (default 32), tensor data. dims are ggml order: dims[0] is the contiguous one,
so a numpy view has shape reversed(dims).
"""
import struct
from pathlib import Path

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_TENSOR_DTYPES = {0: ("<f4", 4), 1: ("<f2", 2)}  # F32, F16 (numpy dtype, bytes): all the demo models use


class GgufFile:
    def __init__(self, path):
        self.path = Path(path)
        self.data = self.path.read_bytes()
        self.pos = 0
        if self.data[:4] != b"GGUF":
            raise ValueError(f"{self.path}: not a GGUF file")
        self.pos = 4
        self.version = self._scalar(4)
        if self.version not in (2, 3):
            raise ValueError(f"{self.path}: unsupported GGUF version {self.version}")
        n_tensors, n_kv = self._scalar(10), self._scalar(10)
        self.meta = {}
        for _ in range(n_kv):
            key = self._string()
            self.meta[key] = self._value(self._scalar(4))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = [self._scalar(10) for _ in range(self._scalar(4))]
            infos.append((name, dims, self._scalar(4), self._scalar(10)))
        align = int(self.meta.get("general.alignment", 32))
        base = (self.pos + align - 1) // align * align
        # name -> (dims, ggml type, bytes): the stored data, readable without numpy
        self.raw = {}
        for name, dims, ttype, offset in infos:
            if ttype not in _TENSOR_DTYPES:
                raise ValueError(f"{self.path}: tensor {name} has type {ttype}; only F32/F16 are read")
            count = 1
            for d in dims:
                count *= d
            start = base + offset
            end = start + count * _TENSOR_DTYPES[ttype][1]
            if end > len(self.data):
                raise ValueError(f"{self.path}: tensor {name} runs past the end of the file")
            self.raw[name] = (dims, ttype, memoryview(self.data)[start:end])
        self._tensors = None

    @property
    def tensors(self):
        """name -> numpy array of shape reversed(dims) (numpy is imported only here)."""
        if self._tensors is None:
            import numpy as np
            self._tensors = {name: np.frombuffer(buf, dtype=np.dtype(_TENSOR_DTYPES[t][0])).reshape(list(reversed(dims)))
                             for name, (dims, t, buf) in self.raw.items()}
        return self._tensors

    def _scalar(self, vtype):
        fmt = _SCALARS[vtype]
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def _string(self):
        n = self._scalar(10)
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def _value(self, vtype):
        if vtype == _STRING:
            return self._string()
        if vtype == _ARRAY:
            item_type, n = self._scalar(4), self._scalar(10)
            return [self._value(item_type) for _ in range(n)]
        return self._scalar(vtype)
