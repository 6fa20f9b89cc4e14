"""A GPU held after the engines stopped (turns.DeviceHeld): the timing parent ends the session
and finds whose work it is by killing the engines one by one, the PR's first
(timing.whose_device). Real engine processes (`tiny`, NumPy) in their sandboxes, and a device
probe that reads the device busy while one process lives: the PR's engine, main's, or one of
the box's that neither can reach. The real probe and a kernel left spinning: tests/gpu."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import REPO, checkout_with

from engine.errors import BaselineError, EngineError, EngineForged, EngineOutputError
from engine.harness import timing
from engine.harness.sandbox import Sandbox
from engine.harness.timing import EngineProcess, EngineSpec, whose_device
from engine.harness.turns import DeviceHeld, DeviceProbe


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


class HeldBy(DeviceProbe):
    """The device busy while process `pid` lives (its context's kernels run on); the probe's
    loop and deadline are the real one's, shortened."""

    DEADLINE_S = 0.3

    def __init__(self) -> None:  # no CuPy: nothing is launched
        self.pid: int | None = None

    def _once(self) -> float:
        time.sleep(0.002)
        return 1.0 if self.pid is not None and alive(self.pid) else 0.0


@pytest.mark.parametrize("culprit", ["pr", "main", "box"])
def test_whose_work_holds_the_gpu(
    tmp_path: Path, sandbox_kind: str, culprit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timing, "FREED_WITHIN_S", 0.5)
    probe = HeldBy()
    box = Sandbox(sandbox_kind)
    engines = []
    bystander = None
    try:
        for name, checkout in (("main", REPO), ("pr", checkout_with(tmp_path, name="pr"))):
            spec = EngineSpec(checkout, box, tmp_path / f"{name}-home")
            e = EngineProcess(spec, "tiny", "numpy", probe=probe, baseline=name == "main")
            engines.append(e)
        if culprit == "box":  # a process of the box's, outside both sandboxes
            import subprocess
            import sys

            bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            probe.pid = bystander.pid
        else:
            probe.pid = engines[0 if culprit == "main" else 1].pid
        for e in engines:
            e.connect()  # loaded; the device drained (to the deadline), nobody's yet
        main = engines[0]
        # main's turn ends first: the device is held, though the work is not always main's
        with pytest.raises(DeviceHeld) as held, main.turn():
            main.reset(1, 64)
        assert held.value.busy_s >= HeldBy.DEADLINE_S
        err = whose_device(held.value, engines, probe)
        gone = [not alive(e.pid) for e in engines]
        if culprit == "pr":
            assert isinstance(err, EngineForged), err
            assert "the engine process left work running on the GPU" in str(err)
            assert gone == [False, True]  # main's engine, stopped, untouched
        elif culprit == "main":
            assert type(err) is BaselineError, err
            assert "main's engine process" in str(err)
            assert gone == [True, True]  # the PR's went first: it ends here anyway
        else:
            assert type(err) is EngineError, err
            assert "another process on the box" in str(err)
            assert gone == [True, True]
    finally:
        for e in engines:
            e.close()
        if bystander is not None:
            bystander.kill()
            bystander.wait()


# appended to the PR's engine/__init__.py: soon after its import, a kernel that never ends,
# launched on a stream of its own and left behind when its turn ends
SPINNER = """
import threading as _threading
import time as _time


def _spin_soon() -> None:
    _time.sleep(0.5)  # wall time: it fires while the engine runs (loading, or in a turn)
    import cupy as _cp

    source = 'extern "C" __global__ void spin(volatile int* f) { while (f[0] == 0) { } }'
    flag = _cp.zeros(1, dtype=_cp.int32)
    with _cp.cuda.Stream(non_blocking=True):
        _cp.RawKernel(source, "spin")((1,), (1,), (flag,))


_threading.Thread(target=_spin_soon, daemon=True).start()
"""


@pytest.mark.gpu
def test_a_kernel_left_spinning_on_the_gpu_ends_the_session_forged(
    tmp_path: Path, sandbox_kind: str
) -> None:
    """The real probe, a real kernel: a paired sweep whose PR leaves a kernel running for good
    exits EXIT_FORGED, the PR's engine named, the device idle once its processes were killed."""
    import os
    import shutil
    import subprocess
    import sys

    from engine.cli_common import EXIT_FORGED

    pr = checkout_with(tmp_path, append=SPINNER, name="pr")
    shutil.copytree(REPO / "kernels", pr / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    argv = [sys.executable, "-m", "engine.harness.bench", "sweep", "--model", "tiny:f16"]
    argv += ["--backend", "cupy", "--ctx", "16,32", "--tokens", "4", "--reps", "3"]
    argv += ["--min-time", "0.01", "--baseline-checkout", ".", "--engine-checkout", str(pr)]
    argv += ["--sandbox", sandbox_kind, "--out", str(tmp_path / "out.json")]
    # a load the kernel holds up (the H200, 2026-12-05: main's load never ended) is judged at the
    # load deadline, shortened here; an honest load compiling its kernels cold takes ~70 s
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARKBOARD_LOAD_TIMEOUT_S": "120"}
    env.pop("SPARKBOARD_DEBUG", None)
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    last = res.stderr.strip().splitlines()[-1]
    print(f"{time.monotonic() - t0:.1f} s: {last}")  # how long the kill took to free it
    assert res.returncode == EXIT_FORGED, res.stderr[-3000:]
    assert last.startswith("error: the engine process left work running on the GPU"), last
    assert not (tmp_path / "out.json").exists()


# appended to an engine's engine/__init__.py: its process never says hello
NEVER_LOADS = "\nimport time as _time\n_time.sleep(600)\n"


@pytest.mark.parametrize("stuck", ["pr", "main"])
def test_an_engine_that_never_loads_fails_within_the_deadline(
    tmp_path: Path, stuck: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine that never loads is that engine's failure once LOAD_TIMEOUT_S passed (main's:
    BaselineError); the parent never waits for it for good."""
    monkeypatch.setattr(timing, "LOAD_TIMEOUT_S", 1.0)
    monkeypatch.setattr(timing, "QUIT_GRACE_S", 0.5)
    checkout = checkout_with(tmp_path, append=NEVER_LOADS, name="stuck")
    spec = EngineSpec(checkout, Sandbox("none"), tmp_path / "home")
    e = EngineProcess(spec, "tiny", "numpy", baseline=stuck == "main")
    try:
        with pytest.raises(EngineOutputError) as err:
            e.connect()
        assert (type(err.value) is BaselineError) == (stuck == "main")
        assert "did not load within 1 s" in str(err.value)
    finally:
        e.close()


@pytest.mark.parametrize("culprit", ["pr", "box"])
def test_a_load_held_up_by_a_kernel_left_running_is_laid_at_its_door(
    tmp_path: Path, culprit: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Main's load never ends while the device is held (on the H200 a PR's kernel left spinning
    held a session in an engine's load for good): the session stops every engine, finds the
    device still held, and kills them in turn: the PR's `forged` where the work was its
    engine's, the box's (measured again) where it was neither's; never main's failure for what
    the PR did."""
    from engine.harness.common import Clock
    from engine.harness.measure import Bench
    from engine.harness.speed_session import Legs, Role, Steps
    from engine.harness.timing import Challenges

    monkeypatch.setattr(timing, "LOAD_TIMEOUT_S", 1.0)
    monkeypatch.setattr(timing, "QUIT_GRACE_S", 0.5)
    monkeypatch.setattr(timing, "FREED_WITHIN_S", 0.5)
    probe = HeldBy()
    main = checkout_with(tmp_path, append=NEVER_LOADS, name="main")
    pr = checkout_with(tmp_path, name="pr")
    specs = [
        EngineSpec(main, Sandbox("none"), tmp_path / "main-home"),
        EngineSpec(pr, Sandbox("none"), tmp_path / "pr-home"),
    ]
    legs = Legs(
        "tiny", "numpy", specs, tmp_path, Steps(Clock()), probe, [Role([], []), Role([], [])]
    )
    bystander = None
    started = EngineProcess.__init__

    def watched(self: EngineProcess, *args: object, **kwargs: object) -> None:
        started(self, *args, **kwargs)
        if not self.baseline and culprit == "pr":
            probe.pid = self.pid  # the device busy while the PR's engine lives

    monkeypatch.setattr(EngineProcess, "__init__", watched)
    if culprit == "box":
        import subprocess
        import sys

        bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        probe.pid = bystander.pid
    try:
        b = Bench([], Challenges(), np.zeros(1, dtype=np.int64))
        with pytest.raises((EngineError, EngineOutputError)) as err:
            legs.run(b, lambda b, leg: [], 0)
        if culprit == "pr":
            assert isinstance(err.value, EngineForged), err.value
            assert "the engine process left work running on the GPU" in str(err.value)
            assert "an engine did not load" in str(err.value)
        else:
            assert type(err.value) is EngineError, err.value
            assert "another process on the box" in str(err.value)
    finally:
        if bystander is not None:
            bystander.kill()
            bystander.wait()
