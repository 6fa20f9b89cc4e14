"""The raw evidence of one synthetic harness session, as the collector stores it: the session
row, its samples, its score dump, its prefill checks or its long-context document. Numbers
only: no verdict rule lives here (the verdict is collector.judge.verdict.decide_round's, run on these
rows afterwards).

A PR's speed session (sweep, concurrent, guard) times main's engine beside the PR's, turn by
turn, as the collector's paired sessions do: each repetition is a pair, a samples row of side
'main' and one of side 'pr' with the same rep (both with the PR's number), measured in the same
minutes (a load of those minutes moves both), and the session carries its canary (the box's own
speed, timed right before and after it).
"""

from __future__ import annotations

import copy
import json
import math
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

import duckdb

from collector.axes import axis, parse_axis
from collector.policy import Profile
from collector.schedule import Task
from engine.harness.protocol import DeviceInfo, LongContextMain, LongContextResult

DEVICE_NAME, DRIVER = "NVIDIA H200", "570.133.20"
# main's decode / prefill tok/s at context 128, per model (H200-ish)
BASE = {
    "llama-1b:f16": (790.0, 83000.0),
    "llama-8b:q4_0": (330.0, 11500.0),
    "smollm2-135m": (960.0, 120000.0),
}
WALL_S = {
    "sweep": (60.0, 90.0),
    "concurrent": (30.0, 50.0),
    "score": (20.0, 30.0),
    "prefill-check": (10.0, 15.0),
    "guard": (15.0, 25.0),
}
# host-bound short prefills spread ten times more than the rest (policy.toml's min_noise_axes)
NOISY_AXES = {"prefill@128", "prefill@512"}
SPEED_KINDS = {"sweep", "concurrent", "guard"}  # the sessions that time engines (and the canary)
SCORE_POSITIONS = 48  # a real dump has ~1,200; enough to give top-1 a few percent resolution
VOCAB = 49152


class Rows:
    """Rows per table as dicts, inserted column-wise at the end (fast for 10^5 rows). The
    columns, their order and types are the database's own (collector/store/schema.sql); a column
    no row names stays NULL."""

    def __init__(self) -> None:
        self.tables: dict[str, list[dict]] = defaultdict(list)

    def add(self, table: str, **row: object) -> None:
        self.tables[table].append(row)

    def write(self, con: duckdb.DuckDBPyConnection) -> None:
        for table, rows in self.tables.items():
            types = dict(
                con.execute(
                    "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? "
                    "ORDER BY column_index",
                    [table],
                ).fetchall()
            )
            named = {k for row in rows for k in row}
            unknown = named - set(types)
            if unknown:
                raise KeyError(f"{table} has no column(s) {sorted(unknown)} in schema.sql")
            names = [n for n in types if n in named]
            selects = [
                f"unnest(${i}::VARCHAR[])::JSON"
                if types[n] == "JSON"
                else f"unnest(${i}::{types[n]}[])"
                for i, n in enumerate(names, start=1)
            ]
            columns = [[row.get(n) for row in rows] for n in names]
            quoted = ", ".join(f'"{n}"' for n in names)
            con.execute(f"INSERT INTO {table} ({quoted}) SELECT {', '.join(selects)}", columns)


def level(model: str, ax: str, round_ix: int) -> float:
    """main's true tok/s on one axis; main gets a little faster every round."""
    dec, pre = BASE[model]
    kind, n = parse_axis(ax)
    drift = 1.0 + 0.006 * round_ix
    steps = math.log2(n / 128) if kind != "concurrent" else 0.0  # 0 at 128 .. 8 at 32k
    if kind == "decode":
        return dec * drift * (1.0 - 0.03 * steps)
    if kind == "prefill":
        return pre * drift * (0.9 + 0.02 * steps)
    return dec * drift * n**0.8


