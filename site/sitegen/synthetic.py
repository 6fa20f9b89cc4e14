"""A synthetic sparkboard database: every table of collector/schema.sql, filled plausibly.

Used to build and test the site before real rounds exist, and by the benchmark
(`python -m sitegen.bench`). Deterministic from a seed. Some PRs carry hostile titles,
authors, labels, branches and log tails so every page is tested against them.

    python -m sitegen.synthetic --prs 40 --rounds 3 --out /tmp/sb.duckdb
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import statistics
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import click
import duckdb

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

CONTEXTS = [128, 512, 4096, 16384, 32768]
WIDTHS = [2, 4, 8, 16, 32]
MODELS = ["llama-8b:q4_0", "llama-1b:f16", "qwen3-8b:q8_0", "smollm2-135m"]
# main's decode / prefill tok/s at ctx 128 and concurrent scaling, per model (H200-ish).
BASE = {
    "llama-8b:q4_0": (330.0, 11500.0),
    "llama-1b:f16": (790.0, 83000.0),
    "qwen3-8b:q8_0": (250.0, 15000.0),
    "smollm2-135m": (960.0, 120000.0),
}
TIERS = [("XL", 0.18), ("L", 0.10), ("M", 0.06), ("S", 0.035), ("XS", 0.02)]
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
PLAIN_LABELS = ["perf", "area:kernels", "area:runtime", "hold", "draft", "needs-benchmark"]

# The shape of the collector's resolved policy (collector/policy.py: ResolvedPolicy).
POLICY = {
    "profile_name": "gpu",
    "verdict": {
        "floor": 0.98,
        "implausible_gain": 20.0,
        "tiers": {name: low for name, low in TIERS},
        "confidence": 0.95,
        "bootstrap_resamples": 2000,
        "noise_multiplier": 1.0,
        "blocking_labels": ["hold", "needs-rebase", "draft"],
        "strikes_to_reject": 2,
    },
    "accuracy": {"top1_min": 0.93, "kl_max": 0.03, "ppl_ratio_max": 1.02, "topk": 16, "models": {}},
    "prefill_path": {"top1_margin": 0.10, "kl_factor": 3.0, "kl_margin": 0.05},
    "profile": {
        "backend": "cupy",
        "models": MODELS,
        "contexts": CONTEXTS,
        "guard_ctx": 32768,
        "widths": WIDTHS,
        "reps": 5,
        "concurrent_runs": 3,
        "prefill_prefixes": [128, 1024],
        "prefill_positions": 64,
        "min_noise": 0.01,
    },
}


def _sha(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


def _axes() -> list[str]:
    return (
        [f"decode@{c}" for c in CONTEXTS]
        + [f"prefill@{c}" for c in CONTEXTS]
        + [f"concurrent@{w}" for w in WIDTHS]
    )


def _main_value(model: str, axis: str, round_ix: int) -> float:
    dec, pre = BASE[model]
    kind, n = axis.split("@")
    n = int(n)
    drift = 1.0 + 0.006 * round_ix  # main gets a little faster every round
    if kind == "decode":
        return dec * drift * (1.0 - 0.05 * (CONTEXTS.index(n)) ** 1.3 / 4)
    if kind == "prefill":
        return pre * drift * (0.9 + 0.05 * CONTEXTS.index(n))
    return dec * drift * n**0.8


def _tier(delta: float) -> str:
    for name, low in TIERS:
        if delta >= low:
            return name
    return "none"


# The columns this generator fills (schema version 1 order); columns the collector adds
# later stay NULL.
COLUMNS = {
    "schema_meta": "key value",
    "rounds": "round_id created_at finished_at engine_repo base_ref main_commit profile "
    "policy_json device_name driver manifest_toml",
    "prs": "round_id pr title author labels targets source branch expect",
    "candidates": "round_id pr pr_commit main_commit merged_commit status detail",
    "sessions": "session_id round_id side pr slot kind model commit started_at wall_s exit_code "
    "status fault detail log_tail device_name driver vram_free_after_load vram_peak "
    "kv_cache_bytes document",
    "samples": "session_id round_id side pr model axis rep value",
    "accuracy": "round_id pr model n_tokens top1 kl ppl_main ppl_pr",
    "prefill_checks": "session_id round_id side pr model prefix top1 kl_mean kl_max",
    "comparisons": "round_id pr model role axis main_value pr_value delta ci_low ci_high noise "
    "tier significant below_floor implausible",
    "gates": "round_id pr gate status reason",
    "verdicts": "round_id pr commit label best_model best_axis best_delta ci_low ci_high reason "
    "merge_first decided_at",
    "strikes": "pr commit failure_key round_id detail",
    "score_dumps": "session_id round_id side pr model n_positions document",
}


class _Tables:
    """Rows per table, inserted column-wise at the end (fast for 10^5 rows)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple]] = {}

    def add(self, table: str, *row: object) -> None:
        self.rows.setdefault(table, []).append(row)

    def write(self, con: duckdb.DuckDBPyConnection) -> None:
        present = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        for table, rows in self.rows.items():
            if table not in present:
                continue  # a table of a newer schema than this generator knows
            types = dict(
                con.execute(
                    "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ?",
                    [table],
                ).fetchall()
            )
            names = COLUMNS[table].split()
            selects = []
            for i, name in enumerate(names, start=1):
                dtype = types[name]
                if dtype == "JSON":
                    selects.append(f"unnest(${i}::VARCHAR[])::JSON AS {name}")
                else:
                    selects.append(f'unnest(${i}::{dtype}[]) AS "{name}"')
            columns = [list(col) for col in zip(*rows, strict=True)]
            quoted = ", ".join(f'"{n}"' for n in names)
            con.execute(f"INSERT INTO {table} ({quoted}) SELECT {', '.join(selects)}", columns)


