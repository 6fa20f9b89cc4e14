"""Guard comparisons hold a PR's guard sweep against main's guard sweeps, never against the same
context inside main's full sweep: on the H200 (round 2026-11-30-h200) smollm2-135m decode@4096
read 3-4% faster in every PR's guard sweep than in main's full sweeps, the neutral PR too."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from collector.policy import load_policy, resolve
from collector.store import open_store
from collector.verdict import RoundData

POLICY = resolve(load_policy(), "gpu")


def _round(path: Path, sessions: list[tuple[str, str, int, int, str, float]]):  # noqa: ANN202
    """sessions: (side, kind, pr, slot, model, value) with three samples each at `value`."""
    store = open_store(path)
    with store.transaction() as con:
        con.execute(
            "INSERT INTO rounds (round_id, created_at, engine_repo, base_ref, main_commit, "
            "profile, policy_json, manifest_toml) VALUES ('r', ?, '.', 'HEAD', 'c', 'gpu', ?, '')",
            [datetime.now(UTC), POLICY.model_dump_json()],
        )
        for side, kind, pr, slot, model, value in sessions:
            sid = f"r/{side}/{pr}/{slot}/{kind}/{model}"
            con.execute(
                "INSERT INTO sessions (session_id, round_id, side, pr, slot, kind, model, commit, "
                "started_at, wall_s, status, fault) VALUES (?, 'r', ?, ?, ?, ?, ?, 'c', ?, 1.0, "
                "'ok', 'none')",
                [sid, side, pr, slot, kind, model, datetime.now(UTC)],
            )
            for rep in range(3):
                con.execute(
                    "INSERT INTO samples VALUES (?, 'r', ?, ?, ?, 'decode@4096', ?, ?)",
                    [sid, side, pr, model, rep, value],
                )
    return store


def test_guard_sweeps_are_compared_with_mains_guard_sweeps(tmp_path: Path) -> None:
    m = "smollm2-135m"
    store = _round(
        tmp_path / "a.duckdb",
        [
            ("main", "sweep", 0, 0, m, 886.0),
            ("main", "guard", 0, 0, m, 916.0),
            ("pr", "guard", 1, 1, m, 917.0),
            ("main", "sweep", 0, 2, m, 887.0),
            ("main", "guard", 0, 2, m, 915.0),
        ],
    )
    with store:
        data = RoundData(store, "r")
        assert data.main_guard_shape(m, "decode@4096") == "guard"
        assert data.values("main", 0, m, "decode@4096", "guard") == [916.0] * 3 + [915.0] * 3
        assert data.values("main", 0, m, "decode@4096") == [886.0] * 3 + [887.0] * 3
        assert data.values("pr", 1, m, "decode@4096", "guard") == [917.0] * 3
        assert data.axes("pr", 1, m) == set() and data.axes("pr", 1, m, "guard") == {"decode@4096"}


def test_rounds_without_main_guard_sweeps_fall_back_to_its_full_sweeps(tmp_path: Path) -> None:
    m = "smollm2-135m"
    store = _round(
        tmp_path / "b.duckdb",
        [("main", "sweep", 0, 0, m, 886.0), ("pr", "guard", 1, 1, m, 917.0)],
    )
    with store:
        assert RoundData(store, "r").main_guard_shape(m, "decode@4096") == "full"
