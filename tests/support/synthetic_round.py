"""A synthetic sparkboard database: raw evidence made up, verdicts from the real rules.

The generator writes only what a collector would: rounds, PRs, candidates, sessions (planned by
collector.schedule.plan_round: main's slots score, check the prefill path and the long context;
each PR's speed sessions time main's engine beside the PR's), paired samples (side 'main' and
'pr' with the same rep in each PR speed session), each speed session's canary, score dumps,
prefill checks and long-context documents, into a database opened with
collector.store.open_store (so the schema and its version are schema.sql's). Then
collector.judge.verdict.decide_round judges every round, oldest first: comparisons, gates, accuracy,
strikes, labels and merge-first all come from the rules the collector uses. Deterministic from
a seed. Some PRs carry hostile titles, authors, labels, branches and log tails. Every round's
PR code was sealed by 'bubblewrap 0.8.0' (rounds.sandbox) except, with two PR rounds or more,
the first PR round, collected with --unsandboxed ('none'; UNSANDBOXED_ROUND).

Planted, every 25 PRs: a needs-rebase and a harness-touched candidate, a regression below the
floor, an accuracy failure (REJECTs), an infrastructure failure (pending), a flaky crash at one
commit in two rounds (a strike, then a REJECT), and a PR measured in three rounds at three
commits. A/A rounds (manifest kind "aa") measure main against itself.

    python tests/support/synthetic_round.py --prs 40 --rounds 3 --aa-rounds 2 --out /tmp/sb.duckdb
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import click
from synthetic_evidence import Rows, Session, add_session, main_dump, other_dump

from collector.judge.verdict import decide_round
from collector.policy import ResolvedPolicy, load_policy, resolve
from collector.schedule import plan_round
from collector.store import Store, open_store

# Strings a PR author controls that have broken other generators: HTML, attribute injection,
# Markdown link/image injection, template syntax, table pipes, mentions, headings.
HOSTILE = [
    "<script>alert(1)</script>",
    '" onmouseover="alert(1)',
    "[click](javascript:alert(1))",
    "{{ 7*7 }}",
    "{% raw %}",
    "![img](http://evil.example/x.png)",
    "| a | b |",
    "@everyone",
    "# heading",
    "<img src=x onerror=alert(1)>",
    "`code` *bold* _it_ ~~s~~",
    "</textarea><svg onload=alert(1)>",
    "&lt;already&gt; &amp;",
    "line\nbreak | pipe",
    "<!-- comment -->",
    "https://evil.example/phish",
    "</title><script>alert(1)</script>",
    "javascript:alert(1)",
    "---\ntitle: injected\n---",
    "\u202eevil\u200b",
]
WORDS = [
    "fuse",
    "rope",
    "qk-norm",
    "kv-cache",
    "flash-decode",
    "split-k",
    "gemv",
    "dp4a",
    "q4_0",
    "q8_0",
    "prefill",
    "graph",
    "launch",
    "occupancy",
    "tile",
    "warp",
    "shuffle",
    "rmsnorm",
    "softmax",
    "attention",
    "mlp",
    "swiglu",
    "batch",
]
AUTHORS = [
    "kaivaryn",
    "jimcody1995",
    "inference2026",
    "fansilas",
    "reyanthony",
    "mira-k",
    "tobias_w",
]
PLAIN_LABELS = ["perf", "area:kernels", "area:runtime", "needs-benchmark"]
BLOCKING_LABELS = ["hold", "draft"]
GAINS = [-0.01, 0.0, 0.01, 0.025, 0.04, 0.07, 0.12, 0.2, 0.35]
# PR index mod 25 -> what happens to it (see the module's docstring)
PLANTS = {
    1: "needs-rebase",
    2: "harness-touched",
    4: "floor",
    5: "accuracy",
    7: "infra",
    8: "flaky",
}
NOT_MERGED = {
    "needs-rebase": "conflict in kernels/attention.cu",
    "harness-touched": "engine/harness/bench.py",
}
# A knob of the round's policy that keeps decide_round fast enough for the 1,000-PR benchmark
# database (~30,000 comparisons; the rules themselves are untouched): BOOTSTRAP_RESAMPLES per
# interval (default 2,000), whose medians are most of the time.
BOOTSTRAP_RESAMPLES = 500
# The synthetic box's own calibration (policy.toml's are the real H200's): 1% noise floor on
# every axis, no per-axis floors, the default accuracy bars; the site's calibration tests plant
# theirs on top.
MIN_NOISE = 0.01
BASE_TIME = datetime(2026, 6, 1, 8, 0, 0)
SANDBOX = "bubblewrap 0.8.0"  # what sealed the PR code of every round (rounds.sandbox) ...
UNSANDBOXED_ROUND = 0  # ... but this PR round's (by index), with 2 PR rounds or more: 'none'
CANARY_S = 0.012  # the canary's seconds on the synthetic box, which drifts a little in a round


def synthetic_policy() -> ResolvedPolicy:
    """The default policy's gpu profile, as a round would store it, with the knobs above."""
    policy = resolve(load_policy(), "gpu")
    profile = policy.profile.model_copy(update={"min_noise": MIN_NOISE, "min_noise_axes": {}})
    verdict = policy.verdict.model_copy(update={"bootstrap_resamples": BOOTSTRAP_RESAMPLES})
    # the synthetic score dumps stray from main's by made-up amounts: judged on the default bars,
    # not on the H200's measured ones (an honest synthetic PR would fail those)
    accuracy = policy.accuracy.model_copy(update={"models": {}})
    return policy.model_copy(update={"profile": profile, "verdict": verdict, "accuracy": accuracy})


