"""A GPU held after the engines stopped (turns.DeviceHeld): the timing parent ends the session
and finds whose work it is by killing the engines one by one, the PR's first
(timing.whose_device). Real engine processes (`tiny`, NumPy) in their sandboxes, and a device
probe that reads the device busy while one process lives: the PR's engine, main's, or one of
the box's that neither can reach. The real probe and a kernel left spinning: tests/gpu."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from engine_helpers import REPO, checkout_with

from engine.errors import BaselineError, EngineError, EngineForged
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
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SPARKBOARD_DEBUG", None)
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    last = res.stderr.strip().splitlines()[-1]
    print(f"{time.monotonic() - t0:.1f} s: {last}")  # how long the kill took to free it
    assert res.returncode == EXIT_FORGED, res.stderr[-3000:]
    assert last.startswith("error: the engine process left work running on the GPU"), last
    assert not (tmp_path / "out.json").exists()
