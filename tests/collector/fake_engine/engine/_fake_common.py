"""Shared by the fake harness: behaviours and document headers (not a harness path)."""

import os
import random
import signal
import sys
import time
from pathlib import Path

from engine import fake_behavior as B

_burst = 1.0  # this process's share of its speed (fake_behavior.SLOW_RUNS)


def misbehave(command: str, out: str) -> None:
    ledger = os.environ.get("FAKE_ENGINE_LEDGER")
    if ledger:  # tests watch progress through this file
        with open(ledger, "a") as f:
            f.write(command + "\n")
    time.sleep(float(os.environ.get("FAKE_ENGINE_SLEEP", "0")))
    global _burst
    _burst = _in_burst(command)
    how = B.FAIL.get(command) or B.FAIL.get("*")
    if not how:
        return
    if how == "garbage":
        with open(out, "w") as f:
            f.write("{this is not json at all \x00\x01")
        sys.exit(0)
    if how == "nojson":
        print("done!")
        sys.exit(0)
    if how == "hang":
        time.sleep(3600)
    if how == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if how == "crash":
        raise RuntimeError("boom: index out of range in the new kernel")
    if how == "enospc":
        print("OSError: [Errno 28] No space left on device", file=sys.stderr)
        sys.exit(1)
    if how == "wrong-model":  # a valid document about something else
        sys.argv[sys.argv.index("--model") + 1] = "tiny:f16"


def header(model: str, backend: str) -> dict:
    return {
        "schema_version": 3,
        "model": model,
        "model_id": "fake",
        "engine_commit": "unknown",
        "device": {"backend": "numpy" if backend == "auto" else backend, "name": "fake CPU"},
        "started_at": "2026-11-30T00:00:00Z",
        "wall_s": 0.01,
    }


def _in_burst(command: str) -> float:
    """BURST for each of the checkout's first SLOW_RUNS[command] runs of a model, else 1."""
    n = getattr(B, "SLOW_RUNS", {}).get(command, 0)
    if not n:
        return 1.0
    model = sys.argv[sys.argv.index("--model") + 1]
    count = Path(B.__file__).with_name(f".{command}-runs-{model}")
    done = int(count.read_text()) if count.exists() else 0
    count.write_text(str(done + 1))
    return B.BURST if done < n else 1.0


def path_speed(model: str, phase: str, b=None) -> float:  # noqa: ANN001
    """A checkout's own speed factor of a phase (its code; default the measured one's), without
    the burst."""
    return (b or _measured()).SPEED.get(f"{model}/{phase}", 1.0)


def speed(model: str, phase: str, b=None) -> float:  # noqa: ANN001
    """The burst reaches the measured engine's runs only: main's beside it ran in other turns
    (the burst of a test is a neighbour's load that fell on the PR's turns)."""
    mine = b is None or b is _measured()
    return path_speed(model, phase, b) * (_burst if mine else 1.0)


def _measured():  # noqa: ANN202 - the measured checkout's behaviour (bench.py may swap it)
    import engine

    return engine.fake_behavior


def jitter() -> float:
    return 1.0 + random.uniform(-0.004, 0.004)


def idle(honest: bool = False) -> dict:
    """What the parent read of an engine between its turns: IDLE_CPU seconds of CPU after each
    answer (an engine that works while it is not its turn), none when honest."""
    cpu = 0.0 if honest else getattr(_measured(), "IDLE_CPU", 0.0)
    return {
        "between_s": [0.0] * 20,
        "after_answer_s": [cpu] * 20,
        "while_stopped_s": [0.0] * 20,
        "stop_s": [0.0003] * 20,
    }


def canary() -> dict:
    """The box's own speed before and after (CANARY_MOVED: the box changed by that factor)."""
    moved = float(os.environ.get("FAKE_CANARY_MOVED", "1.0"))
    return {"workload": "fake copy", "before_s": 0.001, "after_s": 0.001 * moved}


def measured(honest: bool = False) -> dict:
    """What the timing parent adds: region timings (the engine's own clock at FORGE_CLOCK of the
    parent's; main's beside it honest) and verification margins (WRONG_WORK: nothing agrees
    with main's model), what the engine did between its turns, the canary."""
    b = _measured()
    own = 1.0 if honest else getattr(b, "FORGE_CLOCK", 1.0)
    margin = 5.0 if getattr(b, "WRONG_WORK", False) else 0.0
    return {
        "seed": 7,
        "timing": {"regions": [[0.01, 0.0099 * own]] * 20},
        "idle": idle(honest),
        "canary": canary(),
        "sandbox": "fake",
        "verification": {
            "reference": "main's fake engine",
            "decode_margins": [margin] * 40,
            "prefill_margins": [margin] * 6,
            "prefill_kl": [0.0] * 6,
        },
    }
