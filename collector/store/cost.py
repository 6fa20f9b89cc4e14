"""What a round cost on its device, from the wall time of its sessions (sessions.wall_s).

A PR's cost is the device time of its full evaluation: its own sessions (sweeps, concurrent
widths, score, prefill check, guard sweeps) plus an even share of main's sessions, since main is
measured only to be compared with the PRs: main's wall time divided by the number of PRs that
ran at least one session in the round. In a round cut into shards (one per GPU, each with its
own main: collector/run/cluster.py) a PR shares only its own shard's main, among that shard's
measured PRs. A PR that was never measured (needs-rebase, harness-touched) costs nothing and
takes no share. Failed sessions count (the device was busy all the same); only the last attempt
of a retried session is stored, so earlier attempts do not.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("sweep", "concurrent", "score", "prefill-check", "guard")
# The timing parent's phases (engine.harness.protocol.Measured.phases: seconds from its start at
# which each ended), as the steps between them; "outside" is the rest of the session's wall time
# (interpreter start and imports, writing the document, the collector's own checks).
PHASES = ("engine_loaded", "warmed", "measured", "engine_stopped", "verified")
STEPS = ("start and load", "warm-up", "timed work", "stop", "verification", "outside")


def _ordered(by_kind: Mapping[str, float]) -> dict[str, float]:
    """Known kinds in pipeline order, then any other kind by name."""
    known = [k for k in KINDS if k in by_kind]
    return {k: by_kind[k] for k in [*known, *sorted(set(by_kind) - set(KINDS))]}


@dataclass
class PRCost:
    pr: int
    own_by_kind: dict[str, float]  # seconds of the PR's own sessions, per kind
    main_share_by_kind: dict[str, float]  # its share of main's seconds, per kind
    sessions: int
    shard: int = 0  # whose main it shares (and was compared with): its own shard's

    @property
    def own_s(self) -> float:
        return sum(self.own_by_kind.values())

    @property
    def main_share_s(self) -> float:
        return sum(self.main_share_by_kind.values())

    @property
    def total_s(self) -> float:
        return self.own_s + self.main_share_s

    def by_kind(self) -> dict[str, float]:
        """Own plus main's share, per kind."""
        out: dict[str, float] = defaultdict(float)
        for part in (self.own_by_kind, self.main_share_by_kind):
            for k, v in part.items():
                out[k] += v
        return _ordered(out)


@dataclass
class RoundCost:
    round_id: str
    main_by_kind: dict[str, float] = field(default_factory=dict)
    pr_by_kind: dict[str, float] = field(default_factory=dict)  # all PRs' own sessions
    main_sessions: int = 0
    prs: dict[int, PRCost] = field(default_factory=dict)  # measured PRs only
    # kind -> step -> median seconds over the round's sessions of that kind that recorded
    # phases (speed sessions of harnesses since 2026-12-01); empty when none did
    steps_by_kind: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def main_s(self) -> float:
        return sum(self.main_by_kind.values())

    @property
    def pr_s(self) -> float:
        return sum(self.pr_by_kind.values())

    @property
    def total_s(self) -> float:
        return self.main_s + self.pr_s

    @property
    def per_pr_s(self) -> float | None:
        """Mean device seconds per measured PR (None when no PR was measured)."""
        return self.total_s / len(self.prs) if self.prs else None

    def to_json(self) -> dict[str, Any]:
        return {
            "round_id": self.round_id,
            "total_min": self.total_s / 60,
            "main_min": self.main_s / 60,
            "prs_min": self.pr_s / 60,
            "measured_prs": len(self.prs),
            "per_pr_min": None if self.per_pr_s is None else self.per_pr_s / 60,
            "main_by_kind_min": {k: v / 60 for k, v in self.main_by_kind.items()},
            "prs_by_kind_min": {k: v / 60 for k, v in self.pr_by_kind.items()},
            "session_steps_median_s": self.steps_by_kind,
            "per_pr": [
                {
                    "pr": c.pr,
                    "total_min": c.total_s / 60,
                    "own_min": c.own_s / 60,
                    "main_share_min": c.main_share_s / 60,
                    "by_kind_min": {k: v / 60 for k, v in c.by_kind().items()},
                    "sessions": c.sessions,
                }
                for c in self.prs.values()
            ],
        }


