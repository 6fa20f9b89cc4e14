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
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import click

from collector import verdict as verdict_mod
from collector import writer
from collector.candidates import (
    Candidate,
    GitError,
    Workspace,
    build_candidate,
    harness_drift,
    pin_harness,
    preflight,
)
from collector.errors import RoundError
from collector.forgery import clock_problem, diverged_evidence, main_regions
from collector.harness import Outcome, run_request
from collector.manifest import LoadedManifest, ManifestError, load_manifest
from collector.policy import ResolvedPolicy, load_policy, resolve
from collector.requests import build_request
from collector.sandbox import BoxGuard, kernel_cache_env
from collector.schedule import Slot, Task, plan_confirmation, plan_shards
from collector.stats import is_implausible, median
from collector.store import Store, open_store
from collector.writer import Placement, samples_of

TIMED = ("sweep", "guard", "concurrent", "longctx")  # the speed sessions: timed by main's harness

# Statuses that end a session for good; 'infra' sessions are tried again on the next run.
FINISHED = (
    "ok",
    "crash",
    "timeout",
    "malformed",
    "incomplete",
    "implausible",
    "forged",
    "diverged",
    "skipped",
)


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _implausible(
    store: Store, round_id: str, shard: int, model: str, samples: list, limit: float
) -> str | None:
    """A PR axis above `limit` x main's median so far is a broken measurement.

    Only when even the PR's slowest sample beats main's fastest by that factor (is_implausible):
    a loaded box can make single repetitions of either side wildly fast or slow.
    """
    by_axis: dict[str, list[float]] = {}
    for ax, _rep, v in samples:
        by_axis.setdefault(ax, []).append(v)
    for ax, vals in sorted(by_axis.items()):
        main_vals = [
            r[0]
            for r in store.query(
                "SELECT s.value FROM samples s JOIN sessions x USING (session_id) "
                "WHERE s.round_id = ? AND x.shard = ? AND s.side = 'main' AND s.model = ? "
                "AND s.axis = ? AND x.status = 'ok'",
                [round_id, shard, model, ax],
            )
        ]
        if main_vals and is_implausible(main_vals, vals, limit):
            ratio = median(vals) / median(main_vals)
            return f"{ax} claims {ratio:.0f}x main ({median(vals):.4g} vs {median(main_vals):.4g} tok/s)"
    return None


def _main_regions(store: Store, round_id: str, shard: int) -> dict[str, list[tuple[float, float]]]:
    """Main's timed regions so far in this round on this GPU, by group: the box's own gaps
    between the parent's clock and the engine's (a PR session always has main's before it)."""
    docs = store.query(
        "SELECT document FROM sessions WHERE round_id = ? AND shard = ? AND side = 'main' "
        "AND status = 'ok' AND list_contains(?, kind) AND document IS NOT NULL ORDER BY slot",
        [round_id, shard, list(TIMED)],
    )
    return main_regions(d for (d,) in docs)


def _check_round(store: Store, loaded: LoadedManifest, main_commit: str) -> bool:
    """Whether the round is new; a stored round must be the same manifest at the same main."""
    m = loaded.manifest
    row = store.query("SELECT main_commit, manifest_toml FROM rounds WHERE round_id = ?", [m.round])
    if not row:
        return True
    old_commit, old_text = row[0]
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


def run_task(
    task: Task,
    checkout: Path,
    work: Path,
    policy: ResolvedPolicy,
    disk_paths: list[Path],
    main_checkout: Path | None = None,
    kernel_caches: Path | None = None,
) -> Outcome:
    """Run a task; infrastructure failures (and any failure of main) are retried. Speed tasks
    are timed from `main_checkout` (main's pinned harness) measuring the engine of `checkout`.
    `kernel_caches`: the folder of every side's compiled-kernel cache (sandbox.kernel_cache)."""
    f = policy.failures
    req = build_request(task, policy)
    env = kernel_cache_env(kernel_caches, task, req.timed) if kernel_caches else None
    attempts = 0
    while True:
        attempts += 1
        o = run_request(
            req,
            checkout,
            work,
            f.infra_patterns,
            f.min_free_disk_mb,
            f.max_document_mb,
            disk_paths,
            harness_checkout=main_checkout,
            env=env,
        )
        o.attempts = attempts
        retry = o.status == "infra" or (task.side == "main" and not o.ok)
        if not retry or attempts > f.infra_retries:
            return o
        time.sleep(f.retry_wait_s)


