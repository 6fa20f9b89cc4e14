"""The wire between the timing parent (`bench.py`) and the engine process (`serve.py`).

Two pipes, one message at a time each way: a 4-byte little-endian length, then that many bytes of
compact JSON (an object). Token ids travel as base64 of little-endian int32, so a 32k-token prompt
is 170 KB of text and one `np.frombuffer`, not 32k JSON numbers.

Both ends are pinned harness code; the engine process also runs the PR's engine, so everything the
parent reads here is untrusted: sizes are capped, and every field is checked by the reader.
"""

from __future__ import annotations

import base64
import json
import os
import struct

import numpy as np

MAX_MESSAGE = 64 * 2**20  # bytes; a larger message is a protocol violation
_LEN = struct.Struct("<I")


class WireError(Exception):
    """The other end closed the pipe or broke the protocol; the text says how."""


def send(fd: int, message: dict) -> None:
    data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > MAX_MESSAGE:
        raise WireError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    view = memoryview(_LEN.pack(len(data)) + data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            raise WireError("the other end closed the pipe") from None
        view = view[n:]


def _read_exactly(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    left = n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireError("the other end closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(fd: int) -> dict:
    (size,) = _LEN.unpack(_read_exactly(fd, _LEN.size))
    if size > MAX_MESSAGE:
        raise WireError(f"message of {size} bytes exceeds {MAX_MESSAGE}")
    try:
        message = json.loads(_read_exactly(fd, size))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"not JSON: {e}") from None
    if not isinstance(message, dict):
        raise WireError("a message must be a JSON object")
    return message


def pack_ids(ids: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(ids, dtype="<i4").tobytes()).decode("ascii")


def unpack_ids(text: object, count: int) -> np.ndarray:
    """`count` int32 ids from base64 text, or WireError."""
    if not isinstance(text, str):
        raise WireError("ids must be base64 text")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise WireError("ids are not valid base64") from None
    if len(raw) != 4 * count:
        raise WireError(f"expected {count} ids, got {len(raw) / 4:g}")
    return np.frombuffer(raw, dtype="<i4").astype(np.int64)
