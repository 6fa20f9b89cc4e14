"""Plumbing shared by the bench-protocol commands (engine.harness.bench, engine.harness.score).

One job: everything around a measurement that is not the measurement itself — parsing the
comma lists the commands take, the document header (model id, engine commit, device, clock),
the evaluation corpus, writing the JSON atomically, and turning user errors into one line on
stderr with exit code 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import click
import numpy as np
from pydantic import BaseModel

from engine.cli_common import run_group
from engine.config import ModelConfig
from engine.errors import EngineError, EngineOutputError  # noqa: F401 (re-exported)
from engine.harness.device_info import describe_device
from engine.harness.protocol import DeviceInfo
from engine.runner import Runner

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = REPO_ROOT / "data" / "corpus.txt"
BACKENDS = ("numpy", "cupy", "auto")

BACKEND_HELP = "numpy, cupy, or auto (CuPy when a GPU is usable)."
OUT_HELP = "Where to write the JSON document ('-' = stdout); written atomically."

# The two options every harness command takes, with one wording.
out_option = click.option("--out", default="-", show_default=True, help=OUT_HELP)
backend_option = click.option(
    "--backend", type=click.Choice(BACKENDS), default="auto", show_default=True, help=BACKEND_HELP
)

GIT_TIMEOUT_S = 10


# --- command-line values -------------------------------------------------------------------


def parse_int_list(text: str, what: str) -> list[int]:
    """'128,512' -> [128, 512]; positive, distinct integers, else an EngineError naming `what`."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise EngineError(
            f"bad {what} list {text!r}: expected comma-separated integers, e.g. 128,512"
        )
    values: list[int] = []
    for p in parts:
        try:
            v = int(p, 10)
        except ValueError:
            raise EngineError(f"bad {what} list {text!r}: {p!r} is not an integer") from None
        if v <= 0:
            raise EngineError(f"bad {what} list {text!r}: {v} is not positive")
        if v in values:
            raise EngineError(f"bad {what} list {text!r}: {v} appears twice")
        values.append(v)
    return values


def require_positive(value: int, option: str) -> None:
    if value <= 0:
        raise EngineError(f"{option} must be positive, got {value}")


def require_non_negative(value: int, option: str) -> None:
    if value < 0:
        raise EngineError(f"{option} must not be negative, got {value}")


# --- the document header -------------------------------------------------------------------


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def engine_commit(checkout: Path | None = None) -> str:
    """git HEAD of `checkout` (default: the one this engine package lives in), or 'unknown'."""
    try:
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=checkout or Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    head = res.stdout.strip()
    if res.returncode != 0 or not head or len(head) > 64 or not head.isalnum():
        return "unknown"
    return head


def model_id_of(runner: object, model: str) -> str:
    """The weights' identity (file sha256 prefix or dummy spec), from the runner if it says."""
    for attr in ("model_id", "weights_id"):
        value = getattr(runner, attr, None)
        if isinstance(value, str) and value:
            return value[:200]
    return model


class Clock:
    """Start time and wall clock of one command, for the document header, and when each phase
    of a measuring session ended (Measured.phases)."""

    def __init__(self) -> None:
        self.started_at = utc_now_iso()
        self._t0 = time.perf_counter()
        self.phases: dict[str, float] = {}

    def wall_s(self) -> float:
        return time.perf_counter() - self._t0

    def mark(self, phase: str) -> None:
        """`phase` ended now (seconds from the command's start)."""
        self.phases[phase] = round(self.wall_s(), 3)


def header(model: str, runner: object, clock: Clock) -> dict[str, object]:
    """Fields every document carries (see engine.harness.protocol.Header)."""
    device: DeviceInfo = describe_device(getattr(runner, "backend", "numpy"))
    return {
        "model": model,
        "model_id": model_id_of(runner, model),
        "engine_commit": engine_commit(),
        "device": device,
        "started_at": clock.started_at,
        "wall_s": clock.wall_s(),
    }


# --- the corpus ----------------------------------------------------------------------------


def read_text_file(path: str | Path) -> str:
    """A UTF-8 text file that must contain something besides whitespace."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise EngineError(f"cannot read text file {str(path)!r}: {e}") from None
    if not text.strip():
        raise EngineError(f"text file {str(path)!r} is empty")
    return text


def encode_text(tokenizer: object, text: str) -> list[int]:
    """Token ids of `text` as the model expects them: the tokenizer adds BOS exactly when the
    model's GGUF says so (tokenizer.ggml.add_bos_token, as llama.cpp does). SmolLM2's says
    false, so its score starts at the text's first token."""
    return [int(i) for i in tokenizer.encode(text)]  # type: ignore[attr-defined]


def cycled(ids: Sequence[int], length: int, offset: int = 0) -> np.ndarray:
    """`length` ids taken from `ids` repeated end to end, starting at `offset`."""
    if not ids:
        raise EngineError("no tokens to build a prompt from")
    src = np.asarray(ids, dtype=np.int64)
    idx = (np.arange(length, dtype=np.int64) + offset) % len(src)
    return src[idx]


