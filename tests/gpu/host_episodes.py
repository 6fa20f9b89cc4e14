"""Device probe (not a test): how the host's slow episodes look. On the given cores at once, a
process each times a fixed pure-Python chunk (~0.4 ms, no CUDA) back to back for S seconds; per
core the share of slow chunks (> 1.4x the fastest), the episodes' lengths, a strip of 100-ms bins'
slowdown (one line 5 s; ' ' as fast as the fastest, '@' twice as slow or worse), and how often
two cores are slow together; the box's steal time over the run.

    python tests/gpu/host_episodes.py SECONDS CORE[,CORE]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SHADES = " .:-=+*#%@"


def child(core: int, seconds: float) -> None:
    os.sched_setaffinity(0, {core})
    out = []
    end = time.perf_counter() + seconds
    while (t0 := time.perf_counter()) < end:
        acc = 0
        for i in range(15000):
            acc += i & 7
        out.append((t0, time.perf_counter() - t0))
    json.dump(out, sys.stdout)


def steal() -> tuple[int, int]:
    """(steal, all) jiffies of the whole box, from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return (int(fields[7]) if len(fields) > 7 else -1), sum(map(int, fields))


def report(core: int, runs: list) -> np.ndarray:
    t = np.array([a for a, _ in runs])
    dt = np.array([b for _, b in runs])
    fast = np.percentile(dt, 5)
    slow = dt > 1.4 * fast
    episodes, run = [], 0.0
    for is_slow, x in zip(slow, dt, strict=True):
        if is_slow:
            run += x
        elif run:
            episodes.append(run)
            run = 0.0
    eps = np.array([*episodes, run] if run else episodes or [0.0])
    print(
        f"core {core}: {dt.size} chunks, fastest {1e3 * fast:.3f} ms, median "
        f"{1e3 * np.median(dt):.3f}, slow {100 * slow.mean():.1f}%, episodes {len(eps)}: median "
        f"{1e3 * np.median(eps):.1f} ms, 90th {1e3 * np.percentile(eps, 90):.1f}, longest "
        f"{1e3 * eps.max():.0f} ms"
    )
    b = ((t - t.min()) / 0.1).astype(int)
    bins = np.array(
        [dt[b == k].mean() / fast if np.any(b == k) else np.nan for k in range(b.max() + 1)]
    )
    for k in range(0, bins.size, 50):
        strip = "".join(
            SHADES[min(9, int((x - 1) * 10))] if x == x else "?" for x in bins[k : k + 50]
        )
        print(f"  {strip}")
    return bins


def main(seconds: float, cores: list[int]) -> None:
    s0 = steal()
    argv = [sys.executable, __file__, "child"]
    procs = [subprocess.Popen([*argv, str(c), str(seconds)], stdout=subprocess.PIPE) for c in cores]
    data = [json.loads(p.communicate()[0]) for p in procs]
    s1 = steal()
    print(f"steal {s1[0] - s0[0]} of {s1[1] - s0[1]} jiffies (all cores)")
    bins = [report(c, d) for c, d in zip(cores, data, strict=True)]
    if len(bins) > 1:
        n = min(bins[0].size, bins[1].size)
        a, b = bins[0][:n], bins[1][:n]
        ok = ~np.isnan(a) & ~np.isnan(b)
        a, b = a[ok] > 1.3, b[ok] > 1.3
        print(
            f"100-ms bins slow (>1.3x): core {cores[0]} {a.mean():.2f}, core {cores[1]} "
            f"{b.mean():.2f}, both {(a & b).mean():.2f}"
        )


if __name__ == "__main__":
    if sys.argv[1] == "child":
        child(int(sys.argv[2]), float(sys.argv[3]))
    else:
        main(float(sys.argv[1]), [int(c) for c in sys.argv[2].split(",")])
