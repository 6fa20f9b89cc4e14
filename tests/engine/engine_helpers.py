"""Helpers shared by the engine tests (imported by name: tests/engine is on sys.path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def run_engine(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m engine ARGS` in a subprocess, as a user would run it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SPARKBOARD_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "engine", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def checkout_with(
    tmp_path: Path,
    *edits: tuple[str, str],
    file: str = "engine/numpy_backend.py",
    append: str = "",
    name: str = "checkout",
) -> Path:
    """A copy of this repo's engine/ and data/ (a PR's checkout, as the timing parent sees one)
    with text edits in `file` (each old text found exactly once) and `append` added to
    engine/__init__.py (code every process of that engine runs at its first import)."""
    dst = tmp_path / name
    shutil.copytree(REPO / "engine", dst / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "data", dst / "data", ignore=shutil.ignore_patterns("*.duckdb"))
    target = dst / file
    for old, new in edits:
        text = target.read_text()
        assert text.count(old) == 1, f"{old!r} is not in {file} exactly once"
        target.write_text(text.replace(old, new))
    if append:
        init = dst / "engine" / "__init__.py"
        init.write_text(init.read_text() + "\n" + append)
    return dst


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def kl_top1(ref_logits: np.ndarray, logits: np.ndarray) -> tuple[float, float, float]:
    """(top-1 agreement, mean KL(ref || other), max KL) over rows of logits."""
    a, b = log_softmax(ref_logits), log_softmax(logits)
    kl = np.sum(np.exp(a) * (a - b), axis=-1)
    return float(np.mean(a.argmax(-1) == b.argmax(-1))), float(kl.mean()), float(kl.max())


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit 2, exactly one stderr line starting `error: `, no traceback, fragments present."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    for f in fragments:
        assert f.lower() in lines[0].lower(), (f, lines[0])
