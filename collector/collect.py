"""One round, end to end: manifest -> candidates -> interleaved sessions -> DuckDB -> verdicts.

Each finished task (one harness subprocess) is written with its raw samples in one
transaction, so a round killed at any point resumes where it stopped: finished sessions are
skipped, sessions that failed for infrastructure are tried again, and no row is duplicated.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import click

from collector import verdict as verdict_mod
from collector.candidates import (
    Candidate,
    GitError,
    Workspace,
    build_candidate,
    preflight,
)
from collector.commands import build_request
from collector.errors import RoundError
from collector.manifest import LoadedManifest, ManifestError, load_manifest
from collector.outcome import FINISHED, Outcome, judge, skipped
from collector.policy import ResolvedPolicy, load_policy, resolve
from collector.runner import Place, Run
from collector.sandbox import BoxGuard, describe, seal
from collector.schedule import Slot, Task, plan_confirmation, plan_shards
from collector.session import SessionKit, here, measure_session, stop_if_box_changed
from collector.store import Store, lookups, open_store, writer
from collector.store.writer import Placement


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _check_round(store: Store, loaded: LoadedManifest, main_commit: str) -> bool:
    """Whether the round is new; a stored round must be the same manifest at the same main."""
    m = loaded.manifest
    stored = lookups.round_manifest(store, m.round)
    if stored is None:
        return True
    old_commit, old_text = stored
    if old_commit != main_commit:
        raise RoundError(
            f"round {m.round} was measured at main {old_commit[:12]}, but {m.base_ref} is now "
            f"{main_commit[:12]}: give the new measurement a new round id"
        )
    if old_text != loaded.text:
        raise RoundError(
            f"round {m.round} exists with a different manifest; give a changed manifest a new round id"
        )
    return False


def collect(
    manifest_path: str | Path,
    db_path: str | Path,
    scratch: Path | None = None,
    log: Callable[[str], None] = lambda s: click.echo(s, err=True),
    progress: bool = True,
    cluster: str | None = None,
    gpus: int | None = None,
    hook: Callable | None = None,
    unsandboxed: bool = False,
) -> int:
    """Run (or resume) a round. Returns the number of sessions still failing for infrastructure.

    Every checkout's code runs sealed (collector/sandbox.py): a box that cannot make a sandbox
    is refused before anything runs, unless `unsandboxed` (the round's pages then say so).
    `cluster` ('local', 'auto' or 'ray://HOST:PORT'): cut the round into shards, one per GPU of
    a Ray cluster (collector/cluster.py; `gpus`: how many, declared on a local instance); this
    process stays the only writer of the database. `hook`: called after each session a shard's
    worker hands back (tests kill a worker from it)."""
    loaded = load_manifest(manifest_path)
    m = loaded.manifest
    policy = resolve(load_policy(loaded.policy_path), m.profile)
    db_path = Path(db_path).resolve()
    scratch = (scratch or db_path.parent / f".{db_path.name}.scratch").resolve() / m.round
    kind = seal(unsandboxed, scratch, gpu=policy.profile.backend != "numpy")
    store = open_store(db_path)
    try:
        try:
            ws = Workspace(loaded.repo, scratch)
        except GitError as e:
            raise ManifestError(f"manifest {loaded.path}: engine_repo: {e}") from None
        try:
            args = (store, ws, loaded, policy, scratch, db_path, kind, log, progress)
            if cluster is None:
                return _collect(*args)
            from collector import cluster as ray_cluster  # noqa: PLC0415 - Ray only when asked

            with ray_cluster.connect(cluster, gpus, log) as conn:
                return _collect(*args, conn, hook)
        finally:
            ws.cleanup()
    finally:
        store.close()


def _collect(
    store: Store,
    ws: Workspace,
    loaded: LoadedManifest,
    policy: ResolvedPolicy,
    scratch: Path,
    db_path: Path,
    sandbox: str,
    log: Callable[[str], None],
    progress: bool,
    conn: object | None = None,
    hook: Callable | None = None,
) -> int:
    m = loaded.manifest
    main_commit, tips = preflight(loaded, ws)  # every ref and patch checked: nothing measured yet
    new = _check_round(store, loaded, main_commit)
    writer.record_round(store, loaded, policy, main_commit, new, describe(sandbox))
    log(
        f"round {m.round}: main {main_commit[:12]} ({m.base_ref}), {len(m.pr)} PRs, profile "
        f"{m.profile}, PR code sealed by {describe(sandbox)}"
    )
    if sandbox == "none":
        log("  warning: --unsandboxed: every PR's code runs with the collector's own rights")
    main_checkout = ws.add_worktree("main", main_commit)
    by_pr = _candidates(store, ws, loaded, policy, main_commit, tips, log)
    measurable = [(p.number, list(p.targets)) for p in m.pr if by_pr[p.number].measurable]
    gpus = getattr(conn, "gpus", 1)
    plans = plan_shards(
        m.round, measurable, policy.profile, _shard_count(store, m.round, gpus, len(measurable))
    )

    def still_to_run(plans: list[list[Slot]]) -> list[list[Task]]:
        finished = lookups.finished_sessions(store, m.round, FINISHED)
        return [
            [t for s in plan for t in s.tasks if t.session_id not in finished] for plan in plans
        ]

    tasks = [t for plan in plans for s in plan for t in s.tasks]
    todo = still_to_run(plans)
    n_todo = sum(map(len, todo))
    if n_todo < len(tasks):
        log(f"resuming: {len(tasks) - n_todo} of {len(tasks)} sessions already finished")

    @functools.cache
    def kit_of(shard: int) -> SessionKit:
        """A shard's own main checkout and scratch: shards on one host run side by side. Its
        box guard watches the checkouts of its own PRs (in one process: every shard's)."""
        main = main_checkout if shard == 0 else ws.add_worktree(f"main-s{shard}", main_commit)
        work = scratch / ("work" if conn is None else f"work-s{shard}")
        mine = [t.pr for plan in (plans if conn is None else plans[shard : shard + 1])
                for s in plan for t in s.tasks if t.side == "pr"]  # fmt: skip
        checkouts = tuple(sorted({p for n in mine if (p := by_pr[n].checkout) is not None}))
        return SessionKit(
            ws.repo, main_commit, policy, Place(main, work, sandbox, work / "kernel-cache"),
            (db_path.parent,), checkouts,
        )  # fmt: skip

    def commit_of(task: Task) -> str:
        return main_commit if task.side == "main" else str(by_pr[task.pr].merged_commit)

    # Once a PR has failed for its own reasons, its later tasks in the round still run (each
    # session is evidence, and a verdict shows every failing axis), except after a failure in
    # policy.failures.stop_after (forged, diverged): then they are recorded as skipped.
    def skip(task: Task) -> Outcome | None:
        return skipped_outcome(store, m.round, task, policy.failures.stop_after)

    def run(todo: list[list[Task]], label: str) -> int:
        """Every task of `todo` (one list per shard); the sessions left failing for infrastructure."""
        n = sum(map(len, todo))
        bar_ctx = (
            click.progressbar(length=n, label=label, file=sys.stderr, item_show_func=str)
            if progress
            else contextlib.nullcontext(None)
        )
        with bar_ctx as bar:

            def done(task: Task, o: Run | Outcome, placement: Placement | None) -> int:
                failed = record(store, task, commit_of(task), o, policy, log, placement)
                if bar is not None:
                    bar.update(1, task.session_id.split("/", 1)[1])
                return failed

            if conn is None:
                return _run_here(
                    kit_of(0), [t for shard in todo for t in shard], by_pr, done, skip, log
                )
            from collector import cluster as ray_cluster  # noqa: PLC0415 - Ray only when asked

            return ray_cluster.run_shards(
                conn, todo, kit_of, _pr_checkout(by_pr), done, skip, log, hook
            )

    infra_left = run(todo, "measuring")
    if infra_left == 0:  # every planned session in: the verdicts that rest on speed, again
        confirm = _confirmation_plans(store, m.round, plans, measurable, policy)
        todo = still_to_run(confirm)
        if any(todo):
            prs = sorted({s.pr for plan in confirm for s in plan if s.side == "pr"})
            log(f"confirming PR {', '.join(f'#{n}' for n in prs)}: verdicts that rest on speed")
            infra_left = run(todo, "confirming")
    _finish(store, m.round, infra_left, log)
    return infra_left


def _candidates(
    store: Store,
    ws: Workspace,
    loaded: LoadedManifest,
    policy: ResolvedPolicy,
    main_commit: str,
    tips: dict,
    log: Callable[[str], None],
) -> dict[int, Candidate]:
    """Every PR merged onto main in its own worktree (or why not), recorded."""
    cands = []
    for p in loaded.manifest.pr:
        patch = loaded.patches.get(p.number)
        c = build_candidate(ws, p, main_commit, tips.get(p.number), patch, policy.harness.paths)
        cands.append(c)
        log(f"  PR #{p.number}: {c.status}" + (f" ({c.detail})" if c.detail else ""))
    writer.record_candidates(store, loaded.manifest.round, cands)
    return {c.pr: c for c in cands}


def _finish(store: Store, round_id: str, infra_left: int, log: Callable[[str], None]) -> None:
    """A round with nothing left to retry is finished; either way it is judged."""
    if infra_left == 0:
        writer.finish_round(store, round_id, *lookups.main_device(store, round_id))
    else:
        log(
            f"{infra_left} sessions failed for infrastructure: run the same command again to retry them"
        )
    for v in verdict_mod.decide_round(store, round_id):
        log(f"  #{v.pr}: {v.label}" + (" (merge-first)" if v.merge_first else ""))


def _confirmation_plans(
    store: Store,
    round_id: str,
    plans: list[list[Slot]],
    measurable: list[tuple[int, list[str]]],
    policy: ResolvedPolicy,
) -> list[list[Slot]]:
    """Each shard's confirmation sessions (schedule.plan_confirmation): its PRs whose verdict on
    its planned sessions rests on speed, each with the long-context checks it fell short on.
    Chosen again on a resume from the same planned sessions, so the same plan."""
    targets = dict(measurable)
    out = []
    for k, plan in enumerate(plans):
        mine = sorted({s.pr for s in plan if s.side == "pr"})
        chosen = verdict_mod.to_confirm(store, round_id, k, mine)
        shard = None if len(plans) <= 1 else k
        out.append(
            plan_confirmation(
                round_id, [(n, targets[n]) for n in chosen], policy.profile, shard, recheck=chosen
            )
        )
    return out


def _shard_count(store: Store, round_id: str, gpus: int, n_prs: int) -> int:
    """The shards a round is cut into: fixed when it starts (its session ids depend on them), so
    a resume on more, fewer or no GPUs of a cluster measures the same plan."""
    fixed = lookups.stored_shards(store, round_id)
    if fixed is not None:
        return fixed
    n = 1 if lookups.has_sessions(store, round_id) else max(1, min(gpus, n_prs))
    writer.set_round_shards(store, round_id, n)
    return n


def _pr_checkout(by_pr: dict[int, Candidate]) -> Callable[[Task], Path | None]:
    """A task's checkout: the PR's merge result, or None for main (each shard has its own)."""

    def of(task: Task) -> Path | None:
        if task.side == "main":
            return None
        cand = by_pr[task.pr]
        assert cand.checkout is not None and cand.merged_commit is not None
        return cand.checkout

    return of


def _run_here(
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


def round_summary(store: Store, round_id: str) -> str:
    return json.dumps(lookups.status_counts(store, round_id))
