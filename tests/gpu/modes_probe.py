"""Does a decode's speed sit in a per-process mode, and what moves it? (device probe, not a test)

    python tests/gpu/modes_probe.py --model llama-8b:q4_0 --ctx 128,512 --trials 10

One engine in one process. For each context, four ways to start a trial, each trial the fastest
of three 64-token decodes after a fresh 128-token prompt:
  same    reset to the same shape (the cache and the captured graph kept: today's sweep)
  graph   same shape, the decode graph captured again
  shape   reset to a shape one token longer each trial (cache freed, allocated, graph captured)
  pad     as shape, with a random-size device block allocated first and kept
Prints tok/s per trial; the spread within `same` against the spread across `shape`/`pad` says
whether the per-process offsets come from where the cache and buffers land.
"""

from __future__ import annotations

import json
import sys
import time

import click
import numpy as np


def timed_decode(r, width: int, ctx: int, tokens: int, rng: np.random.Generator) -> float:
    r.truncate(0, 0)
    r.prefill(0, rng.integers(0, 49152, ctx))
    best = float("inf")
    for _ in range(3):
        r.truncate(0, ctx)
        first = rng.integers(0, 49152, 1)
        r.synchronize()
        t0 = time.perf_counter()
        r.decode_greedy([0], first, tokens)
        r.synchronize()
        best = min(best, time.perf_counter() - t0)
    return tokens / best


@click.command()
@click.option("--model", default="llama-8b:q4_0")
@click.option("--ctx", default="128,512")
@click.option("--trials", default=10)
@click.option("--tokens", default=64)
@click.option("--seqs", default=32, help="sequences the cache is sized for (the sweep's k)")
def main(model: str, ctx: str, trials: int, tokens: int, seqs: int) -> None:
    import cupy as cp

    from engine.models import open_runner

    r = open_runner(model, "cupy")
    rng = np.random.default_rng()
    out = {}
    pads = []
    for c in [int(x) for x in ctx.split(",")]:
        base = c + tokens + 1
        for way in ("same", "graph", "shape", "pad", "same"):
            vals = []
            r.reset(seqs, base)
            for t in range(trials):
                if way == "graph":
                    r.step.graphs.clear()
                    r.step.capture(seqs)
                elif way in ("shape", "pad"):
                    if way == "pad":
                        pads.append(cp.empty(int(rng.integers(1, 64)) * 2**20, dtype=cp.uint8))
                    r.reset(seqs, base + 1 + t + (trials if way == "pad" else 0))
                vals.append(timed_decode(r, 1, c, tokens, rng))
            pads.clear()
            key = f"ctx{c}/{way}"
            out.setdefault(key, []).extend(vals)
            v = np.array(vals)
            print(
                f"{key:14} min {v.min():7.1f} med {np.median(v):7.1f} max {v.max():7.1f} "
                f"spread {v.max() / v.min() - 1:6.2%}  " + " ".join(f"{x:.1f}" for x in vals),
                file=sys.stderr,
            )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