def schema_sql() -> str:
    """The collector's schema (the contract the site reads)."""
    return resources.files("collector").joinpath("schema.sql").read_text()


def _add_round(
    t: _Tables, round_id: str, created: datetime, hours: int, main_commit: str, manifest: str
) -> None:
    """A finished gpu round on the H200, `hours` long."""
    t.add(
        "rounds",
        round_id,
        created,
        created + timedelta(hours=hours),
        "https://example.invalid/sparkinfer.git",
        "main",
        main_commit,
        "gpu",
        json.dumps(POLICY, sort_keys=True),
        "NVIDIA H200",
        "570.133.20",
        manifest,
    )


def generate(path: Path, prs: int = 40, rounds: int = 3, seed: int = 7, aa_rounds: int = 0) -> Path:
    """Write a synthetic database of `prs` PRs over `rounds` rounds to `path` (replaced), after
    `aa_rounds` A/A rounds (main against itself, manifest kind "aa")."""
    rng = random.Random(seed)
    path = Path(path)
    path.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    con.execute(schema_sql())
    t = _Tables()
    version = re.search(r"Schema version (\d+)", schema_sql())
    t.add("schema_meta", "version", version.group(1) if version else "1")

    # Each PR lives for 1-3 consecutive rounds, starting so the PRs spread over the rounds.
    per_round: dict[int, list[int]] = {r: [] for r in range(rounds)}
    pr_info: dict[int, dict] = {}
    for i in range(prs):
        number = 100 + i
        start = min(rounds - 1, i * rounds // max(prs, 1))
        life = rng.choice([1, 1, 2, 2, 3])
        # Every third PR is hostile, cycling through HOSTILE so a few dozen PRs carry each
        # string at least once in a title, an author and a label.
        hostile = i % 3 == 0
        title = (
            f"perf: {HOSTILE[(i // 3) % len(HOSTILE)]} {rng.choice(WORDS)}"
            if hostile
            else f"perf({rng.choice(WORDS)}): {rng.choice(WORDS)} {rng.choice(WORDS)} for decode"
        )
        author = HOSTILE[(i // 3 + 5) % len(HOSTILE)] if hostile else rng.choice(AUTHORS)
        labels = rng.sample(PLAIN_LABELS, rng.choice([0, 1, 2]))
        if hostile:
            labels.append(HOSTILE[(i // 3 + 11) % len(HOSTILE)])
        target = MODELS[i % 3] if i % 17 else "smollm2-135m"
        pr_info[number] = {
            "title": title,
            "author": author,
            "labels": labels,
            "target": target,
            "effect": rng.choice([-0.06, -0.01, 0.0, 0.01, 0.025, 0.04, 0.07, 0.12, 0.2, 0.35]),
            "branch": HOSTILE[(i // 3 + 2) % len(HOSTILE)]
            if hostile
            else f"perf/{rng.choice(WORDS)}-{i}",
        }
        for r in range(start, min(rounds, start + life)):
            per_round[r].append(number)

    base_time = datetime(2026, 6, 1, 8, 0, 0)
    for a in range(aa_rounds):
        _aa_round(t, rng, a, base_time - timedelta(days=aa_rounds - a))
    commits: dict[int, str] = {}
    for r in range(rounds):
        round_id = f"{(base_time + timedelta(days=3 * r)).date().isoformat()}-gpu"
        created = base_time + timedelta(days=3 * r)
        main_commit = _sha("main", r)
        last = r == rounds - 1
        _add_round(t, round_id, created, 5, main_commit, f'round = "{round_id}"\nbase = "main"\n')
        # main's interleaved sessions (pr 0), shared by every PR of the round.
        main_samples: dict[tuple[str, str], list[float]] = {}
        for model in MODELS:
            for slot in range(3):
                for kind in ("sweep", "concurrent"):
                    sid = f"{round_id}/main/0/{slot}/{kind}/{model}"
                    t.add(
                        "sessions",
                        sid,
                        round_id,
                        "main",
                        0,
                        slot * 2,
                        kind,
                        model,
                        main_commit,
                        created + timedelta(minutes=slot * 20),
                        rng.uniform(20, 90),
                        0,
                        "ok",
                        "none",
                        None,
                        "",
                        "NVIDIA H200",
                        "570.133.20",
                        120_000_000_000,
                        20_000_000_000,
                        1_000_000_000,
                        None,
                    )
                    for axis in _axes():
                        if axis.startswith("concurrent") != (kind == "concurrent"):
                            continue
                        for rep in range(3):
                            v = _main_value(model, axis, r) * rng.gauss(1.0, 0.004)
                            main_samples.setdefault((model, axis), []).append(v)
                            t.add("samples", sid, round_id, "main", 0, model, axis, rep, v)
            t.add("accuracy", round_id, 0, model, 1177, 1.0, 0.0, 3.7, 3.7)
            sid = f"{round_id}/main/0/8/score/{model}"
            _score_session(t, rng, sid, round_id, "main", 0, model, main_commit, created)
            sid = f"{round_id}/main/0/9/prefill-check/{model}"
            _prefill_session(t, rng, sid, round_id, "main", 0, model, main_commit, created, True)

        for n in per_round[r]:
            info = pr_info[n]
            if n not in commits or rng.random() < 0.5:
                commits[n] = _sha("pr", n, r)
            pr_commit = commits[n]
            t.add(
                "prs",
                round_id,
                n,
                info["title"],
                info["author"],
                info["labels"],
                [info["target"]],
                f"ref:refs/pull/{n}/head",
                info["branch"],
                None,
            )
            roll = rng.random()
            status = "ready"
            if roll < 0.05:
                status = "needs-rebase"
            elif roll < 0.08:
                status = "harness-touched"
            merged = _sha("merge", n, r) if status == "ready" else None
            detail = {
                "ready": None,
                "needs-rebase": "conflict in kernels/attention.cu",
                "harness-touched": "engine/harness/bench.py",
            }[status]
            t.add("candidates", round_id, n, pr_commit, main_commit, merged, status, detail)
            decided = created + timedelta(hours=4, minutes=n % 60)
            if status != "ready":
                t.add(
                    "verdicts",
                    round_id,
                    n,
                    pr_commit,
                    status,
                    None,
                    None,
                    None,
                    None,
                    None,
                    f"not measured: {detail}",
                    False,
                    decided,
                )
                continue
            if last and rng.random() < 0.06:
                t.add(
                    "verdicts",
                    round_id,
                    n,
                    pr_commit,
                    "pending",
                    None,
                    None,
                    None,
                    None,
                    None,
                    "measuring",
                    False,
                    decided,
                )
                continue
            _pr_round(t, rng, round_id, r, n, info, pr_commit, created, decided, main_samples)

    # A flaky crash seen twice at one commit.
    if rounds >= 2 and per_round[0]:
        n = per_round[0][0]
        for r in range(2):
            rid = f"{(base_time + timedelta(days=3 * r)).date().isoformat()}-gpu"
            t.add("strikes", n, _sha("pr", n, 0), "crash:concurrent:llama-1b:f16", rid, "exit 139")
    t.write(con)
    _pick_merge_first(con)
    con.close()
    return path


def _aa_round(t: _Tables, rng: random.Random, a: int, created: datetime) -> None:
    """An A/A round: main against itself, PR #1 (one target, two guards) and PR #2 (two targets).
    Small deltas and noise around the profile's min_noise; every axis `none`."""
    round_id = f"aa-{created.date().isoformat()}-gpu"
    main_commit = _sha("main", "aa", a)
    manifest = f'round = "{round_id}"\nprofile = "gpu"\nkind = "aa"\n'
    _add_round(t, round_id, created, 3, main_commit, manifest)
    min_noise = POLICY["profile"]["min_noise"]
    for slot in range(3):
        for model in MODELS:
            sid = f"{round_id}/main/0/{slot}/sweep/{model}"
            t.add(
                "sessions", sid, round_id, "main", 0, slot * 3, "sweep", model, main_commit,
                created + timedelta(minutes=slot * 30), rng.uniform(40, 80), 0, "ok", "none",
                None, None, "NVIDIA H200", "570.133.20", None, None, None, None,
            )  # fmt: skip
            for axis in _axes():
                if not axis.startswith("concurrent"):
                    v = _main_value(model, axis, 0) * rng.gauss(1.0, 0.004)
                    t.add("samples", sid, round_id, "main", 0, model, axis, 0, v)
    for model in MODELS:
        sid = f"{round_id}/main/0/9/prefill-check/{model}"
        _prefill_session(t, rng, sid, round_id, "main", 0, model, main_commit, created, True)
        top1 = rng.choice([1.0, rng.uniform(0.996, 0.9999)])
        t.add("accuracy", round_id, 0, model, 1177, top1, rng.uniform(0, 2e-4), 3.7, 3.7)
    for pr, targets in ((1, MODELS[:1]), (2, MODELS[1:3])):
        t.add(
            "prs", round_id, pr, "A/A: main itself as the PR", "aa-check", ["a/a"], targets,
            "ref:HEAD", None, "none",
        )  # fmt: skip
        t.add("candidates", round_id, pr, main_commit, main_commit, main_commit, "ready", None)
        guards = [m for m in MODELS[:3] if m not in targets]
        for model in [*targets, *guards]:
            kind = "sweep" if model in targets else "guard"
            for slot in range(2):
                t.add(
                    "sessions", f"{round_id}/pr/{pr}/{slot}/{kind}/{model}", round_id, "pr", pr,
                    slot * 3 + 1 + pr, kind, model, main_commit,
                    created + timedelta(minutes=slot * 30 + 10), rng.uniform(20, 60), 0, "ok",
                    "none", None, None, "NVIDIA H200", "570.133.20", None, None, None, None,
                )  # fmt: skip
            axes = _axes() if model in targets else ["decode@32768", "prefill@32768"]
            for axis in axes:
                mv = _main_value(model, axis, 0)
                delta = rng.gauss(0.0, 0.004)
                noise = max(rng.uniform(0.004, 0.016), min_noise)
                t.add(
                    "comparisons", round_id, pr, model,
                    "target" if model in targets else "guard", axis, mv, mv * (1 + delta), delta,
                    delta - 0.005, delta + 0.005, noise, "none", False, False, False,
                )  # fmt: skip
        for model in targets:
            sid = f"{round_id}/pr/{pr}/9/prefill-check/{model}"
            _prefill_session(t, rng, sid, round_id, "pr", pr, model, main_commit, created, True)
            ppl = 3.7 * rng.uniform(0.9999, 1.0002)
            t.add("accuracy", round_id, pr, model, 1177, rng.uniform(0.995, 1.0), 1e-4, 3.7, ppl)
        t.add("gates", round_id, pr, "floor", "pass", "every axis at or above 98% of main")
        t.add(
            "verdicts", round_id, pr, main_commit, "none", targets[0], "decode@128", 0.001,
            -0.004, 0.006, "no significant speedup (A/A)", False, created + timedelta(hours=3),
        )  # fmt: skip


def _prefill_session(
    t: _Tables,
    rng: random.Random,
    sid: str,
    round_id: str,
    side: str,
    pr: int,
    model: str,
    commit: str,
    created: datetime,
    checks: bool,
) -> None:
    t.add(
        "sessions",
        sid,
        round_id,
        side,
        pr,
        9,
        "prefill-check",
        model,
        commit,
        created + timedelta(minutes=70),
        12.0,
        0,
        "ok",
        "none",
        None,
        None,
        "NVIDIA H200",
        "570.133.20",
        None,
        None,
        None,
        None,
    )
    if checks:
        for prefix in (128, 1024):
            top1 = rng.uniform(0.94, 0.99)
            kl = rng.uniform(0.004, 0.008)
            t.add("prefill_checks", sid, round_id, side, pr, model, prefix, top1, kl, kl * 4)


def _score_session(
    t: _Tables,
    rng: random.Random,
    sid: str,
    round_id: str,
    side: str,
    pr: int,
    model: str,
    commit: str,
    created: datetime,
) -> None:
    """A score session and a small teacher-forced dump (the real ones are ~1,200 positions)."""
    tokens = [rng.randrange(49152) for _ in range(9)]
    positions = [
        {
            "argmax": tokens[i + 1],
            "target_logprob": -0.05,
            "topk": [[tokens[i + 1], -0.05], [rng.randrange(49152), -3.2]],
        }
        for i in range(len(tokens) - 1)
    ]
    doc = {
        "kind": "score",
        "schema_version": 1,
        "model": model,
        "topk": 2,
        "tokens": tokens,
        "positions": positions,
    }
    t.add(
        "sessions",
        sid,
        round_id,
        side,
        pr,
        8,
        "score",
        model,
        commit,
        created + timedelta(minutes=60),
        30.0,
        0,
        "ok",
        "none",
        None,
        None,
        "NVIDIA H200",
        "570.133.20",
        None,
        None,
        None,
        None,
    )
    t.add("score_dumps", sid, round_id, side, pr, model, len(positions), json.dumps(doc))


def _pr_round(
    t: _Tables,
    rng: random.Random,
    round_id: str,
    r: int,
    n: int,
    info: dict,
    pr_commit: str,
    created: datetime,
    decided: datetime,
    main_samples: dict[tuple[str, str], list[float]],
) -> None:
    target = info["target"]
    guards = [m for m in MODELS[:3] if m != target][:2]
    effect = info["effect"] + rng.gauss(0, 0.005)
    sid_base = f"{round_id}/pr/{n}"
    crash = rng.random() < 0.03
    for model in [target, *guards]:
        for slot in range(3):
            for kind in ("sweep", "concurrent") if model == target else ("sweep",):
                sid = f"{sid_base}/{slot}/{kind}/{model}"
                bad = crash and kind == "concurrent" and slot == 2
                t.add(
                    "sessions",
                    sid,
                    round_id,
                    "pr",
                    n,
                    slot * 2 + 1,
                    kind,
                    model,
                    pr_commit,
                    created + timedelta(minutes=slot * 20 + 10),
                    rng.uniform(20, 90),
                    139 if bad else 0,
                    "crash" if bad else "ok",
                    "pr" if bad else "none",
                    "segfault in concurrent decode" if bad else None,
                    (f"Segmentation fault\n{info['title']}\n" if bad else "") + "done",
                    "NVIDIA H200",
                    "570.133.20",
                    118_000_000_000,
                    21_000_000_000,
                    1_000_000_000,
                    None,
                )
        sid = f"{sid_base}/9/prefill-check/{model}"
        _prefill_session(t, rng, sid, round_id, "pr", n, model, pr_commit, created, model == target)

    comps = []
    for model in [target, *guards]:
        axes = _axes() if model == target else ["decode@32768", "prefill@32768"]
        for axis in axes:
            main_vals = main_samples[(model, axis)]
            mv = statistics.median(main_vals)
            if model == target:
                fade = 1.0 - 0.15 * (_axes().index(axis) % 5)
                true = effect * fade if axis.startswith(("decode", "concurrent")) else effect * 0.1
            else:
                true = rng.gauss(0, 0.003)
            pr_vals = [mv * (1 + true) * rng.gauss(1.0, 0.004) for _ in range(3)]
            sid = (
                f"{sid_base}/0/{'concurrent' if axis.startswith('concurrent') else 'sweep'}/{model}"
            )
            for rep, v in enumerate(pr_vals):
                t.add("samples", sid, round_id, "pr", n, model, axis, rep, v)
            pv = statistics.median(pr_vals)
            delta = (pv - mv) / mv
            half = 0.006 + rng.uniform(0, 0.006)
            noise = 0.004 + rng.uniform(0, 0.003)
            tier = _tier(delta)
            below = delta < -0.02
            sig = tier != "none" and delta - half > noise
            role = "target" if model == target else "guard"
            t.add(
                "comparisons",
                round_id,
                n,
                model,
                role,
                axis,
                mv,
                pv,
                delta,
                delta - half,
                delta + half,
                noise,
                tier,
                sig,
                below,
                delta > 19.0,
            )
            comps.append((model, role, axis, delta, delta - half, delta + half, tier, below, sig))

    top1 = rng.uniform(0.90, 0.99) if effect > 0.3 else rng.uniform(0.945, 0.995)
    kl = rng.uniform(0.005, 0.035) if effect > 0.3 else rng.uniform(0.004, 0.025)
    ppl_main = 3.7 + r * 0.001
    ppl_pr = ppl_main * rng.uniform(0.995, 1.01)
    t.add("accuracy", round_id, n, target, 1177, top1, kl, ppl_main, ppl_pr)
    acc_ok = top1 >= 0.93 and kl <= 0.03 and ppl_pr / ppl_main <= 1.02
    floor_fail = [c for c in comps if c[7]]
    guard_fail = [c for c in floor_fail if c[1] == "guard"]
    gates = [
        (
            "floor",
            "fail" if floor_fail else "pass",
            (
                "below 98% of main on "
                + ", ".join(f"{c[0]} {c[2]} {c[3]:+.1%}" for c in floor_fail)
                if floor_fail
                else "every axis at or above 98% of main"
            ),
        ),
        (
            f"accuracy:{target}",
            "pass" if acc_ok else "fail",
            f"top-1 {top1:.3f} (bar ≥0.93) · KL {kl:.4f} (bar ≤0.03) · "
            f"PPL ×{ppl_pr / ppl_main:.4f} (bar ≤1.02) over 1177 tokens",
        ),
        (f"prefill-path:{target}", "pass", "batched prefill within main's spread at 128/1024"),
        (
            f"run:{target}",
            "warn" if crash else "pass",
            "one concurrent run crashed (strike 1 of 2)" if crash else "every run completed",
        ),
    ]
    for g in guards:
        failed = any(c[0] == g for c in guard_fail)
        gates.append(
            (
                f"guard:{g}",
                "fail" if failed else ("skip" if rng.random() < 0.05 else "pass"),
                "regressed at 32k" if failed else "no regression (decode + prefill @ 32k)",
            )
        )
    for gate, status, reason in gates:
        t.add("gates", round_id, n, gate, status, reason)

    target_comps = [c for c in comps if c[1] == "target"]
    best = max(target_comps, key=lambda c: c[3])
    if floor_fail or not acc_ok:
        label = "REJECT"
        why = floor_fail[0] if floor_fail else None
        reason = (
            f"{why[0]} {why[2]} at {1 + why[3]:.1%} of main (floor 98%)"
            if why
            else f"accuracy vs main broke on {target}: top-1 {top1:.3f}, KL {kl:.4f}"
        )
    else:
        sig = [c for c in target_comps if c[8]]
        strongest = max(sig, key=lambda c: c[3]) if sig else None
        label = strongest[6] if strongest else "none"
        if strongest:
            best = strongest
        reason = (
            f"strongest axis {best[2]} {best[3]:+.1%}" if strongest else "no significant speedup"
        )
    t.add(
        "verdicts",
        round_id,
        n,
        pr_commit,
        label,
        best[0],
        best[2],
        best[3],
        best[4],
        best[5],
        reason,
        False,
        decided,
    )


def _pick_merge_first(con: duckdb.DuckDBPyConnection) -> None:
    """Merge-first: per round, the best passing speedup without a blocking label."""
    con.execute(
        """
        UPDATE verdicts SET merge_first = true
        FROM (
            SELECT v.round_id, arg_max(v.pr, v.best_delta) AS pr
            FROM verdicts v JOIN prs p USING (round_id, pr)
            WHERE v.label IN ('XL', 'L', 'M', 'S', 'XS')
              AND NOT list_has_any(p.labels, ['hold', 'needs-rebase', 'draft'])
            GROUP BY v.round_id
        ) w
        WHERE verdicts.round_id = w.round_id AND verdicts.pr = w.pr
        """
    )


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
