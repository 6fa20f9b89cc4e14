"""Accuracy bars from measurement: legitimate numerics variants and planted math errors of the
engine, each scored teacher-forced over data/corpus.txt and compared with main (issue 17).

    .venv/bin/python data/calibration/numerics.py                   # CPU table -> numerics.json
    .venv/bin/python data/calibration/numerics.py --backend cupy    # GPU table -> numerics-cupy.json

Per model, main (the unmodified runner) and every variant of variants.py score the corpus with
the procedure of `engine.harness.score score` (its score_tokens, or its score_rows over decode()
steps for the decode-path variants), and collector.judge.accuracy.compare_dumps(main, variant) gives
top-1, KL(main || variant) over the top-k union and the PPL ratio, as the accuracy gate does.
From the legitimate variants' worst numbers it proposes per-model bars, and checks that every
planted error falls outside them. README.md beside this file has the method and the results.

On the GPU every dump is made in a process of its own (the CUDA backend reads its knobs,
SPARKBOARD_ATTN_SPLITS, SPARKBOARD_KERNEL_DEFINES, ..., from the environment at import): this
script runs itself with `--dump-one VARIANT` per variant. Nothing here imports CuPy unless
`--backend cupy` is given.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click
import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO), str(HERE)]  # engine/, collector/ and variants.py, from any cwd

from variants import Variant, variants_for  # noqa: E402

from collector.judge.accuracy import compare_dumps  # noqa: E402
from collector.policy import load_policy  # noqa: E402
from engine.harness.common import Clock, encode_text, header, read_text_file  # noqa: E402
from engine.harness.protocol import ScoredPosition, ScoreResult  # noqa: E402
from engine.harness.score import SCORE_CHUNK, score_rows, score_tokens  # noqa: E402
from engine.runner import Runner  # noqa: E402
from engine.weights import ModelWeights  # noqa: E402

# Besides the profile's targets: the real model, and the qwen3 test model (its q/k norm)
EXTRA_MODELS = {"numpy": ["smollm2-135m", "tiny-qwen3"], "cupy": []}
# Bars: this many times the worst legitimate variant's excess (KL, 1 - top-1, PPL ratio - 1)
MARGIN = 3.0
DECODE_BLOCK = 256  # decode() rows scored together


@dataclass
class Row:
    model: str
    variant: str
    legit: bool
    int8: bool
    what: str
    top1: float
    kl: float
    ppl_ratio: float
    n_tokens: int
    seconds: float


# --- scoring -----------------------------------------------------------------------------------


def corpus_tokens(model: str, max_tokens: int) -> list[int]:
    """data/corpus.txt as the harness encodes it, cut to max_tokens (0: all of it)."""
    from engine.models import open_tokenizer

    tokens = encode_text(open_tokenizer(model), read_text_file(REPO / "data" / "corpus.txt"))
    return tokens[:max_tokens] if max_tokens else tokens


def score_by_decode(runner: Runner, tokens: list[int], topk: int) -> list[ScoredPosition]:
    """score_tokens' positions, each row made by one decode() step instead of a prefill."""
    ids = np.asarray(tokens, dtype=np.int64)
    n_pred = len(ids) - 1
    runner.reset(1, n_pred)
    out: list[ScoredPosition] = []
    for start in range(0, n_pred, DECODE_BLOCK):
        stop = min(start + DECODE_BLOCK, n_pred)
        rows = [np.asarray(runner.decode([0], ids[i : i + 1])) for i in range(start, stop)]
        logits = np.concatenate([r.reshape(1, -1) for r in rows])
        out += score_rows(logits, tokens[start + 1 : stop + 1], topk, f"at {start}..{stop - 1}")
    return out


def open_variant(variant: Variant | None, weights: ModelWeights, backend: str) -> Runner:
    """The variant's runner (None: main's) over the unmodified weights."""
    if variant is not None and variant.numpy_runner is not None:
        return variant.numpy_runner(weights)
    if variant is not None and variant.plant is not None:
        weights = variant.plant(weights)
    if backend == "cupy":
        from engine.cuda.runner import CupyRunner

        return CupyRunner(weights)
    from engine.numpy_backend import NumpyRunner

    return NumpyRunner(weights)