def corpus_prompt_ids(model: str, vocab_size: int) -> list[int]:
    """Deterministic prompt material: the corpus tokenized for `model`, folded into its vocab.

    Speed runs only need realistic, repeatable ids; folding keeps a dummy model whose vocab is
    smaller than its tokenizer's in range.
    """
    from engine.models import open_tokenizer  # late: the engine core is heavy to import

    ids = encode_text(open_tokenizer(model), read_text_file(DEFAULT_CORPUS))
    return [i % vocab_size for i in ids]


# --- output --------------------------------------------------------------------------------


def check_out(out: str) -> None:
    """Refuse an --out whose folder does not exist before measuring anything."""
    if out == "-":
        return
    parent = Path(out).parent
    if not parent.is_dir():
        raise EngineError(f"cannot write {out!r}: folder {str(parent)!r} does not exist")
    if Path(out).is_dir():
        raise EngineError(f"cannot write {out!r}: it is a folder")


def write_document(doc: BaseModel, out: str, compact: bool = False) -> None:
    """Write `doc` as JSON to `out` ('-' = stdout) atomically: FILE.tmp, then rename.

    Indented for reading, unless `compact` (a score dump is thousands of small lists)."""
    text = doc.model_dump_json(indent=None if compact else 1) + "\n"
    if out == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(out)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise EngineError(f"cannot write {out!r}: {e}") from None


def progress(message: str) -> None:
    """One plain progress line on stderr (stdout may carry the document)."""
    click.echo(message, err=True)


# --- running a command group ---------------------------------------------------------------


def cli_main(group: click.Group) -> Callable[[], None]:
    """Entry point for `python -m ...`: run the group (engine.cli_common.run_group) and exit."""

    def main() -> None:
        sys.exit(run_group(group))

    return main


def config_of(model: str) -> ModelConfig:
    """The model's config without loading weights, so bad input fails before any work."""
    from engine.models import model_config  # late: keeps --help fast

    return model_config(model)


def open_model(model: str, backend: str) -> Runner:
    from engine.models import open_runner

    return open_runner(model, backend)


# --- log-probs ------------------------------------------------------------------------------


def log_softmax_rows(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 of finite logits [rows, vocab]."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    return np.minimum(x - lse, 0.0)  # round-off must not push a log-prob above 0


def top_k(row: np.ndarray, k: int) -> list[int]:
    """The k largest entries' ids, largest first, ties by the smaller id."""
    return [int(i) for i in top_k_rows(row[None, :], k)[0]]


TOPK_BLOCK = 64  # entries to a block whose maximum top_k_rows reads first


def top_k_rows(rows: np.ndarray, k: int) -> np.ndarray:
    """top_k of each row of a block [n, vocab], at once: [n, k] ids.

    Only the entries at or above each row's k-th largest block maximum are sorted: k blocks
    hold an entry at least that large, so the k-th largest entry is too, and no entry of the
    top k (nor one tied with it) is left out. One pass over the block finds the candidates
    (a few dozen per row), where a partition of every row cost ~10 ns an entry, most of a CPU
    score session's time (measured 2026-12-03: 1.0 s of 3.5 s)."""
    n, vocab = rows.shape
    k = min(k, vocab)
    blocks = -(-vocab // TOPK_BLOCK)
    if n == 0 or blocks < 4 * k:
        return _top_k_rows_by_partition(rows, k)
    full = vocab // TOPK_BLOCK * TOPK_BLOCK
    maxima = np.empty((n, blocks), dtype=rows.dtype)
    maxima[:, : full // TOPK_BLOCK] = rows[:, :full].reshape(n, -1, TOPK_BLOCK).max(axis=2)
    if full < vocab:
        maxima[:, -1] = rows[:, full:].max(axis=1)
    floor = np.partition(maxima, blocks - k, axis=1)[:, blocks - k]
    r, c = np.nonzero(rows >= floor[:, None])
    counts = np.bincount(r, minlength=n)
    if counts.min() < k:  # a NaN among the maxima compares false: the rows as they are
        return _top_k_rows_by_partition(rows, k)
    order = np.lexsort((c, -rows[r, c], r))  # by row, then largest first, ties by smaller id
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return c[order][starts[:, None] + np.arange(k)]


def _top_k_rows_by_partition(rows: np.ndarray, k: int) -> np.ndarray:
    """top_k_rows by a partition of every row (short rows, and rows where a NaN hid one)."""
    cand = np.argpartition(-rows, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(rows, cand, axis=1)
    # argpartition picks any of the entries tied with the k-th largest: where it left one out,
    # that row's tie goes to the smallest ids
    kth = vals.min(axis=1, keepdims=True)
    for r in np.flatnonzero((rows == kth).sum(axis=1) > (vals == kth).sum(axis=1)):
        above = np.flatnonzero(rows[r] > kth[r, 0])
        cand[r] = np.concatenate([above, np.flatnonzero(rows[r] == kth[r, 0])[: k - len(above)]])
        vals[r] = rows[r, cand[r]]
    order = np.lexsort((cand, -vals), axis=1)
    return np.take_along_axis(cand, order, axis=1)