POLICY = synthetic_policy()
MODELS = list(POLICY.profile.models)


def _sha(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


@dataclass
class SyntheticPr:
    number: int
    title: str
    author: str
    labels: list[str]
    targets: list[str]
    branch: str | None
    gain: float
    plant: str | None = None
    rounds: list[int] = field(default_factory=list)
    commits: dict[int, str] = field(default_factory=dict)  # round index -> PR commit


def roster(rng: random.Random, prs: int, rounds: int) -> list[SyntheticPr]:
    """Each PR lives for 1-3 consecutive rounds, starting so the PRs spread over the rounds."""
    out = []
    for i in range(prs):
        plant = PLANTS.get(i % 25)
        # every third PR is hostile, cycling through HOSTILE: title, author, label and branch
        hostile = i % 3 == 0
        h = (i // 3) % len(HOSTILE)
        title = (
            f"perf: {HOSTILE[h]} {rng.choice(WORDS)}"
            if hostile
            else f"perf({rng.choice(WORDS)}): {rng.choice(WORDS)} {rng.choice(WORDS)} for decode"
        )
        labels = rng.sample(PLAIN_LABELS, rng.choice([0, 1, 2]))
        if rng.random() < 0.15:
            labels.append(rng.choice(BLOCKING_LABELS))  # never merge-first
        if hostile:
            labels.append(HOSTILE[(h + 11) % len(HOSTILE)])
        targets = [MODELS[i % len(MODELS)]]
        if i % 11 == 6:
            targets.append(MODELS[(i + 1) % len(MODELS)])
        gain = {"floor": -0.08}.get(plant or "", rng.choice(GAINS))
        pr = SyntheticPr(
            number=100 + i,
            title=title,
            author=HOSTILE[(h + 5) % len(HOSTILE)] if hostile else rng.choice(AUTHORS),
            labels=labels,
            targets=targets,
            branch=HOSTILE[(h + 2) % len(HOSTILE)] if hostile else f"perf/{rng.choice(WORDS)}-{i}",
            gain=gain,
            plant=plant,
        )
        start = min(rounds - 1, i * rounds // max(prs, 1))
        life = rng.choice([1, 1, 2, 2, 3])
        if plant == "flaky" or i % 25 == 0:  # a strike needs a second round; 0: three rounds
            life = 2 if plant == "flaky" else 3
            start = max(0, min(start, rounds - life))
        pr.rounds = list(range(start, min(rounds, start + life)))
        commit = _sha("pr", pr.number, start)
        for r in pr.rounds:
            if r != start and plant != "flaky" and (i % 25 == 0 or rng.random() < 0.5):
                commit = _sha("pr", pr.number, r)  # pushed again between rounds
            pr.commits[r] = commit
        out.append(pr)
    return out


def _status(rng: random.Random, pr: SyntheticPr, r: int) -> str:
    if pr.plant in NOT_MERGED and r == pr.rounds[0]:
        return pr.plant
    return "needs-rebase" if rng.random() < 0.03 else "ready"


def _round(
    rows: Rows,
    rng: random.Random,
    round_id: str,
    ix: int,
    created: datetime,
    manifest: str,
    entries: list[tuple[SyntheticPr, str, str]],
    main_commit: str,
    sandbox: str = SANDBOX,
) -> None:
    """One finished round on the H200: entries are (PR, its commit, candidate status)."""
    profile = POLICY.profile
    for pr, commit, status in entries:
        rows.add(
            "prs", round_id=round_id, pr=pr.number, title=pr.title, author=pr.author,
            labels=pr.labels, targets=pr.targets, source="ref:HEAD" if pr.number < 100 else f"ref:refs/pull/{pr.number}/head",
            branch=pr.branch, expect="none" if pr.number < 100 else None,
        )  # fmt: skip
        merged = main_commit if pr.number < 100 else _sha("merge", commit, main_commit)
        rows.add(
            "candidates", round_id=round_id, pr=pr.number, pr_commit=commit,
            main_commit=main_commit, merged_commit=merged if status == "ready" else None,
            status=status, detail=NOT_MERGED.get(status),
        )  # fmt: skip
    ready = {pr.number: (pr, commit) for pr, commit, status in entries if status == "ready"}
    slots = plan_round(round_id, [(n, p.targets) for n, (p, _) in ready.items()], profile)
    dumps = {m: main_dump(rng, m) for m in MODELS}
    scored: set[str] = set()
    written: set[str] = set()
    # the session a planted failure hits: the target's concurrent decode (in its sweep where the
    # profile measures it there)
    planted_kind = "sweep" if profile.concurrent_in_sweep else "concurrent"
    nth_planted: dict[int, int] = {}
    clock = created
    # the box's canary wanders a little over the round (a slow drift and one warmer stretch)
    phase = rng.uniform(0.0, 2 * math.pi)
    for slot in slots:
        for task in slot.tasks:
            if task.session_id in written:
                continue  # the plan named it twice: the collector runs a task id once
            written.add(task.session_id)
            drift = 1.0 + 0.01 * math.sin(phase + slot.index / 5.0)
            s = Session(task, round_id, ix, main_commit, clock, canary_s=CANARY_S * drift)
            doc = None
            if task.side == "main" and task.kind == "score":
                # main scores twice: its dump, then a second pass for main-vs-main calibration
                again = task.model in scored
                doc = (
                    other_dump(rng, dumps[task.model], 0.002, False) if again else dumps[task.model]
                )
                scored.add(task.model)
            if task.side == "pr":
                pr, s.commit = ready[task.pr]
                s.title = pr.title
                if task.model in pr.targets:
                    s.gain = pr.gain
                if task.kind == "score":
                    broken = pr.plant == "accuracy" and task.model == pr.targets[0]
                    doc = other_dump(rng, dumps[task.model], 0.01, broken)
                if task.kind == planted_kind and task.model == pr.targets[0]:
                    nth = nth_planted[pr.number] = nth_planted.get(pr.number, -1) + 1
                    plant = {"infra": 0, "flaky": 1}.get(pr.plant or "")
                    s.failure = pr.plant if nth == plant else None
            clock += timedelta(seconds=add_session(rows, rng, s, profile, doc))
    rows.add(
        "rounds", round_id=round_id, created_at=created, finished_at=clock,
        engine_repo="https://example.invalid/sparkinfer.git", base_ref="main",
        main_commit=main_commit, profile="gpu", policy_json=POLICY.model_dump_json(),
        device_name="NVIDIA H200", driver="570.133.20", manifest_toml=manifest, sandbox=sandbox,
    )  # fmt: skip


def _aa_round(rows: Rows, rng: random.Random, a: int, created: datetime) -> str:
    """main against itself: PR #1 (one target, two guards) and PR #2 (two targets)."""
    round_id = f"aa-{created.date().isoformat()}-gpu"
    main_commit = _sha("main", "aa", a)
    manifest = f'round = "{round_id}"\nprofile = "gpu"\nkind = "aa"\n'
    entries = [
        (SyntheticPr(n, "A/A: main itself as the PR", "aa-check", ["a/a"], t, None, 0.0),
         main_commit, "ready")
        for n, t in ((1, MODELS[:1]), (2, MODELS[1:3]))
    ]  # fmt: skip
    _round(rows, rng, round_id, 0, created, manifest, entries, main_commit)
    return round_id


def _decide(store: Store, round_ids: list[str]) -> None:
    """The real verdict, oldest round first (a strike counts those of earlier rounds); decided
    when the round finished, so the same seed gives the same database."""
    for round_id in round_ids:
        decide_round(store, round_id)
    store.con.execute(
        "UPDATE verdicts SET decided_at = r.finished_at FROM rounds r "
        "WHERE verdicts.round_id = r.round_id"
    )


def generate(path: Path, prs: int = 40, rounds: int = 3, seed: int = 7, aa_rounds: int = 0) -> Path:
    """Write a synthetic database of `prs` PRs over `rounds` rounds to `path` (replaced), after
    `aa_rounds` A/A rounds (main against itself, manifest kind "aa")."""
    rng = random.Random(seed)
    path = Path(path)
    path.unlink(missing_ok=True)
    rows = Rows()
    order = [
        _aa_round(rows, rng, a, BASE_TIME - timedelta(days=aa_rounds - a)) for a in range(aa_rounds)
    ]
    everyone = roster(rng, prs, rounds)
    for r in range(rounds):
        round_id = f"{(BASE_TIME + timedelta(days=3 * r)).date().isoformat()}-gpu"
        entries = [(p, p.commits[r], _status(rng, p, r)) for p in everyone if r in p.commits]
        manifest = f'round = "{round_id}"\nprofile = "gpu"\n'
        created = BASE_TIME + timedelta(days=3 * r)
        sandbox = "none" if rounds >= 2 and r == UNSANDBOXED_ROUND else SANDBOX
        _round(rows, rng, round_id, r, created, manifest, entries, _sha("main", r), sandbox)
        order.append(round_id)
    with open_store(path) as store:
        with store.transaction() as con:
            rows.write(con)
        _decide(store, order)
    return path


@click.command()
@click.option("--prs", default=40, show_default=True, help="number of PRs")
@click.option("--rounds", default=3, show_default=True, help="number of rounds")
@click.option("--seed", default=7, show_default=True)
@click.option("--aa-rounds", default=0, show_default=True, help="A/A rounds before the others")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path))
def main(prs: int, rounds: int, seed: int, aa_rounds: int, out: Path) -> None:
    """Write a synthetic sparkboard database."""
    generate(out, prs=prs, rounds=rounds, seed=seed, aa_rounds=aa_rounds)
    click.echo(str(out))


if __name__ == "__main__":
    main()
