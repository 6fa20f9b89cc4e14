"""A round's stored evidence, read once for its verdict: the PRs, their sessions, each speed
axis's pairs (main's engine and the PR's, timed turn by turn), accuracy dumps (a served engine's:
its builds' comparisons, `kld`), prefill checks, long-context documents and earlier rounds'
strikes; in a sharded round, one shard's view."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from collector.results import Pair, SessionRecord
from collector.schedule import CONFIRM_SLOTS
from collector.store import Store
from collector.store.stored_policy import stored_policy
from engine.harness.protocol import KldResult, LongContextResult

OF_SHARD = "(x.side <> 'main' OR x.shard = ?)"

# A PR's speed samples, both engines' values of each repetition (x: its session, `scope` a
# condition on it): the verdict's pairs and the A/A calibration's (readout.aa_pairs) alike
PAIR_SAMPLES_SQL = """
    SELECT s.session_id, x.pr, x.slot, s.model, s.axis, x.kind, s.side, s.rep, s.value
    FROM samples s JOIN sessions x USING (session_id) WHERE s.round_id = ?
    AND x.side = 'pr' AND {scope} AND x.status IN ('ok', 'implausible', 'incomplete')
    ORDER BY x.slot, s.session_id, s.axis, s.rep
"""

Query = Callable[[str, list], list[tuple]]


def read_pairs(
    query: Query, round_id: str, scope: str = "true", params: list | None = None
) -> dict[tuple[int, str, str, str], list[Pair]]:
    """(PR, model, axis, shape) -> its pairs: each repetition of the PR's speed sessions that
    holds both engines' values, main's engine timed turn by turn beside the PR's. Keyed by the
    shape of the run too: a guard sweep (one context in a fresh process) and a full sweep reach
    the same context in different process states."""
    by_rep: dict[tuple, dict[str, float]] = defaultdict(dict)
    where: dict[tuple, tuple] = {}
    sql = PAIR_SAMPLES_SQL.format(scope=scope)
    for sid, pr, slot, model, ax, kind, side, rep, val in query(sql, [round_id, *(params or [])]):
        by_rep[(sid, ax, rep)][side] = val
        where[(sid, ax, rep)] = (pr, model, ax, "guard" if kind == "guard" else "full", slot)
    pairs: dict[tuple[int, str, str, str], list[Pair]] = defaultdict(list)
    for key, sides in by_rep.items():
        if "main" in sides and "pr" in sides:
            pr, model, ax, shape, slot = where[key]
            pairs[(pr, model, ax, shape)].append((slot, sides["main"], sides["pr"]))
    return pairs


class RoundData:
    """Everything a round's verdict needs, read once; in a sharded round, one shard's view.
    `planned`: the planned sessions only, without the confirmation sessions (what decides which
    PRs are confirmed, and how an unconfirmed PR is judged)."""

    def __init__(self, store: Store, round_id: str, shard: int = 0, planned: bool = False) -> None:
        rows = store.query_dicts("SELECT * FROM rounds WHERE round_id = ?", [round_id])
        if not rows:
            raise LookupError(f"no round {round_id!r} in {store.path}")
        self.round = rows[0]
        self.shard = shard
        scope = OF_SHARD + (f" AND x.slot < {CONFIRM_SLOTS}" if planned else "")
        policy = stored_policy(self.round["policy_json"], self.round.get("profile") or "")
        if policy is None:
            raise LookupError(f"round {round_id!r}: its stored policy cannot be read")
        self.policy = policy  # read back as every page reads it (collector/store/stored_policy.py)
        self.prs = store.query_dicts("SELECT * FROM prs WHERE round_id = ? ORDER BY pr", [round_id])
        self.candidates = {
            c["pr"]: c
            for c in store.query_dicts("SELECT * FROM candidates WHERE round_id = ?", [round_id])
        }
        self.sessions = [
            SessionRecord(**row)
            for row in store.query_dicts(
                "SELECT session_id, side, pr, slot, kind, model, status, fault, detail, exit_code "
                f"FROM sessions x WHERE round_id = ? AND {scope} ORDER BY slot, session_id",
                [round_id, shard],
            )
        ]
        self.pairs = read_pairs(store.query, round_id, scope, [shard])
        self.dumps: dict[tuple, list[str]] = defaultdict(list)
        for side, pr, model, doc in store.query(
            "SELECT d.side, d.pr, d.model, d.document FROM score_dumps d JOIN sessions x "
            f"USING (session_id) WHERE d.round_id = ? AND {scope} ORDER BY x.slot",
            [round_id, shard],
        ):
            self.dumps[(side, pr, model)].append(doc)
        # a served engine's score sessions: each compares the side's build with main's (main's
        # own: main's build with itself), in schedule order
        self.klds: dict[tuple, list[KldResult]] = defaultdict(list)
        for side, pr, model, doc in store.query(
            "SELECT side, pr, model, document FROM sessions x WHERE round_id = ? "
            "AND kind = 'score' AND status = 'ok' AND document IS NOT NULL "
            f"AND json_extract_string(document, '$.kind') = 'kld' AND {scope} ORDER BY slot",
            [round_id, shard],
        ):
            self.klds[(side, pr, model)].append(KldResult.model_validate_json(doc))
        self.checks: dict[tuple, dict[int, tuple[float, float]]] = defaultdict(dict)
        for side, pr, model, prefix, top1, kl in store.query(
            "SELECT c.side, c.pr, c.model, c.prefix, c.top1, c.kl_mean FROM prefill_checks c "
            f"JOIN sessions x USING (session_id) WHERE c.round_id = ? AND {scope} "
            "ORDER BY x.slot DESC",
            [round_id, shard],
        ):
            self.checks[(side, pr, model)][prefix] = (top1, kl)  # the earliest session wins
        # the long-context memory checks' documents, in schedule order
        self.longctx: dict[tuple, list[LongContextResult]] = defaultdict(list)
        for side, pr, model, doc in store.query(
            "SELECT side, pr, model, document FROM sessions x WHERE round_id = ? "
            f"AND kind = 'longctx' AND status = 'ok' AND document IS NOT NULL AND {scope} "
            "ORDER BY slot",
            [round_id, shard],
        ):
            self.longctx[(side, pr, model)].append(LongContextResult.model_validate_json(doc))
        # strikes of earlier rounds: (pr, commit, failure key) -> how many rounds struck it
        self.prior_strikes: dict[tuple[int, str, str], int] = {
            (pr, commit, key): int(n)
            for pr, commit, key, n in store.query(
                "SELECT pr, commit, failure_key, count(DISTINCT round_id) FROM strikes "
                "WHERE round_id <> ? GROUP BY pr, commit, failure_key",
                [round_id],
            )
        }

    def axes(self, pr: int, model: str, shape: str = "full") -> set[str]:
        """The axes the PR's sessions of this shape measured with main's engine beside it."""
        return {k[2] for k in self.pairs if k[0] == pr and k[1] == model and k[3] == shape}
