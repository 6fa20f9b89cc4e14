"""The whole suite as `make test` (and CI) runs it: each `timed` test on a core no other test
uses while it runs, the rest of the suite at the same time on the other cores.

    python tests/run_suite.py [pytest options for every run]

The `timed` tests time real work on this box (the demo round, the A/A round beside a noisy
neighbour, the engines' between-turn ledgers). Run beside the rest of the suite on the same
cores, their timings would read its load. Pinned to a core no other test runs on, they share
only the box's memory and last-level cache with it, and the suite takes about the longest
test's time instead of the sum of all (2 cores, 2026-12-03: 11.7 minutes against 15.2 one after
the other; every timed test passed, the honest demo PRs' clocks within 3% of main's engine's
beside them).

Two lanes, each a core: the last core takes the timed tests from a queue, the slow ones first
(the demo round, ~11 minutes on 2 cores); the other core(s) run the rest of the suite
(pytest-xdist), then take what is left in the queue, one test on one core. The A/A round's noisy
neighbour (tests/support/neighbour.py) stays on the A/A round's core and in that core's own
cache, off the demo round's. On 2 cores, 2026-12-05: the demo round 648 s on its core; the rest
of the suite 359 s, the A/A round 157 s and the ledgers 14 s on the other; 656 s in all, where
the timed tests one after the other on their core took 786 s. With a single core everything runs
one after the other. Exit status: 0 when every run passes.
"""

from __future__ import annotations

import itertools
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def pinned(cpus: set[int]):  # noqa: ANN201 - a preexec_fn
    return lambda: os.sched_setaffinity(0, cpus)


def collect(marks: str, extra: list[str]) -> list[str]:
    """The node ids `-m marks` selects, in collection order (checked against pytest's count, so
    a format this does not read fails here, never runs no tests)."""
    res = subprocess.run(
        [*PYTEST, "-m", marks, "--collect-only", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode not in (0, 5):  # 5: nothing selected
        sys.exit(f"collecting the {marks!r} tests failed:\n{res.stdout}{res.stderr}")
    nodes = [line for line in res.stdout.splitlines() if "::" in line and " " not in line]
    counted = re.search(r"(\d+)(?:/\d+)? tests? collected", res.stdout)
    if len(nodes) != (int(counted.group(1)) if counted else 0):
        sys.exit(f"could not read the {marks!r} tests' ids:\n{res.stdout}")
    return nodes


class Lanes:
    """The timed tests' queue and what each run gave, shared by the lanes (threads)."""

    def __init__(self, timed: list[str], tmp: Path, extra: list[str]) -> None:
        self.todo: queue.SimpleQueue[str] = queue.SimpleQueue()
        for node in timed:
            self.todo.put(node)
        self.tmp, self.extra = tmp, extra
        self.failed: list[str] = []
        self.lock = threading.Lock()
        self.runs = itertools.count(1)
        self.stopped = threading.Event()  # interrupted: no lane takes another test

    def say(self, text: str) -> None:
        with self.lock:
            print(text, flush=True)

    def run(self, name: str, argv: list[str], cpus: set[int]) -> None:
        """One pytest run pinned to `cpus`, its output kept, shown whole when it fails."""
        with self.lock:
            log = self.tmp / f"run-{next(self.runs)}.log"
        t0 = time.monotonic()
        with log.open("w") as out:
            rc = subprocess.run(
                argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=pinned(cpus)
            ).returncode
        text = log.read_text(errors="replace")
        last = text.rstrip().splitlines()[-1] if text.strip() else "(no output)"
        where = ",".join(map(str, sorted(cpus)))
        self.say(f"[core {where}] {name}: {last} ({time.monotonic() - t0:.0f} s)")
        if rc:
            with self.lock:
                self.failed.append(name)
            self.say(f"--- {name} failed (exit {rc}):\n{text}")

    def timed(self, core: int) -> None:
        """Take timed tests from the queue, one at a time on `core`, until it is empty."""
        while not self.stopped.is_set():
            try:
                node = self.todo.get_nowait()
            except queue.Empty:
                return
            base = self.tmp / f"timed-{core}-{node.rsplit('::', 1)[-1]}"
            self.run(node, [*PYTEST, "--basetemp", str(base), node, *self.extra], {core})


def main(extra: list[str]) -> int:
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="sparkboard-tests-") as tmp_name:
        tmp = Path(tmp_name)
        timed = collect("timed and slow", extra) + collect("timed and not slow", extra)
        lanes = Lanes(timed, tmp, extra)
        untimed = [*PYTEST, "-m", "not timed", "--basetemp", str(tmp / "untimed"), *extra]
        if len(cpus) < 2:
            lanes.say("one core: the timed tests after the others")
            lanes.run("the untimed tests", [*untimed, "-n", "2"], set(cpus))
            if not lanes.failed:
                lanes.timed(cpus[0])
            return 1 if lanes.failed else 0
        mine, rest = cpus[-1], cpus[:-1]
        lanes.say(
            f"{len(timed)} timed tests, each on a core of its own: core {mine} takes them one by "
            f"one; the other tests on core(s) {','.join(map(str, rest))} (pytest-xdist), which "
            "then take what is left"
        )

        def others() -> None:
            try:
                lanes.run("the untimed tests", [*untimed, "-n", str(max(2, len(rest)))], set(rest))
                lanes.timed(rest[-1])
            except Exception as e:  # a lane that dies must fail the suite, never pass it
                with lanes.lock:
                    lanes.failed.append(f"the other lane ({e!r})")
                raise

        lane = threading.Thread(target=others)
        lane.start()
        try:
            lanes.timed(mine)
            lane.join()
        except KeyboardInterrupt:  # the runs got it too (one process group): take no more
            lanes.stopped.set()
            lane.join()
            raise
        if lanes.failed:
            lanes.say(f"failed: {', '.join(lanes.failed)}")
        return 1 if lanes.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
