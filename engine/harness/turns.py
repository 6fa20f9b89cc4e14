"""Turn by turn: the engine whose turn it is not is stopped, and checked while it waits.

Two engines measured side by side (main's and the PR's, timing.py) share the box's cores,
caches, memory bandwidth and GPU. Each runs only during its own requests: the timing parent
resumes it (SIGCONT to every process of its sandbox) right before sending a request, inside the
timed region, and stops it (SIGSTOP to every process) as soon as the answer is in. A stop cannot
be caught or ignored; a thread in a long system call stops when the call returns. While an
engine waits, the parent reads what the kernel and the device say about it (`Ledger`):

* the CPU time its processes used after its answer, until every thread had stopped: an engine
  that goes on working once it has answered (work moved out of its timed region, or a load
  meant for the other engine's turn) shows it here, and only such work can run there: a thread
  in user space stops within microseconds;
* the CPU time they used while stopped (nothing, unless a process escaped the stop);
* how long the stop took (a process that keeps starting others is never all stopped);
* the CPU time its processes used inside its requests (from just before each request to its
  last answer), against those requests' wall time and the cores the session gave them (`cores`):
  on one core (the profiles' `one_core`) an engine cannot use more CPU than its requests lasted,
  unless it ran on other cores, which the sandbox forbids (sandbox.py: no `sched_setaffinity`)
  and an unsandboxed process may do to itself without any capability. An engine may load on
  other cores (`loading_cores`: the two loads side by side, not taking turns on the session's one);
  once loaded and stopped, the parent moves every thread of it onto its own cores (`hold`), and
  nothing the engine starts later can leave them;
* on a GPU, how long the device stayed busy after it stopped (kernels it queued before
  answering run on without its process): the parent waits for the device to be idle before
  the next turn, and records the wait. A device still busy at the wait's deadline is held
  (`DeviceHeld`): the session cannot go on, and the timing parent finds whose work it is by
  killing the engines one by one (timing.whose_device).

The collector judges these readings (collector/judge/forgery.py): an engine that works while it is
not its turn is `forged`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

STOP_DEADLINE_S = 2.0  # an engine not stopped (or not moved onto its cores) by then says so
# At the end of its turn an engine is watched this long, running with nothing asked, before it is
# stopped: an honest engine waits in its read and uses nothing; one that works while it is not
# its turn (a thread, a process of its own) shows it here, in every turn.
IDLE_WINDOW_S = 0.002
POLL_S = 20e-6
STOPPED_STATES = {"T", "t", "Z", "X"}
CPUCLOCK_SCHED = 2  # Linux's process CPU clock (clock_getcpuclockid): ns, every thread summed
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc's unit of CPU time


# The cores an engine loads on, where the collector gives some (collector/run/runner.py
# `load_cores`, comma-separated CPU numbers): a session's engines load side by side there, and
# `TurnTaker.hold` moves every thread of each onto the timing parent's own cores (the session's
# one core) before its first turn. Unset: an engine starts on the parent's cores.
LOAD_CORES_ENV = "SPARKBOARD_LOAD_CORES"


def loading_cores() -> set[int] | None:
    """The cores an engine is to load on (`LOAD_CORES_ENV`), or None: the parent's own."""
    text = os.environ.get(LOAD_CORES_ENV, "").strip()
    if not text:
        return None
    try:
        cores = {int(c) for c in text.split(",")}
    except ValueError:
        cores = set()
    if not cores or min(cores) < 0:
        raise ValueError(f"{LOAD_CORES_ENV}={text!r}: not a comma-separated list of CPU numbers")
    return cores


def _cpu_clock(pid: int) -> int:
    return ((~pid) << 3) | CPUCLOCK_SCHED


def process_cpu_s(pid: int) -> float:
    """CPU seconds the process has used (every thread, the living and the exited) and its
    children that have exited and been waited for (a short-lived process's work lands there),
    or 0.0 once it is gone."""
    try:
        own = time.clock_gettime(_cpu_clock(pid))
    except OSError:
        return 0.0
    return own + reaped_children_s(pid)


