"""A round's sessions being measured and recorded: each shard's tasks not yet finished, run here
one after another or on a Ray cluster (cluster.py), each judged (outcome.judge) and written with
its samples in one transaction as it finishes (`record`); a PR stopped by a failure in
policy.failures.stop_after has its later tasks recorded as skipped. collect.py plans the round
and calls `RoundRun.run`."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click

from collector.policy import ResolvedPolicy
from collector.results import Candidate
from collector.run.candidates import Workspace
from collector.run.commands import build_request
from collector.run.outcome import FINISHED, Outcome, judge, skipped
from collector.run.runner import Place, Run
from collector.run.sandbox import BoxGuard
from collector.run.session import SessionKit, here, measure_session, stop_if_box_changed
from collector.schedule import Slot, Task
from collector.store import Store, lookups, writer
from collector.store.writer import Placement


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass
class RoundRun:
    """A round's sessions being measured: what every session of it needs (main's checkout and
    commit, each PR's candidate, the shards' plans) and how a finished one is recorded."""

    store: Store
    ws: Workspace
    round_id: str
    policy: ResolvedPolicy
    main_commit: str
    main_checkout: Path
    scratch: Path  # this round's: each shard's work folder and kernel caches go in it
    sandbox: str
    db_path: Path
    by_pr: dict[int, Candidate]
    plans: list[list[Slot]]
    log: Callable[[str], None]
    # the timing parent's checkout where main's is a build (a served engine), else None: main's
    harness: Path | None = None
    kits: dict[tuple[int, bool], SessionKit] = field(default_factory=dict)

    def still_to_run(self, plans: list[list[Slot]]) -> list[list[Task]]:
        """Each shard's tasks not yet finished (a resumed round skips what it has)."""
        finished = lookups.finished_sessions(self.store, self.round_id, FINISHED)
        return [
            [t for s in plan for t in s.tasks if t.session_id not in finished] for plan in plans
        ]

    def kit_of(self, shard: int, sharded: bool) -> SessionKit:
        """A shard's own main checkout and scratch: shards on one host run side by side. Its
        box guard watches the checkouts of its own PRs (in one process: every shard's)."""
        if (shard, sharded) not in self.kits:
            main = (
                self.main_checkout
                if shard == 0 or self.harness is not None  # a build is only read: shared
                else self.ws.add_worktree(f"main-s{shard}", self.main_commit)
            )
            work = self.scratch / (f"work-s{shard}" if sharded else "work")
            plans = self.plans[shard : shard + 1] if sharded else self.plans
            mine = {t.pr for plan in plans for s in plan for t in s.tasks if t.side == "pr"}
            checkouts = tuple(sorted({c for n in mine if (c := self.by_pr[n].checkout)}))
            caches = None if self.harness is not None else work / "kernel-cache"
            place = Place(main, work, self.sandbox, caches, self.harness)
            self.kits[shard, sharded] = SessionKit(
                self.ws.repo, self.main_commit, self.policy, place, (self.db_path.parent,),
                checkouts,
            )  # fmt: skip
        return self.kits[shard, sharded]

    def commit_of(self, task: Task) -> str:
        return self.main_commit if task.side == "main" else str(self.by_pr[task.pr].merged_commit)

    def skip(self, task: Task) -> Outcome | None:
        """Once a PR has failed for its own reasons its later tasks still run (each session is
        evidence, and a verdict shows every failing axis), except after a failure in
        policy.failures.stop_after (forged, diverged): then they are recorded as skipped."""
        return skipped_outcome(self.store, self.round_id, task, self.policy.failures.stop_after)

    def run(
        self,
        todo: list[list[Task]],
        label: str,
        progress: bool,
        conn: object | None,
        hook: Callable | None,
    ) -> int:
        """Every task of `todo` (one list per shard), here or on a Ray cluster (`conn`); the
        sessions left failing for infrastructure."""
        n = sum(map(len, todo))
        bar_ctx = (
            click.progressbar(length=n, label=label, file=sys.stderr, item_show_func=str)
            if progress
            else contextlib.nullcontext(None)
        )
        with bar_ctx as bar:

            def done(task: Task, o: Run | Outcome, placement: Placement | None) -> int:
                failed = record(
                    self.store, task, self.commit_of(task), o, self.policy, self.log, placement
                )
                if bar is not None:
                    bar.update(1, task.session_id.split("/", 1)[1])
                return failed

            if conn is None:
                tasks = [t for shard in todo for t in shard]
                return run_here(self.kit_of(0, False), tasks, self.by_pr, done, self.skip, self.log)
            from collector.run import cluster as ray_cluster  # noqa: PLC0415 - Ray only when asked

            return ray_cluster.run_shards(
                conn,
                todo,
                lambda shard: self.kit_of(shard, True),
                _pr_checkout(self.by_pr),
                done,
                self.skip,
                self.log,
                hook,
            )


