"""The whole suite as `make test` (and CI) runs it: the `timed` tests on a core of their own, the
rest on the other cores at the same time.

    python tests/run_suite.py [pytest options for both runs]

The `timed` tests time real work on this box (the demo round, the A/A round beside a noisy
neighbour, the engines' between-turn ledgers). Run beside the rest of the suite on the same
cores, their timings would read its load. Pinned to a core no other test runs on, they share
only the box's memory and last-level cache with it, and the suite takes the timed tests' time
instead of the sum of both (2 cores, 2026-12-03: 11.7 minutes against 15.2 one after the other;
every timed test passed, the honest demo PRs' clocks within 3% of main's engine's beside them).
With a single core the two runs go one after the other. Exit status: 0 when both pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def pinned(cpus: set[int]):  # noqa: ANN201 - a preexec_fn
    return lambda: os.sched_setaffinity(0, cpus)


def main(extra: list[str]) -> int:
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="sparkboard-tests-") as tmp:
        untimed = [*PYTEST, "-m", "not timed", "--basetemp", f"{tmp}/untimed", *extra]
        timed = [*PYTEST, "-m", "timed", "--basetemp", f"{tmp}/timed", *extra]
        if len(cpus) < 2:
            print("one core: the timed tests after the others", flush=True)
            first = subprocess.run([*untimed, "-n", "2"], cwd=ROOT, check=False).returncode
            return first or subprocess.run(timed, cwd=ROOT, check=False).returncode
        mine, rest = {cpus[-1]}, set(cpus[:-1])
        log = Path(tmp) / "untimed.log"
        print(
            f"timed tests on core {cpus[-1]} (below); the others on core(s) "
            f"{','.join(map(str, sorted(rest)))} at the same time (their summary follows)",
            flush=True,
        )
        with log.open("w") as out:
            others = subprocess.Popen(
                [*untimed, "-n", str(max(2, len(rest)))],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=pinned(rest),
            )
            try:
                timed_rc = subprocess.run(
                    timed, cwd=ROOT, check=False, preexec_fn=pinned(mine)
                ).returncode
                others_rc = others.wait()
            finally:
                if others.poll() is None:
                    others.terminate()
                    others.wait()
        text = log.read_text(errors="replace")
        print("--- the other tests:", flush=True)
        print(text if others_rc else text.rstrip().splitlines()[-1], flush=True)
        return timed_rc or others_rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
