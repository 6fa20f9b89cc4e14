"""Guard comparisons hold a PR's guard sweep against main's engine timed beside it in that same
guard sweep, never against the same context inside a full sweep: on the H200 (round
2026-11-30-h200) smollm2-135m decode@4096 read 3-4% faster in every guard sweep than in full
sweeps, the neutral PR's too. A pair is always one process state against the same state."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from collector.policy import load_policy, resolve
from collector.store import open_store
from collector.store.evidence import RoundData

POLICY = resolve(load_policy(), "gpu")


def _round(path: Path, sessions: list[tuple[str, int, int, str, float, float]]):  # noqa: ANN202
    """sessions: (kind, pr, slot, model, main's value, the PR's) of PR sessions, three pairs
    each."""
    store = open_store(path)
    with store.transaction() as con:
        con.execute(
            "INSERT INTO rounds (round_id, created_at, engine_repo, base_ref, main_commit, "
            "profile, policy_json, manifest_toml) VALUES ('r', ?, '.', 'HEAD', 'c', 'gpu', ?, '')",
            [datetime.now(UTC), POLICY.model_dump_json()],
        )
        for kind, pr, slot, model, main, mine in sessions:
            sid = f"r/pr/{pr}/{slot}/{kind}/{model}"
            con.execute(
                "INSERT INTO sessions (session_id, round_id, side, pr, slot, kind, model, commit, "
                "started_at, wall_s, status, fault) VALUES (?, 'r', 'pr', ?, ?, ?, ?, 'c', ?, 1.0, "
                "'ok', 'none')",
                [sid, pr, slot, kind, model, datetime.now(UTC)],
            )
            for side, value in (("main", main), ("pr", mine)):
                for rep in range(3):
                    con.execute(
                        "INSERT INTO samples (session_id, round_id, side, pr, model, axis, rep, "
                        "value) VALUES (?, 'r', ?, ?, ?, 'decode@4096', ?, ?)",
                        [sid, side, pr, model, rep, value],
                    )
    return store


def test_a_guard_sweep_is_paired_with_mains_engine_in_the_same_guard_sweep(tmp_path: Path) -> None:
    m = "smollm2-135m"
    store = _round(
        tmp_path / "a.duckdb",
        [
            ("sweep", 1, 1, m, 886.0, 887.0),  # PR 1 targets it: full sweeps
            ("guard", 2, 2, m, 916.0, 917.0),  # PR 2 guards it
            ("guard", 2, 4, m, 915.0, 915.0),
        ],
    )
    with store:
        data = RoundData(store, "r")
        assert (
            data.pairs[(2, m, "decode@4096", "guard")]
            == [(2, 916.0, 917.0)] * 3 + [(4, 915.0, 915.0)] * 3
        )
        assert data.pairs[(1, m, "decode@4096", "full")] == [(1, 886.0, 887.0)] * 3
        assert data.axes(2, m) == set() and data.axes(2, m, "guard") == {"decode@4096"}
