"""llama.cpp's logits files (`llama-perplexity --kl-divergence-base FILE`), read and compared here.

A served engine's accuracy is judged on the log-probs its own perplexity tool writes for a fixed
text: main's build writes one file, the PR's build another, each sealed, and this code (main's
harness, never the PR's) compares them: KL(main || PR) per scored token, how often the two
agree on the top token (and, where they do not, how far the PR's top token lies below main's
under main's log-probs: a near-tie or a wrong token, the collector's bars tell), and the ratio of
their perplexities of the text. The PR's file is only
data to it: its header, size and tokens are checked before any number is read.

The format (llama.cpp tools/perplexity/perplexity.cpp): "_logits_", n_ctx, n_vocab, n_chunk
(int32 each), the text's first n_chunk * n_ctx tokens (int32), then per chunk the scored
positions (the second half of the window, n_ctx - 1 - n_ctx/2 of them), each a row of
nv = 2 * ceil(n_vocab / 2) + 4 uint16: a float32 scale and a float32 minimum log-prob, then each
token's log-prob quantized, log p = scale * q + minimum.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"_logits_"
MAX_VOCAB = 1 << 20
MAX_CTX = 1 << 20
MAX_CHUNKS = 1 << 16
BLOCK_ROWS = 64  # rows decoded at a time (49,152 log-probs each)


class LogitsFileError(Exception):
    """The file is not a logits file llama.cpp writes; the text says why."""


@dataclass(frozen=True)
class LogitsFile:
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray  # int32 [n_chunk * n_ctx]
    rows: np.ndarray  # uint16 [n_chunk * scored, nv], memory-mapped

    @property
    def scored(self) -> int:
        """Scored positions per chunk."""
        return self.n_ctx - 1 - self.n_ctx // 2

    def next_tokens(self) -> np.ndarray:
        """The token each row's log-probs predict (the text's next token at that position)."""
        first = self.n_ctx // 2
        pos = np.arange(first, self.n_ctx - 1) + 1
        return np.concatenate([self.tokens[c * self.n_ctx + pos] for c in range(self.n_chunk)])

    def log_probs(self, start: int, stop: int) -> np.ndarray:
        """Rows start..stop as float64 log-probs [rows, n_vocab], renormalised (quantized
        log-probs do not sum to one exactly)."""
        block = np.asarray(self.rows[start:stop])
        head = np.ascontiguousarray(block[:, :4]).view(np.float32)
        scale, low = head[:, :1].astype(np.float64), head[:, 1:2].astype(np.float64)
        lp = scale * block[:, 4 : 4 + self.n_vocab].astype(np.float64) + low
        m = lp.max(axis=1, keepdims=True)
        return lp - (m + np.log(np.exp(lp - m).sum(axis=1, keepdims=True)))


def read_logits(path: Path) -> LogitsFile:
    """A logits file, its header and size checked first."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:8] != MAGIC:
        raise LogitsFileError(f"{path.name}: not a llama.cpp logits file")
    n_ctx, n_vocab, n_chunk = (int(x) for x in np.frombuffer(head[8:20], dtype="<i4"))
    if not (2 <= n_ctx <= MAX_CTX and 1 <= n_vocab <= MAX_VOCAB and 1 <= n_chunk <= MAX_CHUNKS):
        raise LogitsFileError(f"{path.name}: n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}")
    nv = 2 * ((n_vocab + 1) // 2) + 4
    n_tokens = n_chunk * n_ctx
    n_rows = n_chunk * (n_ctx - 1 - n_ctx // 2)
    expected = 20 + 4 * n_tokens + 2 * n_rows * nv
    if size != expected:
        raise LogitsFileError(f"{path.name}: {size} bytes, its header says {expected}")
    tokens = np.fromfile(path, dtype="<i4", count=n_tokens, offset=20)
    if tokens.min() < 0 or tokens.max() >= n_vocab:
        raise LogitsFileError(f"{path.name}: tokens outside the vocabulary of {n_vocab}")
    rows = np.memmap(path, dtype="<u2", mode="r", offset=20 + 4 * n_tokens, shape=(n_rows, nv))
    return LogitsFile(n_ctx, n_vocab, n_chunk, tokens, rows)


@dataclass(frozen=True)
class Agreement:
    """How the PR's log-probs of the text compare with main's."""

    tokens: int  # scored positions
    kl_mean: float
    kl_p99: float
    kl_max: float
    same_top: float  # share of positions where the two agree on the top token
    # where they do not: main's log-prob of its own top token minus main's log-prob of the PR's
    # (nats, ascending); a near-tie that another summation order flips is a small gap, a wrong
    # top token a large one (the collector's tie margin tells them apart)
    top_gaps: list[float]
    ppl_main: float  # main's perplexity of the text
    ppl_pr: float  # the PR's
    ppl_ratio: float  # ppl_pr / ppl_main


def compare(main: LogitsFile, pr: LogitsFile) -> Agreement:
    """KL(main || PR), the top-token agreement and the perplexity ratio, position by position."""
    if (main.n_ctx, main.n_vocab, main.n_chunk) != (pr.n_ctx, pr.n_vocab, pr.n_chunk):
        raise LogitsFileError("the two files are of different shapes")
    if not np.array_equal(main.tokens, pr.tokens):
        raise LogitsFileError("the PR's build tokenized the text otherwise than main's")
    nxt = main.next_tokens()
    kls, gaps, nll_main, nll_pr = [], [], 0.0, 0.0
    n = len(main.rows)
    for start in range(0, n, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, n)
        p, q = main.log_probs(start, stop), pr.log_probs(start, stop)
        kls.append(np.sum(np.exp(p) * (p - q), axis=1))
        rows = np.arange(stop - start)
        top_main, top_pr = p.argmax(axis=1), q.argmax(axis=1)
        differ = top_main != top_pr
        gaps.append((p[rows, top_main] - p[rows, top_pr])[differ])
        nll_main -= float(p[rows, nxt[start:stop]].sum())
        nll_pr -= float(q[rows, nxt[start:stop]].sum())
    kl = np.maximum(np.concatenate(kls), 0.0)
    flips = np.concatenate(gaps)
    return Agreement(
        tokens=n,
        kl_mean=float(kl.mean()),
        kl_p99=float(np.quantile(kl, 0.99)),
        kl_max=float(kl.max()),
        same_top=(n - len(flips)) / n,
        top_gaps=sorted(round(max(float(g), 0.0), 6) for g in flips),
        ppl_main=float(np.exp(nll_main / n)),
        ppl_pr=float(np.exp(nll_pr / n)),
        ppl_ratio=float(np.exp((nll_pr - nll_main) / n)),
    )
