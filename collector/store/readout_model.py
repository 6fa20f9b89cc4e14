"""The types of the read model (collector/store/readout.py): a stored round and one PR as seen in
it, and the orders and icons every view of them shares (the comment, `show`, the site)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any

from collector.axes import axis_sort_key, is_axis
from collector.manifest import round_kind
from collector.policy import ResolvedPolicy
from collector.results import (
    GATE_ORDER,
    AccuracyResult,
    Comparison,
    Gate,
    SessionRecord,
    Strike,
    Verdict,
)
from collector.store.stored_policy import stored_policy
from collector.store.writer import COMPARISON_COLUMNS, GATE_COLUMNS

Row = dict[str, Any]


# status -> (emoji for a GitHub comment or a terminal, Material icon the site inlines as SVG)
STATUS_ICONS: dict[str, tuple[str, str]] = {
    "pass": ("✅", "check-circle"),
    "fail": ("❌", "close-circle"),
    "warn": ("⚠️", "alert"),
    "skip": ("⏭️", "skip-next-circle"),
}
UNKNOWN_ICON = ("❔", "help-circle")


def real_weights(model: str) -> bool:
    """Whether `model` has trained weights. A dummy model's weights are random, so its absolute
    perplexity (~1e13) means nothing; only the PR / main ratio does."""
    try:
        from engine.dummy import DUMMY_MODELS  # noqa: PLC0415 - the engine is optional here
    except Exception:
        return False
    return model.partition(":")[0] not in DUMMY_MODELS


def axis_key(name: str) -> tuple[int, int, int]:
    """collector.axes' order; a name that is not an axis sorts last."""
    return axis_sort_key(name) if name and is_axis(name) else (9, 0, 0)


def gate_key(gate: str) -> int:
    """collector.judge.gates' order (a gate 'accuracy:tiny' sorts as 'accuracy')."""
    kind = gate.split(":", 1)[0]
    return GATE_ORDER.index(kind) if kind in GATE_ORDER else len(GATE_ORDER)


class ReadoutError(LookupError):
    """A round or PR the database does not hold."""


@dataclass
class Round:
    round_id: str
    kind: str  # "round" or "aa" (main against itself: calibration, never a leaderboard)
    profile: str
    created_at: datetime | None
    finished_at: datetime | None  # None: the round did not finish (cut off)
    main_commit: str | None
    base_ref: str | None
    device_name: str | None
    driver: str | None
    policy: ResolvedPolicy | None  # None only for a policy that cannot be read
    policy_raw: dict[str, Any]  # as stored, for the site's "policy in force" table
    row: Row  # every column as stored
    # what sealed every checkout's code: 'bubblewrap 0.8.0', 'none' (collected with
    # --unsandboxed), None for a round collected before sandboxes
    sandbox: str | None = None

    @property
    def leaderboard(self) -> bool:
        return self.kind == "round"

    @property
    def unsandboxed(self) -> bool:
        """The maintainer ran the round's PR code without a sandbox (`collect --unsandboxed`)."""
        return self.sandbox == "none"


@dataclass(frozen=True)
class PrefillCheck:
    """Batched prefill against the token loop on one model and prefix, one side's sessions
    averaged (the prefill_checks rows of a PR, or of main: pr 0)."""

    pr: int
    model: str
    prefix: int
    side: str  # main | pr
    top1: float
    kl_mean: float
    kl_max: float  # the largest of its sessions'
    runs: int  # how many sessions it averages


@dataclass
class Evaluation:
    """One PR as seen in one round: what was measured and what was decided."""

    round: Round
    pr: int
    info: Row  # the prs row: title, author, labels, targets, source, branch, expect
    candidate: Row | None = None
    verdict: Verdict | None = None  # as the verdict made it (its best one of `comparisons`)
    decided_at: Any = None  # when it was made (the stored verdict row's time)
    comparisons: list[Comparison] = field(default_factory=list)  # targets first, by model and axis
    gates: list[Gate] = field(default_factory=list)  # in GATE_ORDER
    accuracy: dict[str, AccuracyResult] = field(default_factory=dict)  # model -> against main
    prefill: list[PrefillCheck] = field(default_factory=list)  # by model, prefix, side
    failures: list[SessionRecord] = field(default_factory=list)  # ended neither ok nor skipped
    strikes: list[Strike] = field(default_factory=list)  # of this PR, in any round
    shard: int | None = None  # whose main it was compared with (None: never measured)

    @property
    def round_id(self) -> str:
        return self.round.round_id

    @property
    def label(self) -> str:
        return self.verdict.label if self.verdict else "pending"

    @property
    def reason(self) -> str:
        return (
            self.verdict.reason if self.verdict else ""
        ) or "no verdict yet (run sparkboard verdict)"

    @property
    def merge_first(self) -> bool:
        return bool(self.verdict and self.verdict.merge_first)

    @property
    def commit(self) -> str | None:
        if self.verdict and self.verdict.commit:
            return self.verdict.commit
        return self.candidate.get("pr_commit") if self.candidate else None

    @property
    def best(self) -> Comparison | None:
        """The verdict's best target axis (None without a verdict or a measured axis)."""
        return self.verdict.best if self.verdict else None

    @property
    def best_delta(self) -> float | None:
        return self.best.delta if self.best else None

    @property
    def best_significant(self) -> bool:
        """Whether the verdict's best axis cleared significance (the stored column). With none
        that did, the best axis is only the largest change: it gave no tier."""
        return bool(self.best and self.best.significant)

    @property
    def target_models(self) -> list[str]:
        models = [c.model for c in self.comparisons if c.role == "target"]
        return sorted(set(models), key=models.index)