def round_cost(round_id: str, sessions: Iterable[Mapping[str, Any]]) -> RoundCost:
    """The cost of one round from its session rows (side, pr, kind, wall_s; optionally shard,
    0 when absent, and n, the number of sessions a pre-aggregated row stands for). Rows of
    other rounds are ignored when they carry a round_id."""
    main: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # by shard
    own: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[int, int] = defaultdict(int)
    shard_of: dict[int, int] = {}  # a PR's shard (its sessions name one; the lowest if not)
    main_n = 0
    for s in sessions:
        if s.get("round_id", round_id) != round_id:
            continue
        wall = float(s.get("wall_s") or 0.0)
        n = int(s.get("n", 1))
        shard = int(s.get("shard") or 0)
        if s["side"] == "main":
            main[shard][s["kind"]] += wall
            main_n += n
        else:
            pr = int(s["pr"])
            own[pr][s["kind"]] += wall
            counts[pr] += n
            shard_of[pr] = min(shard, shard_of.get(pr, shard))
    main_total: dict[str, float] = defaultdict(float)
    for by_kind in main.values():
        for k, v in by_kind.items():
            main_total[k] += v
    cost = RoundCost(round_id, main_by_kind=_ordered(main_total), main_sessions=main_n)
    pr_total: dict[str, float] = defaultdict(float)
    for by_kind in own.values():
        for k, v in by_kind.items():
            pr_total[k] += v
    cost.pr_by_kind = _ordered(pr_total)
    in_shard = Counter(shard_of.values())
    for pr in sorted(own):
        shard = shard_of[pr]
        mine = _ordered(main.get(shard, {}))
        share = {k: v / in_shard[shard] for k, v in mine.items()}
        cost.prs[pr] = PRCost(pr, _ordered(own[pr]), share, counts[pr], shard)
    return cost


def session_steps(phases: Mapping[str, Any], wall_s: float) -> dict[str, float] | None:
    """One session's seconds per step from its document's phases; None unless every phase is
    there, in order, within the session's wall time (anything else is not a timeline)."""
    try:
        ends = [float(phases[p]) for p in PHASES]
    except (KeyError, TypeError, ValueError):
        return None
    ordered = all(b >= a for a, b in zip([0.0, *ends], ends, strict=False))
    if not (ordered and all(map(math.isfinite, ends)) and ends[-1] <= wall_s):
        return None
    steps = [b - a for a, b in zip([0.0, *ends], ends, strict=False)]
    return dict(zip(STEPS, [*steps, wall_s - ends[-1]], strict=True))


def steps_by_kind(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Median seconds per step and kind over rows (kind, wall_s, phases: the JSON text or a
    mapping); rows without a usable timeline are left out."""
    per: dict[str, list[dict[str, float]]] = defaultdict(list)
    for r in rows:
        raw = r.get("phases")
        if raw is None:
            continue
        try:
            phases = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        steps = session_steps(phases, float(r.get("wall_s") or 0.0)) if phases else None
        if steps is not None:
            per[r["kind"]].append(steps)
    return {
        k: {step: statistics.median(s[step] for s in per[k]) for step in STEPS}
        for k in _ordered({k: 0.0 for k in per})
    }


PHASES_SQL = """
    SELECT kind, wall_s, json_extract(document, '$.measured.phases') AS phases
    FROM sessions WHERE round_id = ? AND document IS NOT NULL
"""

SESSIONS_SQL = """
    SELECT round_id, side, pr, kind, coalesce(shard, 0) AS shard, sum(wall_s) AS wall_s,
           count(*) AS n
    FROM sessions {where} GROUP BY ALL ORDER BY round_id, side, pr, kind, shard
"""


def minutes(seconds: float | None) -> str:
    """Device minutes as shown everywhere: one decimal, '–' for nothing."""
    return "–" if seconds is None else f"{seconds / 60:.1f}"


def load_cost(store: Any, round_id: str) -> RoundCost:
    """A round's cost from an open Store (collector.store)."""
    if not store.query("SELECT 1 FROM rounds WHERE round_id = ?", [round_id]):
        raise LookupError(f"no round {round_id!r} in {store.path}")
    rows = store.query_dicts(SESSIONS_SQL.format(where="WHERE round_id = ?"), [round_id])
    cost = round_cost(round_id, rows)
    cost.steps_by_kind = steps_by_kind(store.query_dicts(PHASES_SQL, [round_id]))
    return cost
