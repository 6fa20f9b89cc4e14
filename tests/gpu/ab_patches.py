"""A/B of the GPU rounds' patches against main through the bench harness, on the device.

    python tests/gpu/ab_patches.py [--plan demo|gates] [--out DIR]

Each patch is applied to a copy of the working tree; main and the copies run the same
`engine.harness.bench` commands in one interleaved order (main first and last, so drift shows).
Prints one table: per model and axis, main's medians (first and last run), each variant's median
and its ratio to main's mean. A developer tool: it predicts what a round should see.

Plans (the patches apply at their round's main, so run the tool from a checkout of that commit:
`git worktree add ../round-main <base_ref>`, not from a later main):

* `demo` (default): data/demo/gpu/gpu.toml's 201, 202 and 204, decode/prefill sweeps;
  from a checkout of gpu.toml's base_ref (each tree runs its own harness, as measured then).
* `gates`: data/demo/gpu/gates-h200.toml's 301 (resident token tables: speed and device memory)
  and 303 (weight bands once from DRAM: concurrent decode at widths 8/16/32, and the sweep, which
  must not move), llama-1b:f16; from a checkout of gates-h200.toml's base_ref. Main's harness
  times every tree as a timing parent (`--engine-checkout`), so the timed outputs are held
  against main's model as in a round: each run prints the share of its generated tokens that
  agree with main's (within 0.01 nats), and the table adds the device memory read from outside
  (vram-load after the model loaded, vram-peak@ctx while a context ran).
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
TIE_NATS = 0.01  # policy.toml [forgery] tie_nats: a token this close to main's pick agrees

# A run: (command, model, contexts or widths).
BIG = ("sweep", "llama-8b:q4_0", "128,4096,32768")
SMALL = [("sweep", "llama-1b:f16", "128"), ("sweep", "smollm2-135m", "128")]
ONE_B = "llama-1b:f16"
ONE_B_MAIN = [("sweep", ONE_B, "128,4096,32768"), ("concurrent", ONE_B, "8,16,32")]
# plan -> [(variant, patch or None for main, runs)]; parent: main's harness times every tree
PLANS = {
    "demo": [
        ("main", None, [BIG, *SMALL]),
        ("201", "201-four-rows-q", [("sweep", "llama-8b:q4_0", "128,4096"), *SMALL]),
        ("202", "202-decode-gain-prefill-loss", [("sweep", "llama-8b:q4_0", "128,4096")]),
        ("204", "204-four-rows-all", [("sweep", "llama-8b:q4_0", "128"), *SMALL]),
        ("main2", None, [BIG, *SMALL]),
    ],
    "gates": [
        ("main", None, ONE_B_MAIN),
        ("301", "301-resident-token-tables", [("sweep", ONE_B, "128,4096")]),
        ("303", "303-mma-band-order", ONE_B_MAIN),
        ("main2", None, ONE_B_MAIN),
    ],
}  # fmt: skip
PARENT = {"demo": False, "gates": True}
MANIFEST = {"demo": "gpu.toml", "gates": "gates-h200.toml"}


def checkout(name: str, patch: str | None, scratch: Path, plan: str) -> Path:
    if patch is None:
        return ROOT
    dst = scratch / name
    if not dst.exists():
        shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(".git", ".whl*", ".gguf", "out"))
        r = subprocess.run(["git", "apply", str(PATCHES / f"{patch}.patch")], cwd=dst)
        if r.returncode != 0:
            sys.exit(
                f"{patch} does not apply here: run from a checkout of {MANIFEST[plan]}'s base_ref"
            )
    return dst


def bench(tree: Path, run: tuple[str, str, str], out: Path, parent: bool) -> tuple[dict, float]:
    """One harness command for `tree`: {axis: median} (speed and device memory), and seconds."""
    command, model, values = run
    # parent: main's harness (this checkout) times the tree's engine; else the tree's own harness
    home = ROOT if parent else tree
    env = dict(os.environ, PYTHONPATH=f"/tmp/site:{home}")
    argv = [sys.executable, "-m", "engine.harness.bench", command, "--model", model]
    if command == "sweep":
        argv += ["--ctx", values, "--tokens", "64", "--reps", "3"]
    else:
        argv += ["--widths", values, "--tokens", "32", "--runs", "3", "--prompt-len", "128"]
    argv += ["--backend", "cupy", "--out", str(out)]
    if parent and tree != ROOT:
        argv += ["--engine-checkout", str(tree)]
    t0 = time.perf_counter()
    r = subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=400)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        print(f"  failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}", flush=True)
        return {}, wall
    doc = json.loads(out.read_text())
    vals: dict[str, float] = {}
    for c in doc.get("contexts", []):
        vals[f"decode@{c['ctx']}"] = statistics.median(c["decode_tok_s"])
        vals[f"prefill@{c['ctx']}"] = statistics.median(c["prefill_tok_s"])
        if c.get("gpu_peak"):
            vals[f"vram-peak@{c['ctx']}"] = c["gpu_peak"]
    for w in doc.get("widths", []):
        vals[f"concurrent@{w['width']}"] = statistics.median(x["tok_s"] for x in w["runs"])
    measured = doc.get("measured") or {}
    memory = measured.get("memory") or {}
    if memory.get("gpu_after_load"):
        vals["vram-load"] = memory["gpu_after_load"]
    margins = (measured.get("verification") or {}).get("decode_margins") or []
    if margins:
        agree = sum(m <= TIE_NATS for m in margins)
        print(f"  generated tokens agreeing with main's model: {agree} of {len(margins)}")
    return vals, wall


def main() -> None:
    argv = sys.argv[1:]
    out = Path(argv[argv.index("--out") + 1] if "--out" in argv else "/tmp/ab").resolve()
    plan = argv[argv.index("--plan") + 1] if "--plan" in argv else "demo"
    if plan not in PLANS:
        sys.exit(f"--plan {plan}: expected one of {', '.join(PLANS)}")
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path("/tmp/ab-trees")
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name, patch, runs in PLANS[plan]:
        tree = checkout(name, patch, scratch, plan)
        for run in runs:
            command, model, values = run
            doc = out / f"{name}_{command}_{model.replace(':', '_')}.json"
            vals, wall = bench(tree, run, doc, PARENT[plan])
            print(f"{name:6} {command:10} {model:14} {values:16} {wall:6.1f} s  {vals}", flush=True)
            results.setdefault(model, {}).setdefault(name, {}).update(vals)
    (out / "ab.json").write_text(json.dumps(results, indent=1))
    print(f"\n{'model':14} {'axis':16} {'main':>14} {'main2':>14}  variants (ratio to main's mean)")
    for model, by in results.items():
        axes = sorted({a for v in by.values() for a in v})
        for a in axes:
            m = [by[k][a] for k in ("main", "main2") if a in by.get(k, {})]
            base = statistics.fmean(m) if m else float("nan")
            cells = [
                f"{k} {by[k][a]:12.1f} ({by[k][a] / base:5.3f})"
                for k in by
                if k not in ("main", "main2") and a in by[k]
            ]
            mains = "".join(f"{x:15.1f}" for x in m)
            print(f"{model:14} {a:16} {mains:>30}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
