"""One session where its GPU is: the harness run (the box's failures tried again), what the
session changed on the box outside its own folders, and where this process runs. Used by the
round loop in this process (collect.py) and by each shard's worker on a Ray cluster
(cluster.py); judged and written by round_run.record."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from collector.errors import RoundError
from collector.policy import ResolvedPolicy
from collector.run.candidates import harness_drift, pin_harness
from collector.run.commands import build_request
from collector.run.outcome import Outcome, judge
from collector.run.runner import Place, Run, run_request
from collector.run.sandbox import BoxGuard
from collector.schedule import Task
from collector.store.writer import Placement


@dataclass(frozen=True)
class SessionKit:
    """What one GPU's sessions need; picklable, so a shard's worker gets its own."""

    repo: Path
    main_commit: str
    policy: ResolvedPolicy
    place: Place  # main's checkout, the work folder, the sandbox, the kernel caches
    disk_paths: tuple[Path, ...]
    pr_checkouts: tuple[Path, ...] = ()  # what its PR sessions must leave alone but their own


def measure_session(kit: SessionKit, guard: BoxGuard, task: Task, checkout: Path | None) -> Run:
    """One session where its GPU is, and what only that box can find: what the session changed
    outside its own folders. `checkout` None: main. Judged by `record` (outcome.judge)."""
    checkout = checkout or kit.place.main_checkout
    # a PR's checkout holds a copy of main's harness (a served engine's build holds none)
    pinned = task.side == "pr" and kit.place.harness is None
    if pinned:  # its own earlier process may have rewritten them on disk
        pin_harness(checkout, kit.repo, kit.main_commit, kit.policy.harness.paths)
    guard.before_session()
    run = run_task(task, checkout, kit.place, kit.policy, list(kit.disk_paths))
    run.box = guard.after_session(task, checkout)
    if pinned and not run.box:
        paths = kit.policy.harness.paths
        drift = harness_drift(checkout, kit.repo, kit.main_commit, paths)
        if drift:  # put back before its next session by pin_harness
            run.box = "rewrote the pinned harness in its checkout: " + ", ".join(drift[:5])
    run.stop_round, guard.stop_round = guard.stop_round, None
    return run


def run_task(
    task: Task, checkout: Path, place: Place, policy: ResolvedPolicy, disk_paths: list[Path]
) -> Run:
    """Run a task; a session whose outcome is the box's (outcome.judge: fault 'infra', any
    failure of main among them) is run again, up to `infra_retries` times, each wait twice the
    last (a box in a slow phase, or between phases, settles; its canary moved). Speed tasks are timed
    from main's checkout (main's pinned harness), measuring the engine of `checkout` beside
    main's."""
    f = policy.failures
    req = build_request(task, policy)
    attempts = 0
    while True:
        attempts += 1
        run = run_request(
            req, checkout, place, f.min_free_disk_mb, f.max_document_mb, disk_paths,
            task.side, task.pr,
        )  # fmt: skip
        run.attempts = attempts
        if judge(task, req, run, policy).fault != "infra" or attempts > f.infra_retries:
            return run
        time.sleep(f.retry_wait_s * 2 ** (attempts - 1))


def stop_if_box_changed(o: Run | Outcome) -> None:
    """A session that changed files every later process trusts stops the round (it is
    recorded, `forged`, first: the round resumes after it once the box is restored)."""
    run = o.run if isinstance(o, Outcome) else o
    if run.stop_round:
        raise RoundError(run.stop_round)


def _nvidia_uuids() -> dict[int, str]:
    """GPU index -> UUID from nvidia-smi; empty where there is none (a CPU box)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    rows = [ln.split(",") for ln in out.splitlines() if "," in ln]
    return {int(i): u.strip() for i, u in rows if i.strip().isdigit()}


def here() -> Placement:
    """This process's GPU: the first of CUDA_VISIBLE_DEVICES (an index or a UUID), or device 0
    where nvidia-smi lists GPUs and nothing narrows them; the host."""
    uuids = _nvidia_uuids()
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    index: int | None = None
    if first.isdigit():
        index = int(first)
    elif first.startswith("GPU-"):
        index = next((i for i, u in uuids.items() if u == first), None)
    elif not first and uuids:
        index = min(uuids)
    uuid = uuids.get(index) if index is not None else (first or None)
    return Placement(socket.gethostname(), index, uuid, os.getpid())
