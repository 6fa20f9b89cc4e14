"""A GGUF file's metadata (its key-value section), read straight from the header.

The `gguf` package's reader builds an object for every part of every field before one can be
read: for a 49k-token vocabulary that is ~150,000 parts and most of a second and a half, paid by
every process that only needs the tokenizer (a score, a prefill check, a timing parent drawing
prompts). This reads the section in one pass and decodes only the keys asked for; the tensors
are still read by gguf_file.py.

Format (GGUF v2/v3, little-endian): magic "GGUF", version u32, tensor count u64, kv count u64,
then per kv: key (u64 length + UTF-8), value type u32, value. A string is a u64 length and its
bytes; an array is an element type u32, a count u64, then the elements.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import EngineError

# value type -> (struct format, numpy dtype) of the fixed-size types
_FIXED: dict[int, tuple[str, str]] = {
    0: ("<B", "<u1"),
    1: ("<b", "<i1"),
    2: ("<H", "<u2"),
    3: ("<h", "<i2"),
    4: ("<I", "<u4"),
    5: ("<i", "<i4"),
    6: ("<f", "<f4"),
    7: ("<?", "<u1"),  # bool
    10: ("<Q", "<u8"),
    11: ("<q", "<i8"),
    12: ("<d", "<f8"),
}
_STRING, _ARRAY = 8, 9


class _Cursor:
    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.pos, self.path = memoryview(data), 0, path

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise EngineError(f"{self.path}: truncated GGUF metadata")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> bytes:
        return bytes(self.take(self.unpack("<Q")))

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype in _FIXED:
            v = self.unpack(_FIXED[vtype][0])
            return bool(v) if vtype == 7 else v
        if vtype == _STRING:
            raw = self.string()
            return raw.decode("utf-8") if keep else None
        if vtype == _ARRAY:
            etype, count = self.unpack("<I"), self.unpack("<Q")
            if etype in _FIXED:
                dtype = np.dtype(_FIXED[etype][1])
                arr = np.frombuffer(self.take(count * dtype.itemsize), dtype=dtype)
                return arr.tolist() if keep else None
            items = [self.value(etype, keep) for _ in range(count)]
            return items if keep else None
        raise EngineError(f"{self.path}: unknown GGUF metadata type {vtype}")


def read_metadata(path: str | Path, keys: set[str]) -> dict[str, Any]:
    """The values of `keys` found in the GGUF file's metadata (absent keys are left out); an
    EngineError for a file that is not a readable GGUF."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            head = fh.read(24)
            if len(head) < 24 or head[:4] != b"GGUF":
                raise EngineError(f"not a GGUF file (bad magic {head[:4]!r}): {p}")
            version, _n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
            if version < 2:
                raise EngineError(f"{p}: GGUF version {version} is not supported")
            data = fh.read(_META_BYTES)
    except OSError as exc:
        raise EngineError(f"cannot read {p}: {exc.strerror or exc}") from None
    cur = _Cursor(data, p)
    out: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string().decode("utf-8", errors="replace")
        vtype = cur.unpack("<I")
        value = cur.value(vtype, key in keys)
        if key in keys:
            out[key] = value
    return out


# The metadata of the models we run fits in a few MB (SmolLM2's vocabulary and merges: ~1.3 MB);
# a larger section is read by the `gguf` package instead (read_metadata raises: truncated).
_META_BYTES = 64 * 2**20
