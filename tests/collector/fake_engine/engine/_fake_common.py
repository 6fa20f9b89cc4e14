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
        "schema_version": 2,
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


def path_speed(model: str, phase: str) -> float:
    """The checkout's own speed factor of a phase (its code), without the burst."""
    return B.SPEED.get(f"{model}/{phase}", 1.0)


def speed(model: str, phase: str) -> float:
    return path_speed(model, phase) * _burst


def jitter() -> float:
    return 1.0 + random.uniform(-0.004, 0.004)


def measured() -> dict:
    """What the timing parent adds: region timings (the engine's own clock at FORGE_CLOCK of the
    parent's) and verification margins (WRONG_WORK: nothing agrees with main's model)."""
    own = getattr(B, "FORGE_CLOCK", 1.0)
    margin = 5.0 if getattr(B, "WRONG_WORK", False) else 0.0
    return {
        "seed": 7,
        "timing": {"regions": [[0.01, 0.0099 * own]] * 20},
        "verification": {
            "reference": "main's fake engine",
            "decode_margins": [margin] * 40,
            "prefill_margins": [margin] * 6,
            "prefill_kl": [0.0] * 6,
        },
    }