def reaped_children_s(pid: int) -> float:
    """The CPU seconds of the process's children that have exited and been waited for (its
    /proc stat's cutime and cstime, in clock ticks), 0.0 where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after the name, which may hold spaces
    return (int(fields[13]) + int(fields[14])) / CLOCK_TICKS


def _tasks(pid: int) -> list[int]:
    """The thread ids of the process ([] once it is gone)."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for tid in _tasks(pid):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        kids += [int(c) for c in text.split()]
    return kids


def _states(pid: int) -> list[str]:
    """The state letter of each thread of the process ([] once it is gone)."""
    out = []
    for tid in _tasks(pid):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        out.append(stat.rsplit(")", 1)[1].split()[0])
    return out


def _off(tid: int, cores: set[int]) -> bool:
    """Is the thread allowed on any core but `cores`? (A thread gone is nowhere.)"""
    try:
        return os.sched_getaffinity(tid) != cores
    except OSError:
        return False


class ProcessTree:
    """The processes of one engine: below `root` (the sandbox's outer bwrap process, which is
    ours: bwrap's PID 1 of the sandbox, the engine and whatever it started), or `root` itself and
    below it when the engine runs unsandboxed."""

    def __init__(self, root: int, include_root: bool) -> None:
        self.root, self.include_root = root, include_root

    def pids(self) -> list[int]:
        found: list[int] = [self.root] if self.include_root else []
        todo = _children(self.root)
        while todo:
            pid = todo.pop()
            if pid not in found:
                found.append(pid)
                todo += _children(pid)
        return found

    def engine_pid(self) -> int | None:
        """The engine's own process: the root unsandboxed; sealed, the command below bwrap's
        two processes (the one outside the namespaces, and its PID 1 inside). None when gone."""
        if self.include_root:
            return self.root
        level = [self.root]
        for _ in range(2):
            level = [k for p in level for k in _children(p)]
        return min(level) if level else None

    def cpu_s(self, pids: list[int] | None = None) -> float:
        return sum(process_cpu_s(p) for p in (self.pids() if pids is None else pids))

    def cpu_each(self, also: list[int]) -> dict[int, float]:
        """Each process's CPU seconds, read once: the tree's processes now, and `also` (a turn's
        processes, which may have left the tree)."""
        return {p: process_cpu_s(p) for p in dict.fromkeys([*self.pids(), *also])}

    def pin(self, cores: set[int]) -> int:
        """Every thread of every process onto `cores`, again for any that appeared or was
        missed, until a pass finds each there or STOP_DEADLINE_S passed: how many were left
        elsewhere (0: all there). Meant for a stopped tree: a stopped thread starts no other."""
        t0 = time.perf_counter()
        while True:
            off = [t for p in self.pids() for t in _tasks(p) if _off(t, cores)]
            if not off or time.perf_counter() - t0 > STOP_DEADLINE_S:
                return len(off)
            for tid in off:
                with contextlib.suppress(OSError):  # gone, or not to be moved: counted below
                    os.sched_setaffinity(tid, cores)
            time.sleep(POLL_S)

    def signal(self, sig: int, pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def stop(self) -> tuple[float, list[int]]:
        """SIGSTOP every process, again for any that appeared meanwhile, until every thread is
        stopped or STOP_DEADLINE_S passed: (seconds it took, the processes)."""
        t0 = time.perf_counter()
        sent: set[int] = set()
        while True:
            pids = self.pids()
            new = [p for p in pids if p not in sent]
            self.signal(signal.SIGSTOP, new)
            sent.update(new)
            running = [p for p in pids if not set(_states(p)) <= STOPPED_STATES]
            waited = time.perf_counter() - t0
            if not running and not new:
                return waited, pids
            if waited > STOP_DEADLINE_S:
                return waited, pids
            self.signal(signal.SIGSTOP, running)  # a tracer may have swallowed the first
            time.sleep(POLL_S)

    def resume(self, pids: list[int]) -> None:
        self.signal(signal.SIGCONT, pids)

    def kill(self, within_s: float = 5.0) -> bool:
        """SIGKILL every process (the root too), and wait until each has exited (a zombie has
        closed its files: the driver has let go of its GPU context). False if one still runs
        after `within_s`."""
        deadline = time.monotonic() + within_s
        while True:
            pids = [self.root, *self.pids()]
            self.signal(signal.SIGKILL, pids)
            if all(set(_states(p)) <= {"Z", "X"} for p in pids):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)