def _pr_checkout(by_pr: dict[int, Candidate]) -> Callable[[Task], Path | None]:
    """A task's checkout: the PR's merge result, or None for main (each shard has its own)."""

    def of(task: Task) -> Path | None:
        if task.side == "main":
            return None
        cand = by_pr[task.pr]
        assert cand.checkout is not None and cand.merged_commit is not None
        return cand.checkout

    return of


def run_here(
    kit: SessionKit,
    todo: list[Task],
    by_pr: dict[int, Candidate],
    done: Callable[[Task, Run | Outcome, Placement | None], int],
    skip: Callable[[Task], Outcome | None],
    log: Callable[[str], None],
) -> int:
    """Every session in this process, one after another (a sharded round's shards in turn)."""
    guard = BoxGuard(kit.place, log, kit.pr_checkouts)
    placement = here()
    checkout = _pr_checkout(by_pr)
    infra = 0
    for t in todo:
        o = skip(t) or measure_session(kit, guard, t, checkout(t))
        infra += done(t, o, placement)
        stop_if_box_changed(o)
    return infra


def skipped_outcome(
    store: Store, round_id: str, task: Task, stop_after: list[str]
) -> Outcome | None:
    """A PR task not to run, because an earlier session of the PR in this round ended in one of
    `stop_after` (say which); None: run it. Main's tasks always run (they serve every PR)."""
    if task.side != "pr" or not stop_after:
        return None
    stop = lookups.first_stop(store, slot_round(task), task.pr, list(stop_after))
    if stop is None:
        return None
    kind, model, status = stop
    detail = (
        f"not run: the PR's {kind} session of {model} was {status} (a REJECT at once), so its "
        "later sessions of the round are skipped"
    )
    return skipped(now(), detail)


def record(
    store: Store,
    task: Task,
    commit: str,
    o: Run | Outcome,
    policy: ResolvedPolicy,
    log: Callable[[str], None],
    placement: Placement | None = None,
) -> int:
    """A session judged (outcome.judge; main failing the same way in the round, main of the
    task's own shard, is looked up here) and written; 1 when it failed for infrastructure."""
    round_id = slot_round(task)
    if isinstance(o, Outcome):  # skipped: judged already
        writer.write_session(store, round_id, task, commit, o, placement=placement)
        return 0
    main_failed = task.side == "pr" and lookups.main_failed(
        store, round_id, task.shard, task.kind, task.model
    )
    outcome = judge(task, build_request(task, policy), o, policy, main_failed)
    writer.write_session(store, round_id, task, commit, outcome, placement)
    if not outcome.ok:
        who = "main" if task.side == "main" else f"PR #{task.pr}"
        log(f"  {who} {task.kind} {task.model}: {outcome.status}: {outcome.detail}")
    return 1 if outcome.fault == "infra" else 0


def slot_round(task: Task) -> str:
    return task.session_id.split("/", 1)[0]
