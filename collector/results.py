"""The records of a round that every stage shares and the store keeps: a PR resolved to a
commit (`Candidate`), one repetition of a paired session (`Pair`), one axis compared
(`Comparison`), one gate's finding (`Gate`, kinds in `GATE_ORDER`), one model's accuracy
(`AccuracyResult`), a session as stored (`SessionRecord`), a possibly-flaky failure (`Strike`),
one PR's verdict (`Verdict`). Plain data, importing nothing of the stages: the writer stores
these types and the readers return them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Every gate kind, in the order a report lists them (a stored gate is '<kind>' or
# '<kind>:<model>').
GATE_ORDER = (
    "merge",
    "build",
    "run",
    "floor",
    "implausible",
    "accuracy",
    "reference",
    "prefill-path",
    "memory",
    "long-context",
    "guard",
    "guard-accuracy",
)

Pair = tuple[int, float, float]  # (the session's slot, main's value, the PR's): one repetition


@dataclass
class Candidate:
    pr: int
    # 'ready' | 'needs-rebase' | 'harness-touched' | 'build-failed' (a built engine's) | 'error'
    status: str
    main_commit: str
    pr_commit: str | None = None
    merged_commit: str | None = None
    detail: str | None = None
    checkout: Path | None = None

    @property
    def measurable(self) -> bool:
        return self.status == "ready"


@dataclass(frozen=True)
class AccuracyResult:
    n_tokens: int
    top1: float
    kl: float
    ppl_main: float
    ppl_pr: float

    @property
    def ppl_ratio(self) -> float:
        return self.ppl_pr / self.ppl_main


@dataclass
class Comparison:
    model: str
    role: str  # target | guard
    axis: str
    main_value: float
    pr_value: float
    delta: float
    ci_low: float
    ci_high: float
    noise: float
    tier: str
    significant: bool
    below_floor: bool
    implausible: bool
    n_main: int
    n_pr: int
    # not stored: what the gates' words read
    band: float = 1.0  # VerdictRules.band(noise)
    per_session: tuple[float, ...] = ()  # each PR session's delta, its pairs alone
    confirmed: tuple[float, ...] = ()  # the same, of its confirmation sessions alone
    least_gain: float = 0.0  # the PR's slowest sample over main's fastest


@dataclass
class Gate:
    gate: str  # a kind of GATE_ORDER, ':<model>' for a per-model gate
    status: str  # pass | fail | warn | skip
    reason: str  # the rule that decided it, with the numbers it was decided on
    # a failure that rests on timings alone, which a burst of load on the box can fake: a PR
    # failing nothing else is measured again (verdict.rests_on_speed)
    timed: bool = False


@dataclass
class SessionRecord:
    """One session of a round as stored: whose engine, which work, and how it ended."""

    session_id: str
    side: str  # main | pr
    pr: int  # 0 for main's
    slot: int
    kind: str  # sweep | concurrent | guard | score | prefill-check | longctx
    model: str
    status: str  # ok | skipped | crash | timeout | forged | diverged | ... (run/outcome.py)
    fault: str | None  # none | pr | infra (run/outcome.py)
    detail: str | None
    exit_code: int | None
    log_tail: str | None = None  # the engine's last words, for a failed session's page


@dataclass(frozen=True)
class Strike:
    """A failure that may be the box's (a timeout, a death by signal, lost tokens): a REJECT only
    when the same failure recurs at the same commit in `strikes_to_reject` rounds."""

    pr: int
    commit: str
    failure_key: str  # '<status>:<kind>:<model>', e.g. 'timeout:sweep:llama-1b:f16'
    round_id: str
    detail: str | None


@dataclass
class Verdict:
    pr: int
    commit: str | None
    label: str
    reason: str
    merge_first: bool = False
    best: Comparison | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    gates: list[Gate] = field(default_factory=list)
    accuracy: dict[str, AccuracyResult] = field(default_factory=dict)  # model -> against main
    strikes: list[Strike] = field(default_factory=list)
