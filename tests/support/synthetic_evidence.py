"""The raw evidence of one synthetic harness session, as the collector stores it: the session
row, its samples, its score dump or its prefill checks. Numbers only: no verdict rule lives
here (the verdict is collector.verdict.decide_round's, run on these rows afterwards).
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
SCORE_POSITIONS = 48  # a real dump has ~1,200; enough to give top-1 a few percent resolution
VOCAB = 49152


class Rows:
    """Rows per table as dicts, inserted column-wise at the end (fast for 10^5 rows). The
    columns, their order and types are the database's own (collector/schema.sql); a column
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
    if task.kind == "concurrent":
        return [(axis("concurrent", w), profile.concurrent_runs) for w in profile.widths]
    if task.kind == "guard":
        contexts: tuple[int, ...] = (profile.guard_ctx_for(task.model),)
    elif task.kind == "sweep":
        contexts = profile.contexts_for(task.model)
    else:
        return []  # score and prefill-check write their own rows; a newer kind measures nothing here
    return [(axis(k, c), profile.reps) for c in contexts for k in ("decode", "prefill")]


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
        attempts=1,
    )
    if status != "ok":
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
    offset = rng.gauss(1.0, 0.003)  # this process's own luck
    for ax, reps in axes_of(t, profile):
        gain = s.gain * (0.1 if ax.startswith("prefill") else 1.0)
        sigma = 0.04 if ax in NOISY_AXES else 0.004
        mean = level(t.model, ax, s.round_ix) * offset * (1.0 + gain)
        for rep in range(reps):
            value = mean * rng.gauss(1.0, sigma)
            rows.add("samples", **keys, model=t.model, axis=ax, rep=rep, value=value)
    return wall