def score_dump(
    model: str,
    variant: Variant | None,
    weights: ModelWeights,
    backend: str,
    tokens: list[int],
    topk: int,
) -> dict:
    """A ScoreResult document (as a dict) of `variant` (None: main) over `tokens`."""
    clock = Clock()
    runner = open_variant(variant, weights, backend)
    if variant is not None and variant.decode:
        positions = score_by_decode(runner, tokens, topk)
    else:
        chunk = variant.chunk if variant is not None and variant.chunk else SCORE_CHUNK
        positions = score_tokens(runner, tokens, topk, chunk=chunk)
    doc = ScoreResult(**header(model, runner, clock), topk=topk, tokens=tokens, positions=positions)
    return doc.model_dump()


def dump_in_process_of_its_own(
    model: str, variant: Variant | None, max_tokens: int, topk: int, backend: str
) -> dict:
    """The variant's dump made by `--dump-one` in a fresh process with the variant's env."""
    env = {**os.environ, **(variant.env if variant else {})}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dump.json"
        cmd = [
            sys.executable, __file__, "--backend", backend, "--models", model,
            "--max-tokens", str(max_tokens), "--topk", str(topk),
            "--dump-one", variant.name if variant else "main", "--out", str(out),
        ]  # fmt: skip
        subprocess.run(cmd, env=env, check=True)
        return json.loads(out.read_text(encoding="utf-8"))


# --- the table -----------------------------------------------------------------------------------


def load_model(model: str, backend: str) -> ModelWeights:
    from engine.models import load_weights

    if backend == "cupy":
        import cupy

        return load_weights(model, cupy)
    return load_weights(model, np)


def measure_model(model: str, backend: str, max_tokens: int, topk: int) -> list[Row]:
    from engine.models import model_config

    own_process = backend == "cupy"  # the parent holds no GPU memory while its workers run
    weights = None if own_process else load_model(model, backend)
    tokens = corpus_tokens(model, max_tokens)

    def dump(variant: Variant | None) -> dict:
        if own_process:
            return dump_in_process_of_its_own(model, variant, max_tokens, topk, backend)
        assert weights is not None
        return score_dump(model, variant, weights, backend, tokens, topk)

    main = dump(None)
    rows = []
    for v in variants_for(backend):
        if not v.applies(model_config(model)):
            continue
        t0 = time.perf_counter()
        acc = compare_dumps(main, dump(v))
        row = Row(model, v.name, v.legit, v.int8, v.what, acc.top1, acc.kl, acc.ppl_ratio,
                  acc.n_tokens, time.perf_counter() - t0)  # fmt: skip
        print(format_row(row), flush=True)
        rows.append(row)
    return rows


def format_row(r: Row) -> str:
    kind = "legit" if r.legit else "ERROR"
    return (
        f"{r.model:<13} {r.variant:<27} {kind:<5} top-1 {r.top1:.4f}  KL {r.kl:9.3e}  "
        f"PPL x{r.ppl_ratio:.5f}  n {r.n_tokens}  {r.seconds:5.1f}s"
    )


# --- the proposal --------------------------------------------------------------------------------