def collect(
    manifest_path: str | Path,
    db_path: str | Path,
    scratch: Path | None = None,
    log: Callable[[str], None] = lambda s: click.echo(s, err=True),
    progress: bool = True,
    cluster: str | None = None,
    gpus: int | None = None,
    hook: Callable | None = None,
) -> int:
    """Run (or resume) a round. Returns the number of sessions still failing for infrastructure.

    `cluster` ('local', 'auto' or 'ray://HOST:PORT'): cut the round into shards, one per GPU of
    a Ray cluster (collector/cluster.py; `gpus`: how many, declared on a local instance); this
    process stays the only writer of the database. `hook`: called after each session a shard's
    worker hands back (tests kill a worker from it)."""
    loaded = load_manifest(manifest_path)
    m = loaded.manifest
    policy = resolve(load_policy(loaded.policy_path), m.profile)
    db_path = Path(db_path).resolve()
    scratch = (scratch or db_path.parent / f".{db_path.name}.scratch").resolve() / m.round
    store = open_store(db_path)
    try:
        try:
            ws = Workspace(loaded.repo, scratch)
        except GitError as e:
            raise ManifestError(f"manifest {loaded.path}: engine_repo: {e}") from None
        try:
            if cluster is None:
                return _collect(store, ws, loaded, policy, scratch, db_path, log, progress)
            from collector import cluster as ray_cluster  # noqa: PLC0415 - Ray only when asked

            with ray_cluster.connect(cluster, gpus, log) as conn:
                return _collect(
                    store, ws, loaded, policy, scratch, db_path, log, progress, conn, hook
                )
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
    log: Callable[[str], None],
    progress: bool,
    conn: object | None = None,
    hook: Callable | None = None,
) -> int:
    m = loaded.manifest
    main_commit, tips = preflight(loaded, ws)  # every ref and patch checked: nothing measured yet
    writer.record_round(
        store, loaded, policy, main_commit, new=_check_round(store, loaded, main_commit)
    )
    log(
        f"round {m.round}: main {main_commit[:12]} ({m.base_ref}), {len(m.pr)} PRs, profile {m.profile}"
    )
    main_checkout = ws.add_worktree("main", main_commit)
    by_pr = _candidates(store, ws, loaded, policy, main_commit, tips, log)
    measurable = [(p.number, list(p.targets)) for p in m.pr if by_pr[p.number].measurable]
    gpus = getattr(conn, "gpus", 1)
    plans = plan_shards(
        m.round, measurable, policy.profile, _shard_count(store, m.round, gpus, len(measurable))
    )

    def still_to_run(plans: list[list[Slot]]) -> list[list[Task]]:
        finished = {
            r[0]
            for r in store.query(
                f"SELECT session_id FROM sessions WHERE round_id = ? AND fault <> 'infra' "
                f"AND status IN ({','.join('?' * len(FINISHED))})",
                [m.round, *FINISHED],
            )
        }
        return [
            [t for s in plan for t in s.tasks if t.session_id not in finished] for plan in plans
        ]

    tasks = [t for plan in plans for s in plan for t in s.tasks]
    todo = still_to_run(plans)
    n_todo = sum(map(len, todo))
    if n_todo < len(tasks):
        log(f"resuming: {len(tasks) - n_todo} of {len(tasks)} sessions already finished")

    @functools.cache
    def bench(shard: int) -> Bench:
        """A shard's own main checkout and scratch: shards on one host run side by side. Its
        box guard watches the checkouts of its own PRs (in one process: every shard's)."""
        main = main_checkout if shard == 0 else ws.add_worktree(f"main-s{shard}", main_commit)
        work = scratch / ("work" if conn is None else f"work-s{shard}")
        mine = [t.pr for plan in (plans if conn is None else plans[shard : shard + 1])
                for s in plan for t in s.tasks if t.side == "pr"]  # fmt: skip
        checkouts = tuple(sorted({p for n in mine if (p := by_pr[n].checkout) is not None}))
        return Bench(
            ws.repo, main, main_commit, policy, work, (db_path.parent,), checkouts,
            kernel_caches=work / "kernel-cache",
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

            def done(task: Task, o: Outcome, placement: Placement | None) -> int:
                failed = record(store, task, commit_of(task), o, policy, log, placement)
                if bar is not None:
                    bar.update(1, task.session_id.split("/", 1)[1])
                return failed

            if conn is None:
                return _run_here(
                    bench(0), [t for shard in todo for t in shard], by_pr, done, skip, log
                )
            from collector import cluster as ray_cluster  # noqa: PLC0415 - Ray only when asked

            return ray_cluster.run_shards(
                conn, todo, bench, _pr_checkout(by_pr), done, skip, log, hook
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
        dev = store.query(
            "SELECT device_name, driver FROM sessions WHERE round_id = ? AND side = 'main' "
            "AND status = 'ok' ORDER BY slot LIMIT 1",
            [round_id],
        )
        writer.finish_round(store, round_id, *(dev[0] if dev else (None, None)))
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
    row = store.query("SELECT shards FROM rounds WHERE round_id = ?", [round_id])
    if row and row[0][0] is not None:
        return int(row[0][0])
    started = store.query("SELECT 1 FROM sessions WHERE round_id = ? LIMIT 1", [round_id])
    n = 1 if started else max(1, min(gpus, n_prs))
    with store.transaction() as con:
        con.execute("UPDATE rounds SET shards = ? WHERE round_id = ?", [n, round_id])
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
    bench: Bench,
    todo: list[Task],
    by_pr: dict[int, Candidate],
    done: Callable[[Task, Outcome, Placement | None], int],
    skip: Callable[[Task], Outcome | None],
    log: Callable[[str], None],
) -> int:
    """Every session in this process, one after another (a sharded round's shards in turn)."""
    from collector.cluster import here  # noqa: PLC0415 - nvidia-smi's answer, no Ray

    guard = BoxGuard(bench.main_checkout, log, bench.pr_checkouts, bench.kernel_caches)
    placement = here()
    checkout = _pr_checkout(by_pr)
    infra = 0
    for t in todo:
        o = skip(t) or measure(bench, guard, t, checkout(t))
        infra += done(t, o, placement)
        stop_if_box_changed(o)
    return infra


def stop_if_box_changed(o: Outcome) -> None:
    """A session that changed files every later process trusts stops the round (it is
    recorded, `forged`, first: the round resumes after it once the box is restored)."""
    if o.extra.get("stop_round"):
        raise RoundError(o.extra["stop_round"])


def skipped_outcome(
    store: Store, round_id: str, task: Task, stop_after: list[str]
) -> Outcome | None:
    """A PR task not to run, because an earlier session of the PR in this round ended in one of
    `stop_after` (say which); None: run it. Main's tasks always run (they serve every PR)."""
    if task.side != "pr" or not stop_after:
        return None
    rows = store.query(
        "SELECT kind, model, status FROM sessions WHERE round_id = ? AND side = 'pr' AND pr = ? "
        "AND list_contains(?, status) ORDER BY slot, started_at LIMIT 1",
        [slot_round(task), task.pr, list(stop_after)],
    )
    if not rows:
        return None
    kind, model, status = rows[0]
    detail = (
        f"not run: the PR's {kind} session of {model} was {status} (a REJECT at once), so its "
        "later sessions of the round are skipped"
    )
    return Outcome("skipped", detail, None, now(), 0.0, "")


@dataclass(frozen=True)
class Bench:
    """What one GPU's sessions need; picklable, so a shard's worker gets its own."""

    repo: Path
    main_checkout: Path
    main_commit: str
    policy: ResolvedPolicy
    work: Path
    disk_paths: tuple[Path, ...]
    pr_checkouts: tuple[Path, ...] = ()  # what its PR sessions must leave alone but their own
    kernel_caches: Path | None = None  # every side's compiled-kernel cache (sandbox.kernel_cache)


def measure(bench: Bench, guard: BoxGuard, task: Task, checkout: Path | None) -> Outcome:
    """One session where its GPU is, and what only that box can judge: what the session changed
    outside its checkout, and whether its numbers are its own honest work. `checkout` None: main."""
    checkout = checkout or bench.main_checkout
    if task.side == "pr":  # its own earlier process may have rewritten them on disk
        pin_harness(checkout, bench.repo, bench.main_commit, bench.policy.harness.paths)
    guard.before_session()
    o = run_task(
        task, checkout, bench.work, bench.policy, list(bench.disk_paths), bench.main_checkout,
        bench.kernel_caches,
    )  # fmt: skip
    tampered = guard.after_session(task, checkout)
    if task.side == "pr" and not tampered:
        paths = bench.policy.harness.paths
        drift = harness_drift(checkout, bench.repo, bench.main_commit, paths)
        if drift:  # put back before its next session by pin_harness
            tampered = "rewrote the pinned harness in its checkout: " + ", ".join(drift[:5])
    if guard.stop_round:  # the session is recorded first, then the round stops
        o.extra["stop_round"], guard.stop_round = guard.stop_round, None
    if tampered and task.side == "pr":
        o.status, o.detail = "forged", tampered
    elif o.status == "ok" and task.kind in TIMED:
        outputs = diverged_evidence(o.document, task.model, bench.policy)
        if outputs:
            o.status, o.detail = "diverged", outputs
    return o


def record(
    store: Store,
    task: Task,
    commit: str,
    o: Outcome,
    policy: ResolvedPolicy,
    log: Callable[[str], None],
    placement: Placement | None = None,
) -> int:
    """What needs the round's evidence (a PR's clock against main's, a gain beyond main's range,
    main failing the same way: main of the task's own shard), then the session written; 1 when
    it failed for infrastructure."""
    round_id = slot_round(task)
    if o.status == "skipped":
        writer.write_session(store, round_id, task, commit, o, placement=placement)
        return 0
    if task.side == "pr" and task.kind in TIMED and o.status in ("ok", "diverged"):
        clock = clock_problem(
            o.document, policy.forgery, _main_regions(store, round_id, task.shard)
        )
        if clock:
            o.status, o.detail = "forged", clock
    if task.side == "pr" and o.status == "ok" and task.kind in ("sweep", "guard", "concurrent"):
        why = _implausible(
            store,
            round_id,
            task.shard,
            task.model,
            samples_of(o.document),
            policy.verdict.implausible_gain,
        )
        if why:
            o.status, o.detail = "implausible", why
    main_fails_too = False
    if task.side == "pr" and not o.ok and o.status != "implausible":
        main_fails_too = bool(
            store.query(
                "SELECT 1 FROM sessions WHERE round_id = ? AND shard = ? AND side = 'main' "
                "AND list_contains(?, kind) AND model = ? AND status <> 'ok'",
                [
                    round_id,
                    task.shard,
                    ["sweep", "guard"] if task.kind in ("sweep", "guard") else [task.kind],
                    task.model,
                ],
            )
        )
        if main_fails_too:
            o.detail += " (main fails the same way in this round)"
    writer.write_session(store, round_id, task, commit, o, main_fails_too, placement)
    if not o.ok:
        who = "main" if task.side == "main" else f"PR #{task.pr}"
        log(f"  {who} {task.kind} {task.model}: {o.status}: {o.detail}")
    return (
        1 if (o.status == "infra" or (not o.ok and (task.side == "main" or main_fails_too))) else 0
    )


def slot_round(task: Task) -> str:
    return task.session_id.split("/", 1)[0]


def round_summary(store: Store, round_id: str) -> str:
    rows = store.query(
        "SELECT status, count(*) FROM sessions WHERE round_id = ? GROUP BY status ORDER BY status",
        [round_id],
    )
    return json.dumps(dict(rows))
