"""Device probe (not a test): how far one engine process's short prefill strays from another's,
and what in the prefill's host path decides it. The 1B's prefill@128 legs read 0.73 or 1.5 of
main's now and then (2026-12-05's A/A rounds: one pair of processes a leg), which no fastest-of-a-
burst takes out, so the difference lives in the process. Each of N fresh processes (pinned to one
core, as the gpu profile's sessions) loads the model and times, interleaved in blocks:
  prefill      a 128-token prefill as the engine does it (cudaMemGetInfo sampled per chunk)
  no-meminfo   the same with the engine's memory sampling switched off
and cudaMemGetInfo alone. Prints a row per process (fastest and median, ms) and the spread.

    python tests/gpu/process_probe.py [--model llama-1b:f16] [--processes 8] [--ctx 128]
"""

from __future__ import annotations

import json
import os
import statistics as st
import subprocess
import sys
import time

import click
import numpy as np


def child(model: str, ctx: int, runs: int) -> dict:
    import cupy as cp

    from engine.models import open_runner

    r = open_runner(model, "cupy")
    r.reset(1, ctx + 64)
    rng = np.random.default_rng(os.getpid())
    vocab = r.config.vocab_size

    def prefill() -> float:
        ids = rng.integers(0, vocab, ctx)
        r.synchronize()
        t0 = time.perf_counter()
        r.prefill(0, ids)
        r.synchronize()
        dt = time.perf_counter() - t0
        r.truncate(0, 0)
        return dt

    for _ in range(5):
        prefill()
    sample = r._sample_memory
    times: dict[str, list[float]] = {"prefill": [], "no-meminfo": []}
    for _block in range(runs // 10):
        for name in times:
            r._sample_memory = sample if name == "prefill" else (lambda: None)
            times[name] += [prefill() for _ in range(10)]
    r._sample_memory = sample
    mem = []
    for _ in range(300):
        t0 = time.perf_counter()
        cp.cuda.runtime.memGetInfo()
        mem.append(time.perf_counter() - t0)
    out = {k: (1e3 * min(v), 1e3 * st.median(v)) for k, v in times.items()}
    out["memGetInfo"] = (1e3 * min(mem), 1e3 * st.median(mem))
    return out


@click.command()
@click.option("--model", default="llama-1b:f16")
@click.option("--processes", default=8, type=int)
@click.option("--ctx", default=128, type=int)
@click.option("--runs", default=40, type=int)
@click.option("--child-run", is_flag=True, hidden=True)
def main(model: str, processes: int, ctx: int, runs: int, child_run: bool) -> None:
    if child_run:
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
        print(json.dumps(child(model, ctx, runs)))
        return
    rows = []
    for i in range(processes):
        argv = [sys.executable, __file__, "--model", model, "--ctx", str(ctx)]
        argv += ["--runs", str(runs), "--child-run"]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if res.returncode:
            print(f"process {i}: exit {res.returncode}: {res.stderr[-800:]}")
            continue
        row = json.loads(res.stdout.strip().splitlines()[-1])
        rows.append(row)
        cells = "  ".join(f"{k} {a:.3f}/{b:.3f}" for k, (a, b) in row.items())
        print(f"process {i}: ms fastest/median  {cells}", flush=True)
    for k in rows[0] if rows else []:
        fast = [r[k][0] for r in rows]
        print(f"{k:12} fastest over processes: min {min(fast):.3f} max {max(fast):.3f} ms "
              f"(max/min {max(fast) / min(fast):.3f})")  # fmt: skip


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    main()
