"""One round, end to end: manifest -> candidates -> interleaved sessions -> DuckDB -> verdicts.

Each finished task (one harness subprocess) is written with its raw samples in one
transaction, so a round killed at any point resumes where it stopped: finished sessions are
skipped, sessions that failed for infrastructure are tried again, and no row is duplicated.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import click

from collector import sandbox
from collector import verdict as verdict_mod
from collector.axes import axis
from collector.candidates import (
    Candidate,
    GitError,
    Workspace,
    build_candidate,
    pin_harness,
    preflight,
)
from collector.forgery import output_problem, timing_problem
from collector.harness import Outcome, Request, run_request
from collector.manifest import LoadedManifest, ManifestError, load_manifest
from collector.policy import ResolvedPolicy, load_policy, resolve
from collector.schedule import Task, plan_shards
from collector.stats import is_implausible, median
from collector.store import Store, open_store
from engine.harness.protocol import (
    ConcurrentResult,
    LongContextResult,
    PrefillCheckResult,
    ScoreResult,
    SweepResult,
)

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
)


class RoundError(Exception):
    """A round that cannot start or continue, described in one line."""


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def build_request(task: Task, policy: ResolvedPolicy) -> Request:
    prof = policy.profile
    h = policy.harness
    t = prof.timeouts
    common = ["--model", task.model, "--backend", prof.backend]
    warmup = [] if prof.warmup is None else ["--warmup", str(prof.warmup)]
    if task.kind in ("sweep", "guard"):
        ctxs = (
            prof.contexts_for(task.model)
            if task.kind == "sweep"
            else (prof.guard_ctx_for(task.model),)
        )
        argv = [
            *h.bench,
            "sweep",
            *common,
            "--ctx",
            ",".join(map(str, ctxs)),
            "--tokens",
            str(prof.tokens),
            "--reps",
            str(prof.reps),
            *warmup,
        ]
        return Request(
            "sweep",
            task.model,
            argv,
            t[task.kind],
            contexts=ctxs,
            reps=prof.reps,
            backend=prof.backend,
            env=tuple(sorted(prof.env.items())),
            timed=True,
        )
    if task.kind == "concurrent":
        argv = [
            *h.bench,
            "concurrent",
            *common,
            "--widths",
            ",".join(map(str, prof.widths)),
            "--tokens",
            str(prof.concurrent_tokens),
            "--runs",
            str(prof.concurrent_runs),
            "--prompt-len",
            str(prof.prompt_len),
        ]
        return Request(
            "concurrent",
            task.model,
            argv,
            t["concurrent"],
            widths=tuple(prof.widths),
            runs=prof.concurrent_runs,
            backend=prof.backend,
            env=tuple(sorted(prof.env.items())),
            timed=True,
        )
    if task.kind == "score":
        argv = [
            *h.score,
            "score",
            *common,
            "--text-file",
            prof.score_text,
            "--topk",
            str(policy.accuracy.topk),
        ]
        return Request(
            "score",
            task.model,
            argv,
            t["score"],
            backend=prof.backend,
            env=tuple(sorted(prof.env.items())),
        )
    if task.kind == "longctx":
        budget = prof.memory_budget_mib[task.model] * 2**20
        argv = [*h.bench, "longctx", *common, "--ctx", str(prof.long_context[task.model])]
        argv += ["--tokens", "4", "--memory-budget", str(budget)]
        return Request(
            "longctx",
            task.model,
            argv,
            t["longctx"],
            backend=prof.backend,
            env=tuple(sorted(prof.env.items())),
            timed=True,
        )
    if task.kind == "prefill-check":
        argv = [
            *h.score,
            "prefill-check",
            *common,
            "--prefix",
            ",".join(map(str, prof.prefill_prefixes)),
            "--positions",
            str(prof.prefill_positions),
        ]
        return Request(
            "prefill-check",
            task.model,
            argv,
            t["prefill-check"],
            prefixes=tuple(prof.prefill_prefixes),
            backend=prof.backend,
            env=tuple(sorted(prof.env.items())),
        )
    raise ValueError(f"unknown task kind {task.kind!r}")


def samples_of(doc: object) -> list[tuple[str, int, float]]:
    """(axis, rep, tok/s) of every raw measurement in a document."""
    out: list[tuple[str, int, float]] = []
    if isinstance(doc, SweepResult):
        for c in doc.contexts:
            out += [(axis("decode", c.ctx), i, v) for i, v in enumerate(c.decode_tok_s)]
            out += [(axis("prefill", c.ctx), i, v) for i, v in enumerate(c.prefill_tok_s)]
            # memory, read from outside the engine process: one value per session
            if c.host_peak:
                out.append((axis("mem-peak", c.ctx), 0, float(c.host_peak)))
            if c.gpu_peak:
                out.append((axis("vram-peak", c.ctx), 0, float(c.gpu_peak)))
        mem = doc.measured.memory
        if mem is not None and mem.host_after_load:
            out.append(("mem-load", 0, float(mem.host_after_load)))
        if mem is not None and mem.gpu_after_load:
            out.append(("vram-load", 0, float(mem.gpu_after_load)))
    elif isinstance(doc, ConcurrentResult):
        for w in doc.widths:
            complete = [r for r in w.runs if r.complete]
            out += [(axis("concurrent", w.width), i, r.tok_s) for i, r in enumerate(complete)]
    return out


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


@dataclass(frozen=True)
class Placement:
    """Where a session ran: the GPU (as CUDA_VISIBLE_DEVICES names it, its UUID where nvidia-smi
    gives one) and the host; collector/cluster.py finds it."""

    host: str
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pid: int = 0  # the process that ran the session (a shard's worker)

    def __str__(self) -> str:
        gpu = "no GPU" if self.gpu_index is None else f"GPU {self.gpu_index}"
        return f"{self.host} {gpu}" + (f" ({self.gpu_uuid})" if self.gpu_uuid else "")


def write_session(
    store: Store,
    round_id: str,
    task: Task,
    commit: str,
    o: Outcome,
    main_fails_too: bool = False,
    placement: Placement | None = None,
) -> None:
    """The session row, its raw samples, and its score dump or prefill checks: one transaction."""
    doc = o.document
    device = driver = None
    vram_free = vram_peak = kv = None
    doc_json = None
    seed = None
    if doc is not None:
        measured = getattr(doc, "measured", None)
        seed = measured.seed if measured is not None else None
        device, driver = doc.device.name, doc.device.driver
        vram = getattr(doc, "vram", None)
        if isinstance(doc, SweepResult):
            vram = next((c.vram for c in doc.contexts if c.vram is not None), None)
        if vram is not None:
            vram_free, vram_peak, kv = (
                vram.free_after_load_bytes,
                vram.peak_bytes,
                vram.kv_cache_bytes,
            )
        exclude = {"positions", "tokens"} if isinstance(doc, ScoreResult) else set()
        doc_json = doc.model_dump_json(exclude=exclude)
    if o.status == "ok":
        fault = "none"
    elif task.side == "main" or o.status == "infra" or main_fails_too:
        fault = "infra"  # main failing (or a PR failing just as main does) is not the PR's doing
    else:
        fault = "pr"
    samples = samples_of(doc) if o.status in ("ok", "implausible", "incomplete") else []
    with store.transaction() as con:
        con.execute("DELETE FROM samples WHERE session_id = ?", [task.session_id])
        con.execute("DELETE FROM score_dumps WHERE session_id = ?", [task.session_id])
        con.execute("DELETE FROM prefill_checks WHERE session_id = ?", [task.session_id])
        con.execute("DELETE FROM sessions WHERE session_id = ?", [task.session_id])
        con.execute(
            "INSERT INTO sessions (session_id, round_id, side, pr, slot, kind, model, commit, "
            "started_at, wall_s, exit_code, status, fault, detail, log_tail, device_name, driver, "
            "vram_free_after_load, vram_peak, kv_cache_bytes, document, attempts, seed, shard, "
            "gpu_index, gpu_uuid, host) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                task.session_id,
                round_id,
                task.side,
                task.pr,
                task.slot,
                task.kind,
                task.model,
                commit,
                o.started_at,
                o.wall_s,
                o.exit_code,
                o.status,
                fault,
                o.detail,
                o.log_tail,
                device,
                driver,
                vram_free,
                vram_peak,
                kv,
                doc_json,
                o.attempts,
                seed,
                task.shard,
                placement.gpu_index if placement else None,
                placement.gpu_uuid if placement else None,
                placement.host if placement else None,
            ],
        )
        if samples:
            con.executemany(
                "INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    [task.session_id, round_id, task.side, task.pr, task.model, ax, rep, v]
                    for ax, rep, v in samples
                ],
            )
        if o.status == "ok" and isinstance(doc, ScoreResult):
            con.execute(
                "INSERT INTO score_dumps VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    task.session_id,
                    round_id,
                    task.side,
                    task.pr,
                    task.model,
                    len(doc.positions),
                    doc.model_dump_json(),
                ],
            )
        if o.status == "ok" and isinstance(doc, PrefillCheckResult):
            con.executemany(
                "INSERT INTO prefill_checks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    [
                        task.session_id,
                        round_id,
                        task.side,
                        task.pr,
                        task.model,
                        p.prefix,
                        p.top1,
                        p.kl_mean,
                        p.kl_max,
                    ]
                    for p in doc.prefixes
                ],
            )


def _record_round(
    store: Store, loaded: LoadedManifest, policy: ResolvedPolicy, main_commit: str
) -> None:
    m = loaded.manifest
    row = store.query("SELECT main_commit, manifest_toml FROM rounds WHERE round_id = ?", [m.round])
    if row:
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
    with store.transaction() as con:
        if not row:
            con.execute(
                "INSERT INTO rounds (round_id, created_at, finished_at, engine_repo, base_ref, "
                "main_commit, profile, policy_json, device_name, driver, manifest_toml) "
                "VALUES (?, ?, NULL, ?, ?, ?, ?, ?, NULL, NULL, ?)",
                [
                    m.round,
                    now(),
                    str(loaded.repo),
                    m.base_ref,
                    main_commit,
                    m.profile,
                    policy.model_dump_json(),
                    loaded.text,
                ],
            )
        for p in m.pr:
            con.execute(
                "INSERT OR REPLACE INTO prs (round_id, pr, title, author, labels, targets, source, "
                "branch, expect) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    m.round,
                    p.number,
                    p.title,
                    p.author,
                    list(p.labels),
                    list(p.targets),
                    p.source,
                    p.branch,
                    p.expect,
                ],
            )


def _record_candidates(store: Store, round_id: str, cands: list[Candidate]) -> None:
    with store.transaction() as con:
        for c in cands:
            con.execute(
                "INSERT OR REPLACE INTO candidates (round_id, pr, pr_commit, main_commit, "
                "merged_commit, status, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [round_id, c.pr, c.pr_commit, c.main_commit, c.merged_commit, c.status, c.detail],
            )


def run_task(
    task: Task,
    checkout: Path,
    work: Path,
    policy: ResolvedPolicy,
    disk_paths: list[Path],
    main_checkout: Path | None = None,
) -> Outcome:
    """Run a task; infrastructure failures (and any failure of main) are retried. Speed tasks
    are timed from `main_checkout` (main's pinned harness) measuring the engine of `checkout`."""
    f = policy.failures
    req = build_request(task, policy)
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
    _record_round(store, loaded, policy, main_commit)
    log(
        f"round {m.round}: main {main_commit[:12]} ({m.base_ref}), {len(m.pr)} PRs, profile {m.profile}"
    )
    main_checkout = ws.add_worktree("main", main_commit)
    cands: list[Candidate] = []
    for p in m.pr:
        c = build_candidate(
            ws,
            p,
            main_commit,
            tips.get(p.number),
            loaded.patches.get(p.number),
            policy.harness.paths,
        )
        cands.append(c)
        log(f"  PR #{p.number}: {c.status}" + (f" ({c.detail})" if c.detail else ""))
    _record_candidates(store, m.round, cands)
    by_pr = {c.pr: c for c in cands}
    measurable = [(p.number, list(p.targets)) for p in m.pr if by_pr[p.number].measurable]
    gpus = getattr(conn, "gpus", 1)
    plans = plan_shards(
        m.round, measurable, policy.profile, _shard_count(store, m.round, gpus, len(measurable))
    )
    finished = {
        r[0]
        for r in store.query(
            f"SELECT session_id FROM sessions WHERE round_id = ? AND fault <> 'infra' "
            f"AND status IN ({','.join('?' * len(FINISHED))})",
            [m.round, *FINISHED],
        )
    }
    tasks = [t for plan in plans for s in plan for t in s.tasks]
    todo = [[t for s in plan for t in s.tasks if t.session_id not in finished] for plan in plans]
    n_todo = sum(map(len, todo))
    if n_todo < len(tasks):
        log(f"resuming: {len(tasks) - n_todo} of {len(tasks)} sessions already finished")

    def bench(shard: int) -> Bench:
        """A shard's own main checkout and scratch: shards on one host run side by side."""
        main = main_checkout if shard == 0 else ws.add_worktree(f"main-s{shard}", main_commit)
        work = scratch / ("work" if conn is None else f"work-s{shard}")
        return Bench(ws.repo, main, main_commit, policy, work, (db_path.parent,))

    def commit_of(task: Task) -> str:
        return main_commit if task.side == "main" else str(by_pr[task.pr].merged_commit)

    # Once a PR has failed for its own reasons, its later tasks in the round still run: each
    # session is evidence, and a verdict shows every failing axis.
    bar_ctx = (
        click.progressbar(length=n_todo, label="measuring", file=sys.stderr, item_show_func=str)
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
            infra_left = _run_here(bench(0), [t for shard in todo for t in shard], by_pr, done, log)
        else:
            from collector import cluster as ray_cluster  # noqa: PLC0415 - Ray only when asked

            infra_left = ray_cluster.run_shards(
                conn, todo, bench, _pr_checkout(by_pr), done, log, hook
            )
    if infra_left == 0:
        dev = store.query(
            "SELECT device_name, driver FROM sessions WHERE round_id = ? AND side = 'main' "
            "AND status = 'ok' ORDER BY slot LIMIT 1",
            [m.round],
        )
        with store.transaction() as con:
            con.execute(
                "UPDATE rounds SET finished_at = ?, device_name = ?, driver = ? WHERE round_id = ?",
                [now(), dev[0][0] if dev else None, dev[0][1] if dev else None, m.round],
            )
    else:
        log(
            f"{infra_left} sessions failed for infrastructure: run the same command again to retry them"
        )
    for v in verdict_mod.decide_round(store, m.round):
        log(f"  #{v.pr}: {v.label}" + (" (merge-first)" if v.merge_first else ""))
    return infra_left


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
    log: Callable[[str], None],
) -> int:
    """Every session in this process, one after another (a sharded round's shards in turn)."""
    from collector.cluster import here  # noqa: PLC0415 - nvidia-smi's answer, no Ray

    guard = BoxGuard(bench.main_checkout, log)
    placement = here()
    checkout = _pr_checkout(by_pr)
    return sum(done(t, measure(bench, guard, t, checkout(t)), placement) for t in todo)


def forged_evidence(doc: object, model: str, policy: ResolvedPolicy) -> tuple[str, str] | None:
    """(status, why) when a speed document's numbers are not the PR's own honest work
    (collector/forgery.py): 'forged' (its clock), 'diverged' (its outputs are not main's model's)."""
    if isinstance(doc, LongContextResult) and doc.measured is None:
        return None  # it died before any timed work: the long-context gate judges that
    if not isinstance(doc, SweepResult | ConcurrentResult | LongContextResult):
        return None
    rules = policy.forgery
    bars = policy.accuracy.bars(model)
    clock = timing_problem(doc.measured.timing.regions, rules)
    if clock:
        return "forged", clock
    outputs = output_problem(doc, bars.top1_min, bars.kl_max, rules)
    return ("diverged", outputs) if outputs else None


class BoxGuard:
    """Between sessions: kill what a session left running, and check that main's checkout and
    the interpreter's start-up hooks are as they were (collector/sandbox.py)."""

    def __init__(self, main_checkout: Path, log: Callable[[str], None]) -> None:
        self.main_checkout = main_checkout
        self.log = log
        self.subreaper = sandbox.become_subreaper()
        self.prints = sandbox.fingerprint()

    def after_session(self, task: Task) -> str | None:
        """What the session changed outside its own checkout (restored), or None."""
        who = "main" if task.side == "main" else f"PR #{task.pr}"
        left = sandbox.kill_leftovers()
        if left:
            self.log(f"  {who} {task.kind} {task.model}: killed {left} processes it left running")
        found = []
        changed = sandbox.checkout_changes(self.main_checkout)
        if changed:
            sandbox.restore_checkout(self.main_checkout)
            found.append("main's checkout (" + ", ".join(changed[:5]) + ")")
        hooks = sandbox.fingerprint_changes(self.prints, sandbox.fingerprint())
        if hooks:
            raise RoundError(
                f"{who}'s {task.kind} session changed files every Python process on this box "
                f"trusts ({', '.join(hooks[:5])}): the box can no longer be trusted; restore them "
                "and start a new round"
            )
        if not found:
            return None
        return "changed files outside its checkout: " + "; ".join(found) + " (restored)"


@dataclass(frozen=True)
class Bench:
    """What one GPU's sessions need; picklable, so a shard's worker gets its own."""

    repo: Path
    main_checkout: Path
    main_commit: str
    policy: ResolvedPolicy
    work: Path
    disk_paths: tuple[Path, ...]


def measure(bench: Bench, guard: BoxGuard, task: Task, checkout: Path | None) -> Outcome:
    """One session where its GPU is, and what only that box can judge: what the session changed
    outside its checkout, and whether its numbers are its own honest work. `checkout` None: main."""
    checkout = checkout or bench.main_checkout
    if task.side == "pr":  # its own earlier process may have rewritten them on disk
        pin_harness(checkout, bench.repo, bench.main_commit, bench.policy.harness.paths)
    o = run_task(
        task, checkout, bench.work, bench.policy, list(bench.disk_paths), bench.main_checkout
    )
    tampered = guard.after_session(task)
    if tampered and task.side == "pr":
        o.status, o.detail = "forged", tampered
    elif o.status == "ok" and task.kind in ("sweep", "guard", "concurrent", "longctx"):
        found = forged_evidence(o.document, task.model, bench.policy)
        if found:
            o.status, o.detail = found
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
    """What needs the round's evidence (a gain beyond main's range, main failing the same way:
    main of the task's own shard), then the session written; 1 when it failed for infrastructure."""
    round_id = slot_round(task)
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
    write_session(store, round_id, task, commit, o, main_fails_too, placement)
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
