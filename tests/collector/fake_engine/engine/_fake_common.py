"""Shared by the fake harness: behaviours and document headers (not a harness path)."""

import os
import random
import signal
import sys
import time

from engine import fake_behavior as B


def misbehave(command: str, out: str) -> None:
    ledger = os.environ.get("FAKE_ENGINE_LEDGER")
    if ledger:  # tests watch progress through this file
        with open(ledger, "a") as f:
            f.write(command + "\n")
    time.sleep(float(os.environ.get("FAKE_ENGINE_SLEEP", "0")))
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
        "schema_version": 1,
        "model": model,
        "model_id": "fake",
        "engine_commit": "unknown",
        "device": {"backend": "numpy" if backend == "auto" else backend, "name": "fake CPU"},
        "started_at": "2026-11-30T00:00:00Z",
        "wall_s": 0.01,
    }


def speed(model: str, phase: str) -> float:
    return B.SPEED.get(f"{model}/{phase}", 1.0)


def jitter() -> float:
    return 1.0 + random.uniform(-0.004, 0.004)
