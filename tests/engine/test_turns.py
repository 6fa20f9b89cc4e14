"""Turn by turn (engine/harness/turns.py): the timing parent stops an engine's every process when
its turn ends and reads from outside what they used meanwhile.

Real engine processes (`engine.harness.serve` on the `tiny` model, started by `EngineProcess`
as the timing parent starts them) from patched checkouts: one whose background thread, or a
child process it started, keeps a core busy, beside an honest one in the same session. The
parent pauses inside each turn, between two requests and after the last answer (as it does
its own work there), so an engine that works outside its requests has the time to show it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import REPO, checkout_with

from collector.judge.forgery import cores_problem
from collector.policy import ForgeryRules
from engine.harness.measure import idle_report
from engine.harness.sandbox import Sandbox
from engine.harness.timing import EngineProcess, EngineSpec
from engine.harness.turns import IDLE_WINDOW_S, LOAD_CORES_ENV, STOPPED_STATES

TURNS = 3
PAUSE_S = 0.1  # the parent's own work inside a turn, twice a turn

# code appended to a checkout's engine/__init__.py: it runs in the engine process at import
BUSY_THREAD = """
import threading as _threading


def _spin() -> None:
    while True:
        pass


_threading.Thread(target=_spin, name="busy", daemon=True).start()
"""
BUSY_CHILD = """
import subprocess as _subprocess
import sys as _sys

# a helper process that spins until its engine process is gone
_subprocess.Popen(
    [_sys.executable, "-c", "import os\\np = os.getppid()\\nwhile os.getppid() == p:\\n    pass"]
)
"""

# At its first turn (the parent's first SIGCONT: once loaded, the parent moves it onto the
# session's core, whatever it did while loading), moves itself onto every core (a process may,
# without any capability), and starts a helper process on the cores it was not on, which works
# while the engine's main thread computes: more than one core inside its requests, even where
# another core is busy
OTHER_CORES = """
import os as _os
import signal as _signal
import subprocess as _subprocess
import sys as _sys

_HELPER = '''
import os, sys, time
try:
    os.sched_setaffinity(0, set(range(os.cpu_count())) - set(map(int, sys.argv[1:])))
except OSError:
    pass  # refused: it stays on the engine's core
main = f"/proc/{os.getppid()}/task/{os.getppid()}/stat"
while True:
    try:
        state = open(main).read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        break
    if state == "R":  # the engine computes: work beside it for 1 ms
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:
            pass
    else:
        time.sleep(2e-4)
'''


def _move(*_: object) -> None:
    _signal.signal(_signal.SIGCONT, _signal.SIG_DFL)  # once
    mine = _os.sched_getaffinity(0)
    try:
        _os.sched_setaffinity(0, range(_os.cpu_count()))
    except OSError:
        pass  # the sandbox refuses it
    _subprocess.Popen([_sys.executable, "-c", _HELPER, *map(str, mine)])


_signal.signal(_signal.SIGCONT, _move)
"""

# Says on its stderr the cores it loads on, and starts, while it loads, a thread and a child
# process that outlive the load: what the parent moves onto the session's core once it loaded
LOADS_ELSEWHERE = """
import os as _os
import subprocess as _subprocess
import sys as _sys
import threading as _threading
import time as _time

