"""The timing parent's memory readings of the engine (engine/harness/memory.py): memory the
engine holds outside its own process counts — a helper process's, a memfd's, a tmpfs file's."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.harness.memory import MemoryWatch, outside_bytes, tmpfs_devices
from engine.harness.turns import ProcessTree

MIB = 2**20
HOLD = 48 * MIB

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")


def engine_that(code: str) -> subprocess.Popen:
    """A stand-in engine process running `code`, then waiting to be killed; started once it
    has printed 'ready' (its memory is in place)."""
    body = f"import os, sys, time\n{code}\nprint('ready', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", body], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def watched(code: str) -> tuple[int, int]:
    """(largest outside reading, largest host reading) of an engine running `code`; its
    helpers are the other processes of its tree, as the timing parent gives them."""
    proc = engine_that(code)
    tree = ProcessTree(proc.pid, include_root=False)  # the processes below the engine
    helpers: set[int] = set()
    try:
        watch = MemoryWatch(proc.pid, gpu=False, helpers=lambda: tree.pids())
        time.sleep(0.5)
        report = watch.stop()
        helpers.update(tree.pids())
        return watch.outside_peak, report.host_peak
    finally:
        helpers.update(tree.pids())
        proc.kill()
        proc.wait()
        for pid in helpers:  # the helpers this engine started, by their ids
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_an_honest_engine_holds_nothing_outside() -> None:
    outside, host = watched(f"table = bytearray({HOLD})")
    assert outside < 4 * MIB  # its own resident set is its own memory
    assert host >= HOLD


def test_a_helper_process_s_memory_counts() -> None:
    code = (
        "import subprocess\n"
        "helper = subprocess.Popen([sys.executable, '-c', "
        f"'import time; t = b\"x\" * {HOLD}; print(1, flush=True); time.sleep(60)', "
        "'held-by-a-helper'], stdout=subprocess.PIPE)\n"
        "helper.stdout.readline()\n"
    )
    outside, host = watched(code)
    assert outside >= HOLD and host >= HOLD


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="no memfd")
def test_a_memfd_counts() -> None:
    code = f"fd = os.memfd_create('table')\nos.write(fd, b'x' * {HOLD})\n"
    outside, _host = watched(code)
    assert outside >= HOLD


def test_a_tmpfs_file_it_reads_counts_whenever_it_was_written() -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev not in tmpfs_devices() or not os.access(shm, os.W_OK):
        pytest.skip("no writable tmpfs /dev/shm")
    path = shm / f"sparkboard-test-{os.getpid()}"
    path.write_bytes(b"x" * HOLD)  # written before the engine started (an earlier session)
    try:
        outside, _host = watched(f"table = open({str(path)!r}, 'rb')  # read with os.pread")
        assert outside >= HOLD
    finally:
        path.unlink(missing_ok=True)


def test_outside_bytes_is_quick() -> None:
    tmpfs = tmpfs_devices()
    t0 = time.perf_counter()
    outside_bytes(os.getpid(), tmpfs)
    assert time.perf_counter() - t0 < 1.0  # polled every 0.2 s beside the timed work


def test_a_peak_between_two_polls_is_seen() -> None:
    """A buffer that lives a millisecond at a time, between the 20 ms polls: the high-water mark
    the parent resets catches it."""
    code = (
        "import threading\n"
        "def spikes():\n"
        "    while True:\n"
        f"        b = bytearray({HOLD}); del b\n"
        "        time.sleep(0.2)\n"
        "threading.Thread(target=spikes, daemon=True).start()\n"
    )
    _outside, host = watched(code)
    assert host >= HOLD


WATCH_CORES = """
import json, os, sys, time
from engine.harness.memory import MemoryWatch
core = sorted(os.sched_getaffinity(0))[-1]
if sys.argv[1] == "pinned":
    os.sched_setaffinity(0, {core})
watch = MemoryWatch(os.getpid(), gpu=False)
time.sleep(0.2)  # its first readings taken
mine, its = os.sched_getaffinity(0), os.sched_getaffinity(watch._thread.native_id)
print(json.dumps({"core": core, "parent": sorted(mine), "watch": sorted(its)}))
watch.stop()
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_the_readings_leave_a_pinned_session_core() -> None:
    """A session pinned to one core (the parent and both engines take turns there): the
    parent's memory readings, and the nvidia-smi each starts, run on the other cores, so they
    never take the core from an engine in its turn; an unpinned parent's stay where they were."""

    def cores(mode: str) -> dict:
        cmd = [sys.executable, "-c", WATCH_CORES, mode]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
        return json.loads(res.stdout)

    pinned = cores("pinned")
    assert pinned["parent"] == [pinned["core"]]
    assert pinned["watch"] and pinned["core"] not in pinned["watch"]
    free = cores("free")
    assert free["watch"] == free["parent"] and len(free["parent"]) >= 2