def round_up(x: float, digits: int = 1) -> float:
    """x rounded up to `digits` significant digits (0 stays 0)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / scale - 1e-9) * scale:.{digits}g}")


def propose_bars(rows: list[Row], int8: bool = True) -> dict[str, float]:
    """MARGIN times the worst legitimate variant's distance from main, on each measure
    (int8=False: leaving out the int8-activation variants)."""
    legit = [r for r in rows if r.legit and (int8 or not r.int8)]
    miss = max(1.0 - r.top1 for r in legit)
    kl = max(r.kl for r in legit)
    ppl = max(abs(r.ppl_ratio - 1.0) for r in legit)
    n = min(r.n_tokens for r in legit)
    # top-1: never closer to 1 than two flips of the corpus, so one near-tie cannot decide
    top1_miss = round_up(max(MARGIN * miss, 2.0 / n), 2)
    return {
        "top1_min": round(1.0 - top1_miss, 6),
        "kl_max": round_up(max(MARGIN * kl, 1e-9), 2),
        "ppl_ratio_max": round(1.0 + round_up(max(MARGIN * ppl, 1e-6), 2), 9),
    }


def outside(row: Row, bars: dict[str, float]) -> list[str]:
    """The measures of `row` that miss `bars` (the gate's rule: top-1 >=, KL <=, PPL <=)."""
    missed = []
    if row.top1 < bars["top1_min"]:
        missed.append("top-1")
    if row.kl > bars["kl_max"]:
        missed.append("KL")
    if row.ppl_ratio > bars["ppl_ratio_max"]:
        missed.append("PPL")
    return missed


def judged(rows: list[Row], bars: dict[str, float]) -> dict:
    """What every row gets under `bars`: the measures it misses, and the two kinds of mistake."""
    missed = {r.variant: outside(r, bars) for r in rows}
    return {
        "bars": bars,
        "legit_failing": [r.variant for r in rows if r.legit and missed[r.variant]],
        "errors_passing": [r.variant for r in rows if not r.legit and not missed[r.variant]],
        "missed_by_variant": missed,
    }


def summarize(rows: list[Row]) -> dict[str, dict]:
    """Per model: bars from every legitimate variant, and from the float ones alone."""
    out: dict[str, dict] = {}
    for model in dict.fromkeys(r.model for r in rows):
        mine = [r for r in rows if r.model == model]
        out[model] = {"all": judged(mine, propose_bars(mine))}
        if any(r.int8 for r in mine):
            out[model]["float_only"] = judged(mine, propose_bars(mine, int8=False))
    return out


# --- command line --------------------------------------------------------------------------------


@click.command()
@click.option("--backend", type=click.Choice(["numpy", "cupy"]), default="numpy",
              show_default=True)  # fmt: skip
@click.option("--models", default="", help="comma-separated; default: the profile's + extras")
@click.option("--max-tokens", default=0, show_default=True, help="corpus tokens (0: all)")
@click.option("--topk", default=0, help="top-k of the dumps (default: policy [accuracy] topk)")
@click.option("--out", default="", help="JSON out (default: numerics[-cupy].json here)")
@click.option("--dump-one", default="", hidden=True, help="write one variant's dump to --out")
def main(backend: str, models: str, max_tokens: int, topk: int, out: str, dump_one: str) -> None:
    policy = load_policy()
    topk = topk or policy.accuracy.topk
    profile = "cpu" if backend == "numpy" else "gpu"
    names = models.split(",") if models else policy.profiles[profile].models + EXTRA_MODELS[backend]
    if dump_one:  # the GPU's worker: one dump, in this process's environment
        (model,) = names
        variant = {v.name: v for v in variants_for(backend)}.get(dump_one)
        weights = load_model(model, backend)
        doc = score_dump(model, variant, weights, backend, corpus_tokens(model, max_tokens), topk)
        Path(out).write_text(json.dumps(doc), encoding="utf-8")
        return
    t0 = time.perf_counter()
    rows = [row for model in names for row in measure_model(model, backend, max_tokens, topk)]
    seconds = time.perf_counter() - t0
    summary = summarize(rows)
    for model, proposals in summary.items():
        for which, s in proposals.items():
            print(f"{model} [{which}]: bars {s['bars']}; legitimate outside: "
                  f"{s['legit_failing']}; errors inside: {s['errors_passing']}")  # fmt: skip
    print(f"{len(rows)} comparisons in {seconds:.0f} s")
    doc = {
        "backend": backend,
        "topk": topk,
        "max_tokens": max_tokens,
        "margin": MARGIN,
        "seconds": round(seconds, 1),
        "rows": [asdict(r) for r in rows],
        "proposal": summary,
    }
    path = (
        Path(out)
        if out
        else HERE / ("numerics.json" if backend == "numpy" else "numerics-cupy.json")
    )
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
