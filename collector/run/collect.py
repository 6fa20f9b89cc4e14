"""One round, end to end: manifest -> candidates -> interleaved sessions -> DuckDB -> verdicts.

Each finished task (one harness subprocess) is written with its raw samples in one
transaction, so a round killed at any point resumes where it stopped: finished sessions are
skipped, sessions that failed for infrastructure are tried again, and no row is duplicated.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from collector.errors import RoundError
from collector.judge import verdict as verdict_mod
from collector.manifest import LoadedManifest, ManifestError, load_manifest
from collector.policy import ResolvedPolicy, load_policy, resolve
from collector.run.build import Recipe, build_round
from collector.run.candidates import (
    Candidate,
    GitError,
    Workspace,
    build_candidate,
    preflight,
)
from collector.run.round_run import RoundRun
from collector.run.sandbox import describe, seal
from collector.schedule import Slot, plan_confirmation, plan_shards
from collector.store import Store, lookups, open_store, writer
from engine.harness.sandbox import Sandbox

# the collector's own checkout, whose harness times a built engine's servers
HARNESS_CHECKOUT = Path(__file__).resolve().parents[2]


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

    Every checkout's code runs sealed (collector/run/sandbox.py): a box that cannot make a sandbox
    is refused before anything runs, unless `unsandboxed` (the round's pages then say so).
    `cluster` ('local', 'auto' or 'ray://HOST:PORT'): cut the round into shards, one per GPU of
    a Ray cluster (collector/run/cluster.py; `gpus`: how many, declared on a local instance); this
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
            from collector.run import cluster as ray_cluster  # noqa: PLC0415 - Ray only when asked

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
    harness = None
    build = policy.profile.build
    if build is not None:  # a built engine: its builds are what the sessions measure
        recipe = Recipe.of(build)
        main_checkout = build_round(
            main_checkout, list(by_pr.values()), scratch / "builds", compiler_cache(db_path),
            recipe, Sandbox(sandbox), build.timeout_s, policy.failures.min_free_disk_mb, log,
        )  # fmt: skip
        writer.record_candidates(store, m.round, list(by_pr.values()))
        harness = HARNESS_CHECKOUT  # its checkouts hold no harness: the collector's own times them
    measurable = [(p.number, list(p.targets)) for p in m.pr if by_pr[p.number].measurable]
    gpus = getattr(conn, "gpus", 1)
    plans = plan_shards(
        m.round, measurable, policy.profile, _shard_count(store, m.round, gpus, len(measurable))
    )
    r = RoundRun(
        store, ws, m.round, policy, main_commit, main_checkout, scratch, sandbox, db_path, by_pr,
        plans, log, harness,
    )  # fmt: skip
    todo = r.still_to_run(plans)
    n_tasks, n_todo = sum(len(s.tasks) for plan in plans for s in plan), sum(map(len, todo))
    if n_todo < n_tasks:
        log(f"resuming: {n_tasks - n_todo} of {n_tasks} sessions already finished")
    infra_left = r.run(todo, "measuring", progress, conn, hook)
    if infra_left == 0:  # every planned session in: the verdicts that rest on speed, again
        confirm = _confirmation_plans(store, m.round, plans, measurable, policy)
        todo = r.still_to_run(confirm)
        if any(todo):
            prs = sorted({s.pr for plan in confirm for s in plan if s.side == "pr"})
            log(
                f"confirming PR {', '.join(f'#{n}' for n in prs)}: verdicts that rest on speed "
                "or that it left open"
            )
            infra_left = r.run(todo, "confirming", progress, conn, hook)
    _finish(store, m.round, infra_left, log)
    return infra_left


def compiler_cache(db_path: Path) -> Path:
    """Main's compiler cache for a built engine, beside the database and kept from round to round
    (the round's scratch goes when it ends): only main's builds write it."""
    return db_path.parent / f".{db_path.name}.ccache"


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
        writer.finish_round(store, round_id, *lookups.round_device(store, round_id))
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
    its planned sessions rests on speed or was left open on it, each with the long-context checks it fell short on.
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
