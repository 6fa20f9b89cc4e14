"""A/B of the GPU demo's patches against main through the bench harness, on the device.

    python tests/gpu/ab_patches.py --out DIR

Each patch is applied to a copy of the working tree; main and the copies run the same
`engine.harness.bench sweep` commands in one interleaved order (main first and last, so drift shows).
Prints one table: per model and axis, main's medians, each variant's median and its ratio to
main's mean. A developer tool: it predicts what a round of data/demo/gpu/gpu.toml should see.
The patches apply at that round's main (gpu.toml's base_ref), so run it from a checkout of that
commit (`git worktree add ../round-main <base_ref>`), not from a later main.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "data/demo/gpu/patches"
BIG = ("llama-8b:q4_0", "128,4096,32768")
# (variant, patch or None for main, the (model, contexts) sweeps it runs)
PLAN = [
    ("main", None, [BIG, ("llama-1b:f16", "128"), ("smollm2-135m", "128")]),
    ("201", "201-four-rows-q", [("llama-8b:q4_0", "128,4096"), ("llama-1b:f16", "128"), ("smollm2-135m", "128")]),
    ("202", "202-decode-gain-prefill-loss", [("llama-8b:q4_0", "128,4096")]),
    ("204", "204-four-rows-all", [("llama-8b:q4_0", "128"), ("llama-1b:f16", "128"), ("smollm2-135m", "128")]),
    ("main2", None, [BIG, ("llama-1b:f16", "128"), ("smollm2-135m", "128")]),
]  # fmt: skip


def checkout(name: str, patch: str | None, scratch: Path) -> Path:
    if patch is None:
        return ROOT
    dst = scratch / name
    if not dst.exists():
        shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(".git", ".whl*", ".gguf", "out"))
        r = subprocess.run(["git", "apply", str(PATCHES / f"{patch}.patch")], cwd=dst)
        if r.returncode != 0:
            sys.exit(f"{patch} does not apply here: run from a checkout of gpu.toml's base_ref")
    return dst


def sweep(tree: Path, model: str, ctx: str, out: Path) -> tuple[dict[str, float], float]:
    env = dict(os.environ, PYTHONPATH=f"/tmp/site:{tree}")
    argv = [sys.executable, "-m", "engine.harness.bench", "sweep", "--model", model, "--ctx", ctx]
    argv += ["--tokens", "64", "--reps", "3", "--backend", "cupy", "--out", str(out)]
    t0 = time.perf_counter()
    r = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        print(f"  failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}", flush=True)
        return {}, wall
    doc = json.loads(out.read_text())
    vals = {}
    for c in doc["contexts"]:
        vals[f"decode@{c['ctx']}"] = statistics.median(c["decode_tok_s"])
        vals[f"prefill@{c['ctx']}"] = statistics.median(c["prefill_tok_s"])
    return vals, wall


def main() -> None:
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else Path("/tmp/ab")
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path("/tmp/ab-trees")
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, patch, runs in PLAN:
        tree = checkout(name, patch, scratch)
        for model, ctx in runs:
            vals, wall = sweep(tree, model, ctx, out / f"{name}_{model.replace(':', '_')}.json")
            print(f"{name:6} {model:14} {ctx:16} {wall:6.1f} s  {vals}", flush=True)
            results.setdefault(model, {}).setdefault(name, {}).update(vals)
    (out / "ab.json").write_text(json.dumps(results, indent=1))
    print(f"\n{'model':14} {'axis':14} {'main':>9} {'main2':>9}  variants (ratio to main's mean)")
    for model, by in results.items():
        axes = sorted({a for v in by.values() for a in v})
        for a in axes:
            m = [by[k][a] for k in ("main", "main2") if a in by.get(k, {})]
            base = statistics.fmean(m) if m else float("nan")
            cells = [
                f"{k} {by[k][a]:9.1f} ({by[k][a] / base:5.3f})"
                for k in by
                if k not in ("main", "main2") and a in by[k]
            ]
            mains = "".join(f"{x:10.1f}" for x in m)
            print(f"{model:14} {a:14} {mains:>20}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