class DeviceHeld(Exception):  # noqa: N818 - an event, not a failure of this code
    """The GPU was still busy at the deadline of the wait after an engine stopped (`when`): work
    that runs on without its process, which no honest engine leaves. Whose it is, the timing
    parent finds out (timing.whose_device)."""

    def __init__(self, busy_s: float, when: str) -> None:
        super().__init__(f"the GPU stayed busy {busy_s:.1f} s after {when}")
        self.busy_s, self.when = busy_s, when


@dataclass
class Ledger:
    """What one engine did outside its timed work, turn by turn (seconds): the parent's
    readings, never the engine's."""

    # CPU its processes used between an answer and the parent's next request inside the turn
    between_s: list[float] = field(default_factory=list)
    # CPU after its turn's last answer, until stopped
    after_answer_s: list[float] = field(default_factory=list)
    window_s: list[float] = field(default_factory=list)  # how long it was watched idle (wall)
    while_stopped_s: list[float] = field(default_factory=list)  # CPU while it was stopped
    stop_s: list[float] = field(default_factory=list)  # how long each stop took
    device_busy_s: list[float] = field(default_factory=list)  # the GPU busy after it stopped
    # per turn, inside its requests (each from just before it was sent to its last answer):
    # the CPU its processes used, and the wall time
    request_cpu_s: list[float] = field(default_factory=list)
    request_wall_s: list[float] = field(default_factory=list)
    cores: int = 0  # the CPUs its turns run on (the timing parent's own, the session's)


class TurnTaker:
    """Continues and stops one engine's processes turn by turn, keeping its Ledger. A turn
    (`begin` .. `end`) holds a burst of requests; inside it, the CPU its processes use between
    an answer and the next request is read too (`answered`, `asking`). `probe`: a device-idle
    probe (DeviceProbe) on a GPU, None on the CPU. Its turns run on the cores of the thread
    that made it, the timing parent's (`cores`; `hold` moves the engine there)."""

    def __init__(self, tree: ProcessTree, probe: DeviceProbe | None = None) -> None:
        self.tree, self.probe = tree, probe
        self.cores = os.sched_getaffinity(0)
        self.ledger = Ledger(cores=len(self.cores))
        self.stopped: list[int] | None = None  # the processes stopped, while it is not its turn
        self._cpu_stopped = 0.0
        self._turn: list[int] | None = None  # its processes, during its turn
        self._gap = 0.0  # CPU between answers and requests, this turn
        self._at_answer: float | None = None
        self._asked: tuple[float, float] | None = None  # (wall, its CPU) as a request went
        self._in_requests = [0.0, 0.0]  # CPU and wall inside this turn's requests

    @property
    def active(self) -> bool:
        return self._turn is not None

    def ready(self) -> list[int]:
        """Before its turn, outside any timed region: what the stopped engine used while
        stopped; the processes to continue (`go`)."""
        pids = self.tree.pids()
        if self.stopped is not None:
            used = self.tree.cpu_s(pids) - self._cpu_stopped
            self.ledger.while_stopped_s.append(max(used, 0.0))
        return pids

    def go(self, pids: list[int]) -> None:
        """Its turn begins: the processes `ready` returned continue (a signal each)."""
        if self.stopped is not None:
            self.tree.resume(pids)
            self.stopped = None
        self._turn, self._gap, self._at_answer = pids, 0.0, None
        self._asked, self._in_requests = None, [0.0, 0.0]

    def begin(self) -> None:
        self.go(self.ready())

    def asking(self) -> None:
        """Right before a request inside the turn: CPU since its last answer is a gap's."""
        if self._turn is None:
            return
        # the wall clock first and last: the interval holds the CPU readings (every process of
        # its tree now, a process it starts meanwhile counted whole)
        at = time.perf_counter()
        each = self.tree.cpu_each(self._turn)
        if self._at_answer is not None:
            self._gap += max(sum(each[p] for p in self._turn) - self._at_answer, 0.0)
            self._at_answer = None
        self._asked = (at, sum(each.values()))

    def answered(self) -> None:
        """Right after an answer (all of it) inside the turn."""
        if self._turn is None:
            return
        each = self.tree.cpu_each(self._turn)
        if self._asked is not None:
            self._in_requests[0] += max(sum(each.values()) - self._asked[1], 0.0)
            self._in_requests[1] += time.perf_counter() - self._asked[0]
            self._asked = None
        self._at_answer = sum(each[p] for p in self._turn)

    def end(self) -> None:
        """Its turn is over: stop every process, and read what they used meanwhile."""
        before = self._at_answer if self._at_answer is not None else self.tree.cpu_s(self._turn)
        t0 = time.perf_counter()
        time.sleep(IDLE_WINDOW_S)  # asked nothing: an honest engine waits in its read
        self.ledger.window_s.append(time.perf_counter() - t0)
        took = self._stop_all()
        # processes started during the turn count whole: none was there at its last answer
        self.ledger.after_answer_s.append(max(self._cpu_stopped - before, 0.0))
        self.ledger.between_s.append(self._gap)
        self.ledger.stop_s.append(took)
        self.ledger.request_cpu_s.append(self._in_requests[0])
        self.ledger.request_wall_s.append(self._in_requests[1])
        if self.probe is not None:
            self.ledger.device_busy_s.append(self.probe.drain("a turn ended"))

    def hold(self) -> int:
        """Once loaded, before its first turn: every process stopped, every thread moved onto
        the turns' cores (it may have loaded on others: `loading_cores`), and the device drained of
        whatever its load queued; the threads left elsewhere (0: none). Nothing is read into the
        ledger: this is no turn, and the device may still be busy with the other engine's load
        (engines load at once), which a reading here would lay at this one's door (2026-12-03:
        main's engine, connected first, read 60-600 ms of the PR's load after its "turn" at each
        leg's start). Nor is a device held here anyone's yet: the session checks it once every
        engine has loaded."""
        self._stop_all()
        left = self.tree.pin(self.cores)
        if self.probe is not None:
            self.probe.wait_idle()
        return left

    def _stop_all(self) -> float:
        """Every process stopped, and the CPU they have used so far read (what `ready` counts
        from): the seconds the stop took."""
        took, pids = self.tree.stop()
        self._cpu_stopped = self.tree.cpu_s(pids)
        self.stopped, self._turn = pids, None
        return took

    def release(self) -> None:
        """Continue every process for good (to quit, or to be killed)."""
        self.tree.resume(self.tree.pids())
        self.stopped, self._turn = None, None


