"""A noisy neighbour: a process that takes one core in irregular bursts.

A shared box runs other work beside a round: a build, a test suite, a neighbour's job. This is
that work, reproducible: bursts of a busy loop, each burst and each pause drawn from an
exponential distribution around their means, from a seed.

    python tests/support/neighbour.py --duty 0.5 --mean-burst 0.2 --seconds 600 &

`Neighbour` runs it as a context manager around a block (the A/A round of
tests/collector/test_demo_aa.py). It never runs during a test that is not about noise. It runs
on the cores of the test that starts it: under `make test` (tests/run_suite.py) the A/A round's
own core, never the core the demo round is timed on beside it (2026-12-05: let loose on a 2-core
box, it took turns on the demo round's core too, and the demo's smallest real gain, #120's +6%,
read `none` in one of five runs).

A core is all it takes: its loop runs over a buffer that a core's own first-level cache holds
(`BUFFER_BYTES`), so the last-level cache and the memory bandwidth the cores share stay the
timed tests'. Over a larger buffer, pinned to the other core, it reached the demo round anyway
(2026-12-06, a 2-core AMD EPYC VM, #120 beside main's engine on core 1: `bench sweep --model
tiny --ctx 32,128 --tokens 4 --reps 9 --min-time 0.05`, sealed, conditions interleaved; main's
prefill@128 and #120's gain there): quiet 55,900-60,700 tok/s, +4.1..+8.4% (seven sessions); busy
over 16 KiB 55,700-62,100, +3.7..+6.3% (three); over 512 KiB 49,200-54,700, +0.2..+8.9%
(three); over 16 MiB (the buffer before) all the time 35,300-58,000, +0.2..+7.6% (six, two at
+1.7% or less), half the time 51,200-59,800, +3.4..+8.5% (four). In CI on 56ec4c9 the untimed
tests ran long (507 s against ~360), so the A/A round and its 16 MiB neighbour ran beside the
demo round's last three minutes (the PRs' second sessions, then the confirmations), and #120 read
`none` with one session at +1.2%.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import numpy as np

BUFFER_BYTES = 16 * 2**10  # inside a core's own first-level data cache


def run(duty: float, mean_burst_s: float, seconds: float, seed: int) -> None:
    """Bursts of `mean_burst_s` on average, busy `duty` of the time, for `seconds` (0: forever)."""
    rng = random.Random(seed)
    buf = np.ones(BUFFER_BYTES // 8)
    end = time.monotonic() + seconds if seconds > 0 else float("inf")
    mean_pause = mean_burst_s * (1 - duty) / duty
    while time.monotonic() < end:
        burst_end = time.monotonic() + rng.expovariate(1 / mean_burst_s)
        while time.monotonic() < min(burst_end, end):
            buf *= 1.0000001  # a pass over the buffer: a core and memory bandwidth
        time.sleep(rng.expovariate(1 / mean_pause) if mean_pause > 0 else 0)


class Neighbour:
    """The neighbour in a child process for the duration of a `with` block."""

    def __init__(self, duty: float = 0.5, mean_burst_s: float = 0.2, seed: int = 0) -> None:
        self.argv = [sys.executable, str(Path(__file__).resolve()), "--duty", str(duty)]
        self.argv += ["--mean-burst", str(mean_burst_s), "--seed", str(seed)]
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Neighbour:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.DEVNULL)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duty", type=float, default=0.5, help="share of the time busy (0..1]")
    ap.add_argument("--mean-burst", type=float, default=0.2, help="mean burst length, seconds")
    ap.add_argument("--seconds", type=float, default=0, help="how long to run (0: until killed)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not 0 < a.duty <= 1 or a.mean_burst <= 0:
        ap.error("--duty must be in (0, 1] and --mean-burst positive")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run(a.duty, a.mean_burst, a.seconds, a.seed)


if __name__ == "__main__":
    main()
