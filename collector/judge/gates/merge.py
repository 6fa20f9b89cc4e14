"""merge — the PR must merge onto the round's main without touching the pinned harness.

Decided before anything is measured (collector/run/candidates.py); a PR that fails it is labelled
with the candidate's status (needs-rebase, harness-touched), not REJECT, and is not measured.
"""

from __future__ import annotations

from collector.judge.gates.base import Gate

KIND = "merge"
NOT_MERGED = ("needs-rebase", "harness-touched")


def merge_gate(candidate: dict, main_commit: str) -> Gate:
    """The failed merge gate of a candidate whose status is one of NOT_MERGED; its reason is
    the verdict's reason too."""
    why = candidate["detail"] or candidate["status"]
    if candidate["status"] == "needs-rebase":
        reason = f"Not measured: {why}. Rebase onto main {main_commit[:9]} and push again."
    else:
        reason = (
            f"Not measured: {why}. Harness files are pinned from main; move that change to "
            "its own PR."
        )
    return Gate(KIND, "fail", reason)
