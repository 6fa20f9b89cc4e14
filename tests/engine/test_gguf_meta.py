"""engine/gguf_meta.py reads a GGUF's key-value section straight from the file (the tokenizer's
metadata, without the `gguf` package's per-part objects), and engine/harness/common.py's
`top_k_rows` (score.py's top-k of a block of rows)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from engine.errors import EngineError
from engine.gguf_meta import read_metadata
from engine.harness.common import top_k, top_k_rows

TOKENIZER_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type")


@pytest.fixture(scope="module")
def gguf_fields(smollm2_path: Path) -> dict[str, object]:
    """Every key-value of the SmolLM2 file as the `gguf` package reads it (GGUF.* are the
    reader's own header fields, not metadata)."""
    from gguf import GGUFReader

    reader = GGUFReader(smollm2_path)
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def test_the_tokenizer_metadata_is_the_gguf_readers(
    smollm2_path: Path, gguf_fields: dict[str, object]
) -> None:
    meta = read_metadata(smollm2_path, set(TOKENIZER_KEYS))
    assert set(meta) == set(TOKENIZER_KEYS)
    tokens, merges, types = (meta[k] for k in TOKENIZER_KEYS)
    assert len(tokens) == 49152 and len(types) == len(tokens) and len(merges) > 40000
    for key in TOKENIZER_KEYS:
        assert meta[key] == gguf_fields[key], key
    assert all(isinstance(t, str) for t in tokens) and all(isinstance(t, int) for t in types)


def test_every_key_reads_as_the_gguf_reader_reads_it(
    smollm2_path: Path, gguf_fields: dict[str, object]
) -> None:
    """Strings, integers, floats (float32, exactly), booleans and arrays of each."""
    meta = read_metadata(smollm2_path, {*gguf_fields, "no.such.key"})
    assert meta == gguf_fields  # an absent key is left out
    assert read_metadata(smollm2_path, set()) == {}
    kinds = {type(v) for v in meta.values()}
    assert {str, int, float, bool, list} <= kinds


def _cut(src: Path, dst: Path, size: int) -> Path:
    with src.open("rb") as fh:
        dst.write_bytes(fh.read(size))
    return dst


def _metadata_end(path: Path) -> int:
    """Where the key-value section ends: past the last value (read by a walk of our own)."""
    with path.open("rb") as fh:
        data = fh.read(8 * 2**20)
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    pos = 24
    fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(vtype: int) -> None:
        nonlocal pos
        if vtype in fixed:
            pos += fixed[vtype]
        elif vtype == 8:
            pos += 8 + struct.unpack_from("<Q", data, pos)[0]
        else:
            etype, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(count):
                skip(etype)

    for _ in range(n_kv):
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
        vtype = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        skip(vtype)
    return pos


@pytest.mark.parametrize("where", [0.1, 0.5, 0.999], ids=["early", "in-the-vocab", "last-byte"])
def test_a_truncated_file_is_refused(smollm2_path: Path, tmp_path: Path, where: float) -> None:
    end = _metadata_end(smollm2_path)
    cut = _cut(smollm2_path, tmp_path / "cut.gguf", max(25, int(end * where)))
    with pytest.raises(EngineError, match="truncated GGUF metadata"):
        read_metadata(cut, set(TOKENIZER_KEYS))
    # the whole section, and nothing after it, is enough
    whole = _cut(smollm2_path, tmp_path / "whole.gguf", end)
    assert len(read_metadata(whole, {"tokenizer.ggml.tokens"})["tokenizer.ggml.tokens"]) == 49152


def test_what_is_not_a_gguf_is_refused(smollm2_path: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="not a GGUF file"):
        read_metadata(_cut(smollm2_path, tmp_path / "head.gguf", 20), set())
    (tmp_path / "text.gguf").write_text("hello, this is not a model file at all")
    with pytest.raises(EngineError, match="not a GGUF file"):
        read_metadata(tmp_path / "text.gguf", set())
    with pytest.raises(EngineError, match="cannot read"):
        read_metadata(tmp_path / "absent.gguf", set())
    old = bytearray(_cut(smollm2_path, tmp_path / "v1.gguf", 4096).read_bytes())
    old[4:8] = struct.pack("<I", 1)
    (tmp_path / "v1.gguf").write_bytes(bytes(old))
    with pytest.raises(EngineError, match="version 1"):
        read_metadata(tmp_path / "v1.gguf", set())


def test_an_unknown_value_type_is_refused(tmp_path: Path) -> None:
    key = b"general.odd"
    raw = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    (tmp_path / "odd.gguf").write_bytes(raw + struct.pack("<I", 99) + b"\0" * 8)
    with pytest.raises(EngineError, match="unknown GGUF metadata type 99"):
        read_metadata(tmp_path / "odd.gguf", {"general.odd"})


# --- top_k_rows --------------------------------------------------------------------------------


def _reference(row: np.ndarray, k: int) -> list[int]:
    """The k largest entries' ids, largest first, ties by the smaller id: a full sort."""
    return sorted(range(len(row)), key=lambda i: (-float(row[i]), i))[:k]


@pytest.mark.parametrize("values", ["continuous", "few-distinct"])
def test_top_k_rows_is_top_k_row_by_row(values: str) -> None:
    """On random blocks, with ties everywhere (few distinct values: many straddle the k-th
    place) or almost nowhere, every row's ids are the full sort's, ties to the smaller id. Rows
    long enough for the block maxima (64 entries to a block, at least 4k blocks) and shorter."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        n, vocab = int(rng.integers(1, 6)), int(rng.integers(1, 300 if _ % 2 else 5000))
        if values == "continuous":
            rows = (rng.standard_normal((n, vocab)) * 5).astype(np.float32)
        else:
            rows = rng.integers(-2, 3, size=(n, vocab)).astype(np.float32)
        k = int(rng.integers(1, vocab + 5))  # also k >= vocab: the whole row, sorted
        got = top_k_rows(rows, k)
        assert got.shape == (n, min(k, vocab))
        for r in range(n):
            assert [int(i) for i in got[r]] == top_k(rows[r], k) == _reference(rows[r], k)


def test_top_k_rows_of_a_tie_straddling_the_kth_place() -> None:
    row = np.array([0.0, 5.0, 1.0, 1.0, 1.0, 1.0, 9.0, 1.0], dtype=np.float32)
    assert top_k_rows(np.stack([row, row[::-1]]), 4).tolist() == [[6, 1, 2, 3], [1, 6, 0, 2]]
    assert top_k_rows(np.zeros((2, 50), dtype=np.float32), 3).tolist() == [[0, 1, 2]] * 2
    assert top_k_rows(np.zeros((2, 5000), dtype=np.float32), 3).tolist() == [[0, 1, 2]] * 2


def test_top_k_rows_of_rows_with_nan_and_inf() -> None:
    """Long rows with NaN or infinities (score refuses non-finite logits, but a digest may be
    asked of anything): infinities rank as numbers, a NaN never ranks, an all-NaN row still
    gives k ids."""
    rows = np.random.default_rng(3).standard_normal((3, 5000)).astype(np.float32)
    rows[0, 7], rows[1, :] = np.nan, np.nan
    rows[2, 9], rows[2, 11] = np.inf, -np.inf
    got = top_k_rows(rows, 5)
    finite = rows[0].copy()
    finite[7] = -np.inf
    assert got[0].tolist() == _reference(finite, 5)
    assert got[2].tolist() == _reference(rows[2], 5) and got[2, 0] == 9
    assert got.shape == (3, 5)
