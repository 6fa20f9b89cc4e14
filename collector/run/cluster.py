"""A round over many GPUs and hosts, on Ray: one shard per GPU, the driver the only writer.

`sparkboard collect MANIFEST --db FILE --cluster local|auto|ray://HOST:PORT` cuts the round into
shards (collector/schedule.py `plan_shards`: each shard a set of PRs interleaved with its own
main sessions). Each shard is a Ray actor asking for one GPU (`num_gpus=1`; Ray sets its
CUDA_VISIBLE_DEVICES): it checks its device, then runs the shard's sessions one call at a time
(`session.measure_session`: the subprocess, the box's checks) and hands each Run back. The driver
judges what needs the database and writes each session as it arrives (`round_run.record`), so:

* a worker killed mid-session loses nothing finished (the driver wrote it) and duplicates
  nothing (its unfinished session is retried by Ray on the restarted actor; once the restarts
  run out, the shard's rest is left for the next `collect`, which resumes from the database);
* a GPU that fails its device check is named in the log and excluded: its actor is kept alive,
  holding that GPU, until the round ends, and the shard starts again on another GPU.

Ray is imported here only, and only when a cluster is asked for. On one host the shards share
the box: each has its own main checkout and scratch, but a hostile PR could still reach a
neighbour shard's files; run one shard per host (or container) where that matters.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.errors import RoundError
from collector.run.outcome import Outcome
from collector.run.runner import Run
from collector.run.sandbox import BoxGuard
from collector.run.session import SessionKit, here, measure_session, stop_if_box_changed
from collector.schedule import Task
from collector.store.writer import Placement

RESTARTS = 2  # a killed worker is restarted (and its session retried) this often per shard
CHECK_TIMEOUT_S = 120
DEVICE_CHECKS = {  # what a shard's worker runs before its first session, per backend
    "cupy": "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0; cupy.ones(4).sum().item()",
    "numpy": "import numpy; assert numpy.ones(4).sum() == 4",
}


def device_problem(backend: str) -> str | None:
    """Why this process's device cannot run sessions, or None: a fresh `python -c` that the
    backend sees a device and computes on it (the NumPy backend: a trivial sum)."""
    code = DEVICE_CHECKS.get(backend, DEVICE_CHECKS["cupy"])
    try:
        res = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=CHECK_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return f"device check gave no answer in {CHECK_TIMEOUT_S} s"
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
        return f"device check failed: {tail[:200]}"
    return None


@dataclass
class Handed:
    """What a worker hands back for one session."""

    outcome: Run | Outcome | None  # None: the device check failed, nothing ran
    placement: Placement
    problem: str | None = None
    notes: list[str] = field(default_factory=list)  # the box guard's log lines


class ShardWorker:
    """One GPU's worker (a Ray actor): its device checked once, then one session per call."""

    def __init__(self, kit: SessionKit) -> None:
        self.kit = kit
        self.placement = here()
        self.problem = device_problem(kit.policy.profile.backend)
        self.notes: list[str] = []
        self.guard = (
            None if self.problem else BoxGuard(kit.place, self.notes.append, kit.pr_checkouts)
        )

    def run(self, task: Task, checkout: Path | None) -> Handed:
        if self.guard is None:
            return Handed(None, self.placement, self.problem)
        o = measure_session(self.kit, self.guard, task, checkout)
        notes, self.notes[:] = list(self.notes), []
        return Handed(o, self.placement, None, notes)


@dataclass
class Connection:
    gpus: int  # GPUs the round may use: one shard each


@contextlib.contextmanager
def connect(address: str, gpus: int | None, log: Callable[[str], None]) -> Iterator[Connection]:
    """A Ray cluster: 'local' starts one here (`gpus` logical GPUs where given: a CPU box
    declares them), 'auto' joins the running one, 'ray://HOST:PORT' a remote one (`gpus` caps
    how many of its GPUs the round takes). An instance already started in this process is used."""
    try:
        import ray  # noqa: PLC0415 - optional: pip install 'sparkboard[cluster]'
    except ImportError:
        raise RoundError(
            "--cluster needs Ray: pip install 'sparkboard[cluster]' (or: pip install ray)"
        ) from None
    owned = not ray.is_initialized()
    if owned and address == "local":
        ray.init(num_gpus=gpus, include_dashboard=False, log_to_driver=False)
    elif owned:
        ray.init(address=address, log_to_driver=False)
    try:
        n = int(ray.cluster_resources().get("GPU", 0))
        if gpus and address != "local":
            n = min(n, gpus)
        if n < 1:
            raise RoundError(
                f"the Ray cluster ({address}) has no GPU: on a CPU box declare logical ones "
                "with --cluster local --gpus N"
            )
        log(f"cluster {address}: {n} GPUs")
        yield Connection(n)
    finally:
        if owned:
            ray.shutdown()


