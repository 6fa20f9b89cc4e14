"""Memory of the engine process, read from outside it.

The engine's own VRAM report is the PR's code talking; this is the timing parent reading what
the kernel and the driver say about the process: its resident set (`/proc/PID/status`, VmRSS
and the high-water mark VmHWM, which this process resets after load and at each context's
start, every POLL_S) and, on the GPU, its device memory (`nvidia-smi --query-compute-apps`, every
GPU_POLL_S). `after_load` is the first reading once the model has loaded; `peak` the largest.
A process that resets its own high-water mark cannot hide from readings it does not make.

Memory the engine keeps *outside* its resident set counts too (every OUTSIDE_POLL_S): the
resident sets of the other processes of its own tree (helpers it started; in a sandbox, every
process of the sandbox), and memory in files: every memfd any of them holds open, and the files
on its tmpfs mounts — in a sandbox, all its private /tmp and /dev/shm hold, open or not (read
through its own mount view, /proc/PID/root); unsandboxed, the tmpfs files its processes hold
open, whoever wrote them and whenever. An honest engine keeps none there; a table held in a
helper process or read from a shared-memory file is memory all the same (`outside`: its largest
reading, which the long-context check holds to an allowance). A mapped file's touched pages are
in the resident set already (counted twice then: the PR's choice).

The readings run in a thread of the timing parent, and where the session is pinned (a one-core
session: the parent and both engines on one core, taking turns) that thread leaves the session's
core first: each nvidia-smi it starts (~0.1 s of CPU, twice a second per engine) inherits its
cores, and on the session's core it shared the core with whichever engine's turn it fell in (a
1B's short prefills read half speed for whole legs on an H100 before: data/demo/gpu/README.md).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from engine.harness.protocol import MemoryReport

POLL_S = 0.02
GPU_POLL_S = 0.5
OUTSIDE_POLL_S = 0.2
NVIDIA_SMI_TIMEOUT_S = 10


def leave_session_cores() -> None:
    """Move the calling thread (and what it starts) off the cores its process is pinned to,
    where the process is pinned to fewer than all of the machine's cores; else leave it."""
    mine = os.sched_getaffinity(0)
    others = set(range(os.cpu_count() or 1)) - mine
    if others:
        with contextlib.suppress(OSError):  # none of the others allowed here (a cpuset)
            os.sched_setaffinity(0, others)  # pid 0: this thread alone


def resident_bytes(pid: int, high_water: bool = False) -> int | None:
    """The process's resident set (VmRSS), or with `high_water` the larger of it and its
    high-water mark (VmHWM: a peak between two polls is not missed)."""
    found = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line[:5]] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if "VmRSS" not in found:
        return None
    return max(found.values()) if high_water else found["VmRSS"]


def reset_high_water(pid: int) -> None:
    """Set the process's VmHWM back to its VmRSS (`clear_refs` 5), so the next readings are the
    peak from now on; where this cannot be done the readings stay the polled resident set's."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _tmpfs_mounts(pid: int | str = "self") -> list[tuple[int, str, bool]]:
    """(device, mount point, writable) of every tmpfs mount in the process's mount view."""
    out = []
    try:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, fs = left.split(), right.split()
        if len(parts) < 6 or not fs or fs[0] != "tmpfs":
            continue
        major, minor = (int(x) for x in parts[2].split(":"))
        point = parts[4].replace("\\040", " ")
        out.append((os.makedev(major, minor), point, "rw" in parts[5].split(",")))
    return out


def tmpfs_devices(pid: int | str = "self") -> set[int]:
    """The device numbers of every tmpfs mount the process sees (/dev/shm, a tmpfs /tmp, ...)."""
    return {dev for dev, _point, _rw in _tmpfs_mounts(pid)}


