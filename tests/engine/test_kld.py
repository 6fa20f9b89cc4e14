"""llama.cpp's logits files (engine/harness/kld.py): read strictly, compared in main's harness.
The files here are written in llama-perplexity's format by `write_logits` from known log-probs,
so the KL, the top-token agreement and the perplexity ratio have exact expected values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.harness.kld import LogitsFileError, compare, read_logits

N_CTX, N_VOCAB, N_CHUNK = 8, 5, 2
SCORED = N_CTX - 1 - N_CTX // 2  # 3 rows a chunk


def write_logits(path: Path, logits: np.ndarray, tokens: np.ndarray) -> None:
    """logits [rows, vocab] quantized as llama-perplexity does (min clamped at max - 16)."""
    nv = 2 * ((N_VOCAB + 1) // 2) + 4
    rows = np.zeros((len(logits), nv), dtype="<u2")
    for i, x in enumerate(logits.astype(np.float32)):
        mx, mn = x.max(), max(x.min(), x.max() - 16)
        lse = np.log(np.exp(x - mx).sum())
        scale = np.float32((mx - mn) / 65535.0)
        head = np.array([scale, mn - mx - lse], dtype=np.float32).view("<u2")
        rows[i, :4] = head
        if scale:  # a flat row is all zeros (as llama.cpp writes it)
            rows[i, 4 : 4 + N_VOCAB] = np.rint((np.maximum(x, mn) - mn) / scale).astype(np.uint16)
    with open(path, "wb") as f:
        f.write(b"_logits_")
        f.write(np.array([N_CTX, N_VOCAB, N_CHUNK], dtype="<i4").tobytes())
        f.write(tokens.astype("<i4").tobytes())
        f.write(rows.tobytes())


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


@pytest.fixture
def text() -> np.ndarray:
    return np.random.default_rng(0).integers(0, N_VOCAB, N_CHUNK * N_CTX)


def test_the_same_logits_agree_and_others_are_measured_exactly(
    tmp_path: Path, text: np.ndarray
) -> None:
    rng = np.random.default_rng(1)
    main = rng.normal(0, 2, (N_CHUNK * SCORED, N_VOCAB))
    write_logits(tmp_path / "main.bin", main, text)
    write_logits(tmp_path / "same.bin", main, text)
    a = compare(read_logits(tmp_path / "main.bin"), read_logits(tmp_path / "same.bin"))
    assert (a.tokens, a.same_top, a.ppl_ratio) == (6, 1.0, 1.0) and a.kl_max < 1e-9
    other = main + rng.normal(0, 0.5, main.shape)
    write_logits(tmp_path / "other.bin", other, text)
    b = compare(read_logits(tmp_path / "main.bin"), read_logits(tmp_path / "other.bin"))
    p, q = log_softmax(main), log_softmax(other)
    kl = (np.exp(p) * (p - q)).sum(axis=1)
    assert b.kl_mean == pytest.approx(kl.mean(), rel=1e-3)
    assert b.kl_max == pytest.approx(kl.max(), rel=1e-3)
    assert b.same_top == np.mean(p.argmax(1) == q.argmax(1))
    # each flip's gap: main's log-prob of its own top minus of the PR's top, under main's
    rows = np.arange(len(p))
    flips = p.argmax(1) != q.argmax(1)
    gaps = (p[rows, p.argmax(1)] - p[rows, q.argmax(1)])[flips]
    assert len(b.top_gaps) == flips.sum() and b.top_gaps == sorted(b.top_gaps)
    assert b.top_gaps == pytest.approx(sorted(gaps), abs=1e-3)
    # the next token of each scored position: chunk c's positions 4..6 predict 5..7
    nxt = np.concatenate([text[c * N_CTX + 5 : c * N_CTX + 8] for c in range(N_CHUNK)])
    rows = np.arange(len(nxt))
    ratio = np.exp((p[rows, nxt] - q[rows, nxt]).mean())
    assert b.ppl_ratio == pytest.approx(ratio, rel=1e-3)


def test_a_file_not_as_llama_cpp_writes_it_is_refused(tmp_path: Path, text: np.ndarray) -> None:
    logits = np.zeros((N_CHUNK * SCORED, N_VOCAB))
    good = tmp_path / "good.bin"
    write_logits(good, logits, text)
    short = tmp_path / "short.bin"
    short.write_bytes(good.read_bytes()[:-2])
    with pytest.raises(LogitsFileError, match="its header says"):
        read_logits(short)
    (tmp_path / "junk.bin").write_bytes(b"not logits at all")
    with pytest.raises(LogitsFileError, match="not a llama.cpp logits file"):
        read_logits(tmp_path / "junk.bin")
    bad = text.copy()
    bad[3] = N_VOCAB + 4
    write_logits(tmp_path / "bad.bin", logits, bad)
    with pytest.raises(LogitsFileError, match="outside the vocabulary"):
        read_logits(tmp_path / "bad.bin")
    other = text.copy()
    other[0] = (other[0] + 1) % N_VOCAB
    write_logits(tmp_path / "other.bin", logits, other)
    with pytest.raises(LogitsFileError, match="tokenized the text otherwise"):
        compare(read_logits(good), read_logits(tmp_path / "other.bin"))
