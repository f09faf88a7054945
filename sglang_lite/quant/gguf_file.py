"""A GGUF file's tensor directory, read from its header without parsing its metadata arrays.

``gguf.GGUFReader`` builds numpy views for every metadata value (a 49k-token vocabulary is
hundreds of thousands of them: seconds); loading weights needs only the architecture string
and where each tensor lies. Layout (GGUF v2/v3): magic, version, tensor count, key-value count,
the key-values, the tensor infos (name, dims fastest first, type, offset), then the data,
aligned to ``general.alignment`` (32 by default).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    name: str
    type: int  # gguf.GGMLQuantizationType value
    shape: tuple[int, ...]  # slowest dim first (rows, cols), as torch sees it
    data: np.ndarray  # uint8 view into the memory-mapped file


@dataclass(frozen=True, slots=True)
class GGUFFile:
    architecture: str | None
    tensors: list[GGUFTensor]


class _Cursor:
    def __init__(self, buf: memoryview):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("Q")
        self.pos += n
        return bytes(self.buf[self.pos - n : self.pos]).decode("utf-8", "replace")

    def value(self, vtype: int):
        """The value of type ``vtype`` at the cursor; arrays are skipped (None)."""
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.take("I"), self.take("Q")
            if etype in _SCALARS:  # fixed-size elements: one step
                self.pos += count * struct.calcsize(_SCALARS[etype])
            else:
                for _ in range(count):
                    self.value(etype)
            return None
        return self.take(_SCALARS[vtype])


def read_gguf(path: Path) -> GGUFFile:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    mm = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(memoryview(mm))
    if bytes(mm[:4]) != b"GGUF":
        raise ValueError(f"model: {path} is not a GGUF file")
    cur.pos = 4
    version, n_tensors, n_kv = cur.take("I"), cur.take("Q"), cur.take("Q")
    if version < 2:
        raise ValueError(f"model: GGUF version {version} of {path} is not supported")
    meta = {}
    for _ in range(n_kv):
        key = cur.string()
        value = cur.value(cur.take("I"))
        if key in ("general.architecture", "general.alignment"):
            meta[key] = value
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        dims = [cur.take("Q") for _ in range(cur.take("I"))]
        infos.append((name, dims, cur.take("I"), cur.take("Q")))
    align = meta.get("general.alignment") or 32
    start = -(-cur.pos // align) * align
    tensors = []
    for name, dims, ttype, offset in infos:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ttype)]
        nbytes = int(np.prod(dims)) // block * size
        data = mm[start + offset : start + offset + nbytes]
        tensors.append(GGUFTensor(name, ttype, tuple(reversed(dims)), data))
    return GGUFFile(meta.get("general.architecture"), tensors)