print("loaded on", sorted(_os.sched_getaffinity(0)), file=_sys.stderr, flush=True)
_threading.Thread(target=_time.sleep, args=(600,), daemon=True).start()
_subprocess.Popen(
    [_sys.executable, "-c", "import os, time\\np = os.getppid()\\nwhile os.getppid() == p:\\n"
     "    time.sleep(0.05)"]
)
"""


@pytest.fixture
def sandbox(sandbox_kind: str) -> Sandbox:
    return Sandbox(sandbox_kind)


def start(checkout: Path, box: Sandbox, home: Path) -> EngineProcess:
    engine = EngineProcess(EngineSpec(checkout, box, home), "tiny", "numpy", raise_on_death=True)
    engine.connect()  # loaded, then stopped until its first turn
    return engine


def stopped(engine: EngineProcess, within_s: float = 5.0) -> bool:
    """Every thread of the engine stopped, read again until `within_s` passed: a stop the parent
    sent is delivered when the kernel next runs the thread, which on a box loaded by the rest of
    the suite can be after the parent's own reading (a fresh clone's `make test`, 2026-12-05:
    one thread still 'R' right after its turn ended)."""
    deadline = time.monotonic() + within_s
    while not set(thread_states(engine)) <= STOPPED_STATES:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def thread_states(engine: EngineProcess) -> list[str]:
    """The state letter of every thread of every process of the engine (its sandbox's)."""
    states = []
    for pid in engine.turns.tree.pids():
        for task in Path(f"/proc/{pid}/task").iterdir():
            stat = (task / "stat").read_text()
            states.append(stat.rsplit(")", 1)[1].split()[0])
    return states


def take_turns(engines: list[EngineProcess]) -> None:
    """TURNS turns each, in order; each a reset, a prefill and a decode, with the parent's
    pauses; after each turn, the engine is checked stopped: every thread, and no CPU used."""
    prompt = np.arange(16) % engines[0].vocab
    for _ in range(TURNS):
        for e in engines:
            with e.turn():
                e.reset(1, 64)
                e.prefill([0], [prompt])
                time.sleep(PAUSE_S)  # between an answer and the next request
                e.decode([0], np.array([1]), 4)
                time.sleep(PAUSE_S)  # after the turn's last answer, before the stop
            states = thread_states(e)
            assert states and set(states) <= STOPPED_STATES, states
            assert "T" in states or "t" in states
            cpu = e.turns.tree.cpu_s()
            time.sleep(PAUSE_S / 4)
            assert e.turns.tree.cpu_s() - cpu < 1e-3  # really stopped: no CPU while it waits


@pytest.mark.parametrize("misbehaviour", [BUSY_THREAD, BUSY_CHILD], ids=["thread", "child"])
@pytest.mark.timed
def test_an_engine_that_works_outside_its_requests_shows_in_its_ledger(
    tmp_path: Path, sandbox: Sandbox, misbehaviour: str
) -> None:
    busy_checkout = checkout_with(tmp_path, append=misbehaviour, name="busy")
    honest = start(REPO, sandbox, tmp_path / "honest-home")
    busy = start(busy_checkout, sandbox, tmp_path / "busy-home")
    try:
        if misbehaviour == BUSY_CHILD:
            assert len(busy.turns.tree.pids()) > len(honest.turns.tree.pids())
        take_turns([honest, busy])
        ledgers = {"honest": honest.ledger, "busy": busy.ledger}
        reports = {k: idle_report(e) for k, e in (("honest", honest), ("busy", busy))}
    finally:
        busy.close()
        honest.close()
    for led in ledgers.values():
        # one reading per turn (the stop after loading is none), every process stopped
        assert len(led.after_answer_s) == len(led.between_s) == len(led.stop_s) == TURNS
        assert len(led.window_s) == TURNS and min(led.window_s) >= IDLE_WINDOW_S
        assert len(led.while_stopped_s) == TURNS  # each turn began stopped, the first too
        assert max(led.while_stopped_s) < 1e-3  # stopped, the busy one too: nothing ran
        assert led.device_busy_s == []  # no GPU probe on the CPU
    h, b = ledgers["honest"], ledgers["busy"]
    windows = TURNS * PAUSE_S  # the parent's pauses, of each kind
    # the busy engine used a good part of each pause (a core of a busy box, shared); the honest
    # one, blocked on its pipe, next to nothing
    for kind in ("between_s", "after_answer_s"):
        busy_cpu, honest_cpu = sum(getattr(b, kind)), sum(getattr(h, kind))
        assert busy_cpu > 0.2 * windows, (kind, busy_cpu)
        assert busy_cpu > 20 * honest_cpu + 0.05 * windows, (kind, busy_cpu, honest_cpu)
    # what the document carries is the ledger, rounded
    assert reports["busy"].after_answer_s == [round(x, 6) for x in b.after_answer_s]
    assert reports["honest"].while_stopped_s == [round(x, 6) for x in h.while_stopped_s]


def test_an_engine_is_stopped_between_turns_and_quits_when_asked(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """Out of its turn an engine is stopped from the moment it has loaded; it answers in its
    turn, and quits (continued first) when closed: no process of its sandbox is left."""
    engine = start(REPO, sandbox, tmp_path / "home")
    try:
        assert stopped(engine), thread_states(engine)
        pids = engine.turns.tree.pids()
        assert engine.pid in pids and (len(pids) == 1) != sandbox.sealed  # bwrap's two, sealed
        with engine.turn():
            assert not set(thread_states(engine)) & {"T", "t"}
            engine.reset(1, 32)
            samples, seconds = engine.prefill([0], [np.arange(8)])
            assert seconds > 0 and 0 <= samples[0].argmax < engine.vocab
        assert stopped(engine), thread_states(engine)
        # an operation outside a turn gets a turn of its own, and ends stopped
        assert engine.vram(kv_tokens=16) is None
        assert stopped(engine), thread_states(engine)
        assert len(engine.ledger.after_answer_s) == 2  # two turns: loading is none
    finally:
        engine.close()
    assert engine.proc.returncode == 0
    assert [p for p in pids if alive(p)] == []


def test_an_engine_that_loaded_on_other_cores_takes_its_turns_on_the_sessions_core(
    tmp_path: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's engines may load on cores of their own (turns.loading_cores: side by side, not
    taking turns on the session's one core); once loaded, the parent moves every thread of every
    process onto its own core, those the engine started while loading too, before the first
    turn (a thread or process started later has its creator's cores, and the sandbox refuses it
    a move of its own: the mover test below). Its ledger counts the session's one core."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    session, loading = cores[-1], cores[0]
    checkout = checkout_with(tmp_path, append=LOADS_ELSEWHERE, name="elsewhere")
    monkeypatch.setenv(LOAD_CORES_ENV, str(loading))
    os.sched_setaffinity(0, {session})  # the timing parent's one core, which the engine is not told
    try:
        engine = start(checkout, sandbox, tmp_path / "home")
    finally:
        os.sched_setaffinity(0, cores)
    try:
        engine.err.seek(0)
        assert f"loaded on [{loading}]" in engine.err.read().decode()
        pids = engine.turns.tree.pids()
        tids = [int(t) for p in pids for t in os.listdir(f"/proc/{p}/task")]
        assert len(pids) >= 2 and len(tids) >= len(pids) + 1, (pids, tids)
        assert {t: os.sched_getaffinity(t) for t in tids} == dict.fromkeys(tids, {session})
        with engine.turn():
            engine.reset(1, 64)
            engine.prefill([0], [np.arange(16) % engine.vocab])
        assert idle_report(engine).cores == 1
    finally:
        engine.close()


def alive(pid: int, within_s: float = 10.0) -> bool:
    """Whether the process is still running after up to `within_s` (a sealed engine's bwrap
    init is killed when bwrap exits, and reaped by whoever inherits it a moment later)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.02)
    return True


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nowhere to move")
@pytest.mark.timed
def test_an_engine_that_moves_onto_other_cores_is_refused_sealed_and_seen_unsealed(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """On a one-core session an engine may move itself onto every core of the box and work
    beside its own computation there. Sealed, the move is refused (sandbox.py's seccomp filter)
    and its requests' CPU stays within their wall time; unsealed, its requests use more CPU than
    one core can run in them, and the collector's rule calls it forged. The honest engine beside
    it reads at most one core's worth either way. The rule binds where the engine has its core
    to itself, as a session's engine has (and this test, in run_suite.py's timed lane): with its
    own core shared too, it reads less than a core's worth, the helper's share hidden in that.
    Sealed, that case never arises: the move is refused."""
    mover = checkout_with(tmp_path, append=OTHER_CORES, name="mover")
    kept = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {max(kept)})  # the engines inherit this thread's one core
    try:
        honest = start(REPO, sandbox, tmp_path / "honest-home")
        moved = start(mover, sandbox, tmp_path / "mover-home")
    finally:
        os.sched_setaffinity(0, kept)
    try:
        prompt = np.arange(512) % honest.vocab
        for _ in range(4):
            for e in (honest, moved):
                with e.turn():
                    e.reset(1, 1024)
                    e.prefill([0], [prompt])
                    e.decode([0], np.array([1]), 32)
        reports = {"honest": idle_report(honest), "moved": idle_report(moved)}
    finally:
        moved.close()
        honest.close()
    rules = ForgeryRules()
    for name, r in reports.items():
        assert r.cores == 1 and len(r.request_cpu_s) == len(r.request_wall_s) == 4, name
    h, m = reports["honest"], reports["moved"]
    assert sum(h.request_cpu_s) <= sum(h.request_wall_s) and cores_problem(h, rules) is None
    if sandbox.sealed:
        assert sum(m.request_cpu_s) <= sum(m.request_wall_s) and cores_problem(m, rules) is None
    else:
        # its helper had a share of another core, whatever else ran there (a suite's other lane)
        assert "more than the 1 core the session gave them" in (cores_problem(m, rules) or ""), m