def axes_of(task: Task, profile: Profile) -> list[tuple[str, int]]:
    """(axis, repetitions) a session of this kind measures."""
    widths = [(axis("concurrent", w), profile.concurrent_runs) for w in profile.widths]
    if task.kind == "concurrent":
        return widths
    if task.kind == "guard":
        contexts: tuple[int, ...] = (profile.guard_ctx_for(task.model),)
    elif task.kind == "sweep":
        contexts = profile.contexts_for(task.model)
    else:
        return []  # score and prefill-check write their own rows; a newer kind measures nothing here
    out = [(axis(k, c), profile.reps) for c in contexts for k in ("decode", "prefill")]
    # a target's sweep decodes the widths too where the profile says so (the gpu profile)
    return out + (widths if task.kind == "sweep" and profile.concurrent_in_sweep else [])


def main_dump(rng: random.Random, model: str) -> dict:
    """main's teacher-forced score dump of one model (ScoreResult's shape, small)."""
    tokens = [rng.randrange(VOCAB) for _ in range(SCORE_POSITIONS + 1)]
    positions = []
    for i in range(SCORE_POSITIONS):
        others = rng.sample(range(VOCAB), 3)
        lps = [-rng.uniform(0.2, 0.9)] + sorted(
            (-rng.uniform(3.5, 6.0) for _ in others), reverse=True
        )
        ids = [tokens[i + 1], *others]
        positions.append(
            {
                "argmax": ids[0],
                "target_logprob": lps[0],
                "topk": [[t, lp] for t, lp in zip(ids, lps, strict=True)],
            }
        )
    return {
        "kind": "score",
        "schema_version": 1,
        "model": model,
        "topk": 4,
        "tokens": tokens,
        "positions": positions,
    }


def other_dump(rng: random.Random, main: dict, jitter: float, broken: bool) -> dict:
    """A second pass over main's tokens: log-probs jittered; `broken` also flips the argmax of
    every fifth position to the runner-up (a PR that changed what the model predicts)."""
    doc = copy.deepcopy(main)
    for i, pos in enumerate(doc["positions"]):
        for entry in pos["topk"]:
            entry[1] = min(-1e-3, entry[1] + rng.gauss(0.0, jitter))
        if broken and i % 5 == 0:
            (a, la), (b, lb) = pos["topk"][:2]
            pos["topk"][:2] = [[b, la], [a, lb]]
            pos["argmax"] = b
        pos["target_logprob"] = next(lp for t, lp in pos["topk"] if t == doc["tokens"][i + 1])
    return doc


@dataclass
class Session:
    """One harness run to write: the task from collector.schedule.plan_round and what it meets."""

    task: Task
    round_id: str
    round_ix: int
    commit: str
    started_at: datetime
    gain: float = 0.0  # the PR's change of decode / concurrent speed on this model
    failure: str | None = None  # 'infra' | 'flaky': the run dies before it measures
    title: str = ""  # the PR's title, echoed in a crash's log tail (untrusted text)
    canary_s: float = 0.012  # the box's canary at this time of the round (seconds)


def longctx_document(rng: random.Random, s: Session, profile: Profile, wall: float) -> str:
    """The long-context check's document (engine/harness/protocol.py): completed under the
    profile's budget, its prefill main's level at that context (a PR's moved by a tenth of its
    gain, like its other prefills), main's run of it beside."""
    t = s.task
    ctx = profile.long_context[t.model]
    main_level = level(t.model, axis("prefill", ctx), s.round_ix)
    prefill = main_level * (1.0 + 0.1 * s.gain)
    decode = level(t.model, axis("decode", 128), s.round_ix) * 0.5
    main = LongContextMain(
        commit=s.commit,
        first=rng.random() < 0.5,
        prefill_tok_s=main_level * rng.gauss(1.0, 0.003),
        decode_tok_s=decode * rng.gauss(1.0, 0.003),
    )
    doc = LongContextResult(
        model=t.model,
        model_id="synthetic",
        engine_commit=s.commit,
        device=DeviceInfo(backend="cupy", name=DEVICE_NAME, driver=DRIVER),
        started_at=s.started_at.isoformat() + "Z",
        wall_s=wall,
        ctx=ctx,
        tokens=profile.long_context_tokens,
        budget_bytes=profile.memory_budget_mib[t.model] * 2**20,
        completed=True,
        prefill_tok_s=prefill * rng.gauss(1.0, 0.003),
        decode_tok_s=decode * rng.gauss(1.0, 0.003),
        main=main,
    )
    return doc.model_dump_json()