@dataclass
class _Shard:
    index: int
    todo: deque[Task]
    actor: Any = None
    placement: Placement | None = None


def _handed(ref: Any, s: _Shard, log: Callable[[str], None]) -> Handed | None:
    """What a shard's worker handed back for its session; None when the worker was lost (its
    unfinished sessions are left for the next collect). A session that raised stops the round:
    the box guard stopped it, or a bug (the message says which)."""
    import ray  # noqa: PLC0415 - optional extra
    from ray.exceptions import RayActorError, RayTaskError  # noqa: PLC0415

    try:
        return ray.get(ref)
    except RayTaskError as e:
        raise RoundError(str(e.cause) if e.cause else str(e)) from None
    except RayActorError as e:
        first = (str(e).strip().splitlines() or ["died"])[0][:200]
        log(
            f"shard {s.index}: worker lost ({first}); its {len(s.todo)} unfinished sessions are "
            "left for the next collect"
        )
        return None


def run_shards(
    conn: Connection,
    shards: list[list[Task]],
    kit_of: Callable[[int], SessionKit],
    checkout: Callable[[Task], Path | None],
    done: Callable[[Task, Run | Outcome, Placement | None], int],
    skip: Callable[[Task], Outcome | None],
    log: Callable[[str], None],
    hook: Callable[[int, Task, Handed], None] | None = None,
) -> int:
    """Every shard's sessions on its own GPU at once; each Outcome written by `done` (the driver)
    as it arrives; a task `skip` answers for is written without running. Returns the sessions
    left failing for infrastructure (or not run)."""
    import ray  # noqa: PLC0415 - optional extra

    worker = ray.remote(num_gpus=1, num_cpus=0, max_restarts=RESTARTS, max_task_retries=RESTARTS)(
        ShardWorker
    )
    live = [_Shard(k, deque(todo)) for k, todo in enumerate(shards) if todo]
    pending: dict[Any, _Shard] = {}
    parked: list[Any] = []  # workers holding a GPU that failed its device check
    infra = 0

    def submit(s: _Shard) -> None:
        """The shard's next task to its worker; the skipped ones before it are written here."""
        nonlocal infra
        while s.todo and (o := skip(s.todo[0])) is not None:
            infra += done(s.todo.popleft(), o, s.placement)
        if not s.todo:
            if s.actor is not None:
                ray.kill(s.actor)  # its GPU goes to a shard still waiting for one
                s.actor = None
            return
        if s.actor is None:
            s.actor = worker.remote(kit_of(s.index))
        pending[s.actor.run.remote(s.todo[0], checkout(s.todo[0]))] = s

    for s in live:
        submit(s)
    try:
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            s = pending.pop(ref)
            got = _handed(ref, s, log)
            if got is None:  # its worker was lost
                infra += len(s.todo)
                s.actor = None
                continue
            if got.outcome is None:
                log(f"{got.placement} failed its device check ({got.problem}): excluded")
                parked.append(s.actor)
                s.actor = None
                if len(parked) >= conn.gpus:
                    raise RoundError(f"no usable GPU left: {len(parked)} failed their check")
                submit(s)
                continue
            if got.placement != s.placement:
                s.placement = got.placement
                pid = got.placement.pid
                log(f"shard {s.index}: {len(s.todo)} sessions on {got.placement}, worker pid {pid}")
            for note in got.notes:
                log(note)
            task = s.todo.popleft()
            infra += done(task, got.outcome, got.placement)
            stop_if_box_changed(got.outcome)
            if hook is not None:
                hook(s.index, task, got)
            submit(s)
    finally:
        for a in parked + [s.actor for s in live if s.actor is not None]:
            with contextlib.suppress(Exception):
                ray.kill(a)
    return infra
