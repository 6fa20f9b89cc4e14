"""Device probe (not a test): how far one engine process's short prefill strays from another's,
and what in the prefill's host path decides it. The 1B's prefill@128 legs read 0.73 or 1.5 of
main's now and then (2026-12-05's A/A rounds: one pair of processes a leg), which no fastest-of-a-
burst takes out, so the difference lives in the process. Each of N fresh processes (pinned to one
core, as the gpu profile's sessions) loads the model and times, interleaved in blocks:
  prefill      a 128-token prefill as the engine does it (cudaMemGetInfo sampled per chunk)
  no-meminfo   the same with the engine's memory sampling switched off
  gc-off       the same with Python's garbage collector off (and how many collections ran in
               the `prefill` blocks, and for how long: the `gc` column, count / ms in all)
and cudaMemGetInfo alone, 500 launches of an empty kernel, and a loop of pure Python (no CUDA):
which of the host's paths a slow process is slow on. Each variant's processes interleaved:
  pinned   on the last core, as the gpu profile's sessions
  noaslr   the same, the address layout fixed (setarch -R): is the luck the layout?
  core0    on the first core: is the luck the core?
Prints a row per process (fastest and median, ms) and the spread per variant.

    python tests/gpu/process_probe.py [--model llama-1b:f16] [--processes 8] [--ctx 128]
        [--variants pinned,noaslr,core0]
"""

from __future__ import annotations

import gc
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
    times: dict[str, list[float]] = {"prefill": [], "no-meminfo": [], "gc-off": []}
    collections: list[float] = []  # Python's garbage collections in the `prefill` blocks
    started = [0.0]

    def on_gc(phase: str, _info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            collections.append(time.perf_counter() - started[0])

    for _block in range(runs // 10):
        for name in times:
            r._sample_memory = (lambda: None) if name == "no-meminfo" else sample
            if name == "gc-off":
                gc.disable()
            if name == "prefill":
                gc.callbacks.append(on_gc)
            times[name] += [prefill() for _ in range(10)]
            gc.enable()
            if on_gc in gc.callbacks:
                gc.callbacks.remove(on_gc)
    r._sample_memory = sample
    mem = []
    for _ in range(300):
        t0 = time.perf_counter()
        cp.cuda.runtime.memGetInfo()
        mem.append(time.perf_counter() - t0)
    empty = cp.RawKernel('extern "C" __global__ void probe_empty() {}', "probe_empty")
    launches = []
    for _ in range(20):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(500):
            empty((1,), (1,), ())
        cp.cuda.Device().synchronize()
        launches.append(time.perf_counter() - t0)
    py = []
    for _ in range(20):
        t0 = time.perf_counter()
        acc = 0
        for i in range(100_000):
            acc += i & 7
        py.append(time.perf_counter() - t0)
    out = {k: (1e3 * min(v), 1e3 * st.median(v)) for k, v in times.items()}
    out["gc"] = (len(collections), 1e3 * sum(collections))  # count, ms in all
    out["memGetInfo"] = (1e3 * min(mem), 1e3 * st.median(mem))
    out["launch500"] = (1e3 * min(launches), 1e3 * st.median(launches))
    out["python"] = (1e3 * min(py), 1e3 * st.median(py))
    return out


@click.command()
@click.option("--model", default="llama-1b:f16")
@click.option("--processes", default=8, type=int)
@click.option("--ctx", default=128, type=int)
@click.option("--runs", default=40, type=int)
@click.option("--variants", default="pinned")
@click.option("--child-run", is_flag=True, hidden=True)
@click.option("--core", default=-1, type=int, hidden=True)
def main(
    model: str, processes: int, ctx: int, runs: int, variants: str, child_run: bool, core: int
) -> None:
    if child_run:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[core]})
        print(json.dumps(child(model, ctx, runs)))
        return
    names = variants.split(",")
    rows: dict[str, list[dict]] = {v: [] for v in names}
    for i in range(processes):
        for v in names:
            argv = [sys.executable, __file__, "--model", model, "--ctx", str(ctx)]
            argv += ["--runs", str(runs), "--child-run", "--core", "0" if v == "core0" else "-1"]
            if v == "noaslr":
                argv = ["setarch", os.uname().machine, "-R", *argv]
            res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            if res.returncode:
                print(f"{v} process {i}: exit {res.returncode}: {res.stderr[-800:]}")
                continue
            row = json.loads(res.stdout.strip().splitlines()[-1])
            rows[v].append(row)
            cells = "  ".join(f"{k} {a:.3f}/{b:.3f}" for k, (a, b) in row.items())
            print(f"{v:7} process {i}: ms fastest/median  {cells}", flush=True)
    for v, rs in rows.items():
        for k in rs[0] if rs else []:
            fast = [r[k][0] for r in rs]
            print(f"{v:7} {k:12} fastest over processes: min {min(fast):.3f} max {max(fast):.3f} "
                  f"ms (max/min {max(fast) / min(fast):.3f})")  # fmt: skip


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    main()