def add_session(
    rows: Rows, rng: random.Random, s: Session, profile: Profile, score_doc: dict | None
) -> float:
    """Write one session and what it measured; returns its wall time in seconds."""
    t = s.task
    wall = rng.uniform(*WALL_S.get(t.kind, (10.0, 20.0)))  # a kind newer than this table
    status, fault, code, detail, tail = "ok", "none", 0, None, "done"
    if s.failure == "infra":
        status, fault, code = "infra", "infra", 1
        detail = tail = "cudaErrorNoDevice: no CUDA-capable device is detected"
    elif s.failure == "flaky":
        status, fault, code, detail = "crash", "pr", -11, "killed by signal 11 (SIGSEGV)"
        tail = f"Segmentation fault\n{s.title}\n"
    ok = status == "ok"
    timed = ok and t.kind in SPEED_KINDS
    before = after = None
    if timed:  # the canary moved within the profile's limit (a session past it is run again)
        limit = profile.canary_limit / 2
        before = s.canary_s * rng.gauss(1.0, 0.01)
        after = before * (1.0 + max(-limit, min(limit, rng.gauss(0.0, 0.01))))
    document = None
    if ok and t.kind == "longctx" and t.model in profile.long_context:
        document = longctx_document(rng, s, profile, wall)
    rows.add(
        "sessions",
        session_id=t.session_id,
        round_id=s.round_id,
        side=t.side,
        pr=t.pr,
        slot=t.slot,
        kind=t.kind,
        model=t.model,
        commit=s.commit,
        started_at=s.started_at,
        wall_s=wall,
        exit_code=code,
        status=status,
        fault=fault,
        detail=detail,
        log_tail=tail,
        device_name=DEVICE_NAME,
        driver=DRIVER,
        document=document,
        attempts=1,
        canary_before_s=before,
        canary_after_s=after,
    )
    if not ok:
        return wall
    keys = {"session_id": t.session_id, "round_id": s.round_id, "side": t.side, "pr": t.pr}
    if t.kind == "score" and score_doc is not None:
        doc = json.dumps(score_doc)
        rows.add("score_dumps", **keys, model=t.model, n_positions=SCORE_POSITIONS, document=doc)
    if t.kind == "prefill-check":
        for prefix in profile.prefill_prefixes:
            kl = rng.uniform(0.004, 0.008)
            top1 = rng.uniform(0.94, 0.99)
            rows.add(
                "prefill_checks", **keys, model=t.model, prefix=prefix, top1=top1,
                kl_mean=kl, kl_max=kl * 4,
            )  # fmt: skip
    if t.side != "pr":
        return wall  # main's own slots time nothing: its engine is timed in the PRs' sessions
    # each engine process's own luck (placement, memory layout), the same all session
    main_offset, pr_offset = rng.gauss(1.0, 0.003), rng.gauss(1.0, 0.003)
    for ax, reps in axes_of(t, profile):
        gain = s.gain * (0.1 if ax.startswith("prefill") else 1.0)
        sigma = 0.04 if ax in NOISY_AXES else 0.004
        mean = level(t.model, ax, s.round_ix)
        for rep in range(reps):
            # most of a repetition's spread is these minutes' load and clocks, on both engines of
            # the pair alike; a quarter of it is each engine's own
            shared = rng.gauss(1.0, sigma)
            main = mean * main_offset * shared * rng.gauss(1.0, sigma / 4)
            pr = mean * pr_offset * (1.0 + gain) * shared * rng.gauss(1.0, sigma / 4)
            for side, value in (("main", main), ("pr", pr)):
                rows.add(
                    "samples", **{**keys, "side": side}, model=t.model, axis=ax, rep=rep,
                    value=value,
                )  # fmt: skip
    return wall