def round_of(row: Row, pr_labels: list[list[str]]) -> Round:
    """A stored rounds row as a Round; `pr_labels`: its PRs' labels (an A/A round's mark)."""
    try:
        raw = json.loads(row["policy_json"]) if row.get("policy_json") else {}
    except (TypeError, ValueError):
        raw = {}
    return Round(
        round_id=row["round_id"],
        kind=round_kind(row.get("manifest_toml"), pr_labels),
        profile=row.get("profile") or "?",
        created_at=row.get("created_at"),
        finished_at=row.get("finished_at"),
        main_commit=row.get("main_commit"),
        base_ref=row.get("base_ref"),
        device_name=row.get("device_name"),
        driver=row.get("driver"),
        policy=stored_policy(row.get("policy_json"), row.get("profile") or ""),
        policy_raw=raw if isinstance(raw, dict) else {},
        row=row,
        sandbox=row.get("sandbox"),
    )


def accuracy_of(row: Row) -> AccuracyResult:
    """A stored accuracy row as the verdict's record (its columns are the record's fields)."""
    return AccuracyResult(**{f.name: row[f.name] for f in fields(AccuracyResult)})


def comparison_of(row: Row) -> Comparison:
    """A stored comparison as the verdict made it (what it did not store keeps its default)."""
    return Comparison(**{k: row.get(k) for k in COMPARISON_COLUMNS})


def gate_of(row: Row) -> Gate:
    return Gate(**{k: row[k] for k in GATE_COLUMNS})


def as_stored(ev: Evaluation, record: Comparison | Gate) -> Row:
    """A comparison or a gate of `ev` as its stored row: round, PR, then its columns."""
    columns = COMPARISON_COLUMNS if isinstance(record, Comparison) else GATE_COLUMNS
    return {"round_id": ev.round_id, "pr": ev.pr, **{k: getattr(record, k) for k in columns}}


def row_of(round_id: str, record: Any) -> Row:
    """A record of the read model as a row of the data files: its round, then its fields."""
    return {"round_id": round_id, **asdict(record)}


def accuracy_rows(round_id: str, pr: int, accuracy: dict[str, AccuracyResult]) -> list[Row]:
    """Accuracy per model as its stored rows (pr 0: main against main)."""
    return [{"round_id": round_id, "pr": pr, "model": m, **asdict(a)} for m, a in accuracy.items()]


def verdict_of(row: Row, ev: Evaluation) -> Verdict:
    """A stored verdict row of `ev` (its comparisons and gates attached) as the verdict made it:
    its best axis is the comparison the row names (written in the same transaction)."""
    best = next(
        (c for c in ev.comparisons if (c.model, c.axis) == (row["best_model"], row["best_axis"])),
        None,
    )
    return Verdict(
        pr=row["pr"], commit=row["commit"], label=row["label"], reason=row["reason"],
        merge_first=bool(row["merge_first"]), best=best, comparisons=ev.comparisons,
        gates=ev.gates,
    )  # fmt: skip


def verdict_row(ev: Evaluation) -> Row | None:
    """`ev`'s verdict as its stored row, for the data files."""
    v, b = ev.verdict, ev.best
    if v is None:
        return None
    return {
        "round_id": ev.round_id, "pr": ev.pr, "commit": v.commit, "label": v.label,
        "best_model": b.model if b else None, "best_axis": b.axis if b else None,
        "best_delta": b.delta if b else None, "ci_low": b.ci_low if b else None,
        "ci_high": b.ci_high if b else None, "reason": v.reason, "merge_first": v.merge_first,
        "decided_at": ev.decided_at,
    }  # fmt: skip