class DeviceProbe:
    """Is the GPU idle? The time a one-thread kernel takes from launch to completion, launched
    by this process: a few microseconds on an idle device, a time slice or more while another
    process's kernels run. `wait_idle` probes until it is idle (or the deadline passes) and
    returns the seconds the device stayed busy."""

    IDLE_S = 200e-6  # a probe slower than this found the device busy
    # No honest engine leaves work running this long after it answered; an engine that does
    # holds the device (DeviceHeld)
    DEADLINE_S = 10.0

    def __init__(self) -> None:
        import cupy  # late: only on a GPU

        self._cupy = cupy
        self._kernel = cupy.RawKernel(
            'extern "C" __global__ void probe(int* x) { x[0] += 1; }', "probe"
        )
        self._x = cupy.zeros(1, dtype=cupy.int32)
        self._stream = cupy.cuda.Stream(non_blocking=True)
        for _ in range(3):  # compile and load first
            self._once()

    def _once(self) -> float:
        t0 = time.perf_counter()
        with self._stream:
            self._kernel((1,), (1,), (self._x,))
        self._stream.synchronize()
        return time.perf_counter() - t0

    def wait_idle(self, deadline_s: float | None = None) -> float:
        """Probe until the device is idle, or `deadline_s` (DEADLINE_S) passed: the seconds it
        stayed busy (0.0: idle at once)."""
        limit = self.DEADLINE_S if deadline_s is None else deadline_s
        t0 = time.perf_counter()
        while self._once() > self.IDLE_S:
            if time.perf_counter() - t0 > limit:
                break
        busy = time.perf_counter() - t0
        return 0.0 if busy <= self.IDLE_S else busy

    def drain(self, after: str) -> float:
        """`wait_idle`; a device still busy at its deadline `after` something is held
        (DeviceHeld)."""
        busy = self.wait_idle()
        if busy >= self.DEADLINE_S:
            raise DeviceHeld(busy, after)
        return busy