def memory_file_bytes(pids: set[int], tmpfs: set[int]) -> int:
    """Bytes of the in-memory files (memfd, or on a tmpfs mount in `tmpfs`) the processes hold
    open, each file once: memory, whoever created it and whenever."""
    seen: dict[tuple[int, int], int] = {}
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                memfd = os.readlink(fd).startswith("/memfd:")
                st = os.stat(fd)
            except OSError:
                continue
            if memfd or st.st_dev in tmpfs:
                seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return sum(seen.values())


def private_tmpfs_bytes(pid: int) -> int:
    """What the writable tmpfs mounts of a sandboxed process's own mount view hold (its
    private /tmp and /dev/shm), every file, open or not."""
    used = 0
    for _dev, point, writable in _tmpfs_mounts(pid):
        if not writable:
            continue
        try:
            st = os.statvfs(f"/proc/{pid}/root{point}")
        except OSError:
            continue
        used += (st.f_blocks - st.f_bfree) * st.f_frsize
    return used


def outside_bytes(engine: int, helpers: list[int], sandboxed: bool = False) -> int:
    """What the engine holds outside its own resident set (module docstring): its helpers'
    resident sets, and its memory in files."""
    others = {p for p in helpers if p != engine and _comm(p) != "nvidia-smi"}
    held = sum(resident_bytes(p) or 0 for p in others)
    if sandboxed:
        return held + private_tmpfs_bytes(engine) + memory_file_bytes(others | {engine}, set())
    return held + memory_file_bytes(others | {engine}, tmpfs_devices())


def gpu_bytes(pid: int) -> int | None:
    """The device memory nvidia-smi charges to `pid`, or None where it cannot say."""
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            return int(parts[1]) * 2**20
    return None


class MemoryWatch:
    """Polls a process's memory in a thread from construction until `stop()`: host readings are
    its resident set plus what it holds outside its process (the latest `outside` reading).
    `helpers`: the other processes of its tree, asked at each outside reading (none: it has
    none); `sandboxed`: its tmpfs mounts are its own (sandbox.py)."""

    def __init__(
        self,
        pid: int,
        gpu: bool,
        helpers: Callable[[], list[int]] | None = None,
        sandboxed: bool = False,
    ) -> None:
        self.pid, self.gpu = pid, gpu
        self._helpers = helpers or (lambda: [])
        self._sandboxed = sandboxed
        self.outside = [self._outside()]
        reset_high_water(pid)  # after load: the load's own peak is not a context's
        self.host = [(resident_bytes(pid) or 0) + self.outside[-1]]
        self.device: list[int] = []
        if gpu and (g := gpu_bytes(pid)) is not None:
            self.device.append(g)
        self._host_mark = self._dev_mark = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _outside(self) -> int:
        return outside_bytes(self.pid, self._helpers(), self._sandboxed)

    def _poll(self) -> None:
        leave_session_cores()
        ticks = 0
        while not self._done.wait(POLL_S):
            ticks += 1
            if ticks % round(OUTSIDE_POLL_S / POLL_S) == 0:
                self.outside.append(self._outside())
            if (r := resident_bytes(self.pid, high_water=True)) is not None:
                self.host.append(r + self.outside[-1])
            gpu_tick = self.gpu and ticks % round(GPU_POLL_S / POLL_S) == 0
            if gpu_tick and (g := gpu_bytes(self.pid)) is not None:
                self.device.append(g)

    @property
    def outside_peak(self) -> int:
        return max(self.outside)

    def mark(self) -> tuple[int, int | None]:
        """The largest readings since the last mark (host, device): a context's own peak."""
        host = max(self.host[self._host_mark :], default=self.host[-1])
        dev = max(self.device[self._dev_mark :], default=self.device[-1] if self.device else None)
        self._host_mark, self._dev_mark = len(self.host), len(self.device)
        reset_high_water(self.pid)
        return host, dev

    def stop(self) -> MemoryReport:
        self._done.set()
        self._thread.join()
        self.outside.append(self._outside())
        return MemoryReport(
            host_after_load=self.host[0],
            host_peak=max(self.host),
            gpu_after_load=self.device[0] if self.device else None,
            gpu_peak=max(self.device) if self.device else None,
        )
