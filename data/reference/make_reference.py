"""Regenerate the independent reference dump: llama.cpp's teacher-forced pass of SmolLM2.

Runs in a throwaway venv that holds llama-cpp-python (never a project dependency):

    python3 -m venv /tmp/lcpp && /tmp/lcpp/bin/pip install llama-cpp-python==0.3.36 numpy
    /tmp/lcpp/bin/python data/reference/make_reference.py

The token ids are the engine's, not llama.cpp's: a subprocess of the project venv encodes the
corpus with `engine.harness.common.encode_text` (and names the GGUF file and its model_id), and
exactly those ids are fed to llama.cpp with logits_all=True on the CPU. Each position is then
scored like `engine.harness.score.score_rows` does (argmax and top-k on the float32 logits,
log-probs in float64, top-k sorted by log-prob, ties by the smaller id), and the document is
written as a `ScoreResult` that `parse_document(raw, "score")` accepts; the project venv checks
that before the script returns. Log-probs are rounded to DECIMALS places to keep the file small.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"
DEFAULT_OUT = REPO_ROOT / "data" / "reference" / f"{MODEL}.llama-cpp.json"
DEFAULT_TEXT = REPO_ROOT / "data" / "corpus.txt"
POLICY = REPO_ROOT / "collector" / "policy.toml"
DECIMALS = 5  # 5e-6 nats of rounding: far below any distance the gate cares about
N_BATCH = 512

# Runs in the project venv: the engine's ids of the text, the GGUF path, its model_id and the
# protocol's schema version.
_ENGINE_SIDE = r"""
import json, sys
from engine.harness.common import encode_text, read_text_file
from engine.harness.protocol import SCHEMA_VERSION
from engine.models import model_id, open_tokenizer, smollm2_path
model, text_file = sys.argv[1:3]
ids = encode_text(open_tokenizer(model), read_text_file(text_file))
print(json.dumps({"path": str(smollm2_path()), "model_id": model_id(model), "tokens": ids,
                  "schema_version": SCHEMA_VERSION}))
"""

# Runs in the project venv: the written file must parse as a score document.
_VALIDATE = r"""
import sys
from pathlib import Path
from engine.harness.protocol import parse_document
doc = parse_document(Path(sys.argv[1]).read_bytes(), "score")
print(f"{sys.argv[1]}: valid score document, {len(doc.positions)} positions, topk {doc.topk}")
"""


def policy_topk() -> int:
    """The top-k the collector's accuracy gate asks of every dump ([accuracy] topk)."""
    return int(tomllib.loads(POLICY.read_text(encoding="utf-8"))["accuracy"]["topk"])


def run_project(python: str, code: str, *args: str) -> str:
    res = subprocess.run(
        [python, "-c", code, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if res.returncode != 0:
        sys.exit(f"project venv ({python}) failed:\n{res.stderr}")
    return res.stdout


def llama_logits(gguf: str, ids: list[int], threads: int) -> np.ndarray:
    """llama.cpp's float32 logits of the teacher-forced pass: row i predicts ids[i + 1]."""
    from llama_cpp import Llama

    llm = Llama(
        model_path=gguf,
        n_ctx=len(ids),
        n_batch=N_BATCH,
        n_threads=threads,
        logits_all=True,
        verbose=False,
    )
    if llm.n_ctx() < len(ids) - 1:
        sys.exit(f"llama.cpp gave a context of {llm.n_ctx()}, need {len(ids) - 1}")
    llm.eval(ids[:-1])  # the last token predicts nothing that is scored
    return np.array(llm.scores[: len(ids) - 1], dtype=np.float32)


def score_positions(logits: np.ndarray, targets: list[int], topk: int) -> list[dict]:
    """The ScoredPosition rows, picked and ordered as engine.harness.score.score_rows does."""
    x64 = logits.astype(np.float64)
    peak = x64.max(axis=1, keepdims=True)
    lse = peak[:, 0] + np.log(np.exp(x64 - peak).sum(axis=1))
    cand = np.argpartition(-logits, topk - 1, axis=1)[:, :topk]

    def lp(row: int, ids: np.ndarray) -> np.ndarray:
        return np.minimum(np.round(x64[row, ids] - lse[row], DECIMALS), 0.0)

    out = []
    for r, target in enumerate(targets):
        ids = cand[r][np.lexsort((cand[r], -logits[r, cand[r]]))]
        out.append(
            {
                "argmax": int(logits[r].argmax()),
                "target_logprob": float(lp(r, np.array([target]))[0]),
                "topk": [[int(i), float(v)] for i, v in zip(ids, lp(r, ids), strict=True)],
            }
        )
    return out


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.machine() or "unknown CPU"


def ggml_build() -> str:
    """The bundled ggml's version and commit as the library reports them ("0.25.3-0c1e570")."""
    import ctypes

    from llama_cpp._ggml import libggml

    parts = []
    for name in ("ggml_version", "ggml_commit"):
        fn = getattr(libggml, name, None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            parts.append(fn().decode())
    return "-".join(parts) or "unknown"


def header(engine: dict, started_at: str, wall_s: float) -> dict:
    """A Header that says the numbers are llama.cpp's on the CPU, not the engine's."""
    import llama_cpp

    version = llama_cpp.__version__
    return {
        "schema_version": engine["schema_version"],
        "model": MODEL,
        "model_id": f"{engine['model_id']} via llama.cpp",
        "engine_commit": f"llama-cpp-python-{version} ggml-{ggml_build()}"[:64],
        # the protocol knows two backends; "numpy" is the nearest (host CPU, no GPU)
        "device": {
            "backend": "numpy",
            "name": f"llama.cpp (CPU): {cpu_name()}"[:200],
            "driver": None,
            "runtime": f"llama-cpp-python {version}",
            "host": socket.gethostname()[:200],
        },
        "started_at": started_at,
        "wall_s": round(wall_s, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project-python", default=str(REPO_ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--text-file", default=str(DEFAULT_TEXT))
    ap.add_argument("--topk", type=int, default=None, help="default: policy's [accuracy] topk")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()

    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    topk = args.topk or policy_topk()
    engine = json.loads(run_project(args.project_python, _ENGINE_SIDE, MODEL, args.text_file))
    ids = engine["tokens"]
    logits = llama_logits(engine["path"], ids, args.threads)
    positions = score_positions(logits, ids[1:], topk)
    doc = {
        **header(engine, started_at, time.perf_counter() - t0),
        "kind": "score",
        "topk": topk,
        "tokens": ids,
        "positions": positions,
    }
    Path(args.out).write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    ppl = float(np.exp(-np.mean([p["target_logprob"] for p in positions])))
    print(f"{len(positions)} positions, perplexity {ppl:.4f}, {Path(args.out).stat().st_size} B")
    print(run_project(args.project_python, _VALIDATE, args.out), end="")


if __name__ == "__main__":
    main()
