"""What every gate shares: the evidence of one PR it reads, and what it gives back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collector.policy import ResolvedPolicy
    from collector.verdict import Comparison, RoundData

EPS = 1e-12  # rule boundaries are inclusive: a gain of exactly +2% clears the +2% gate


def pct(x: float) -> str:
    """A delta in words: +12.0%, -7.9%."""
    return f"{x * 100:+.1f}%"


def pct_of(fraction: float) -> str:
    """A fraction as a plain percentage: 98%, 3.5%."""
    return f"{fraction * 100:g}%"


@dataclass
class Gate:
    gate: str  # a kind of GATE_ORDER, ':<model>' for a per-model gate
    status: str  # pass | fail | warn | skip
    reason: str  # the rule that decided it, with the numbers it was decided on
    # a failure that rests on timings alone, which a burst of load on the box can fake: a PR
    # failing nothing else is measured again (verdict.rests_on_speed)
    timed: bool = False


@dataclass(frozen=True)
class GateContext:
    """One PR of a round, measured and compared: everything a gate may read."""

    data: RoundData
    pr: int
    commit: str
    targets: list[str]
    guards: list[str]
    comparisons: list[Comparison]

    @property
    def policy(self) -> ResolvedPolicy:
        return self.data.policy

    @property
    def sessions(self) -> list[dict]:
        """This PR's sessions (main's are in data.sessions)."""
        return [s for s in self.data.sessions if s["side"] == "pr" and s["pr"] == self.pr]

    def compared(self, role: str, model: str | None = None) -> list[Comparison]:
        return [
            c for c in self.comparisons if c.role == role and (model is None or c.model == model)
        ]


@dataclass
class GateResult:
    """A gate's verdicts, plus why the PR is rejected (hard) or not judged yet (soft), and the
    evidence it found on the way (strikes to record, accuracy rows to store)."""

    gates: list[Gate] = field(default_factory=list)
    hard: list[str] = field(default_factory=list)
    soft: list[str] = field(default_factory=list)
    strikes: list[tuple] = field(default_factory=list)
    accuracy: list[tuple] = field(default_factory=list)

    def passed(self, gate: str, text: str) -> None:
        self.gates.append(Gate(gate, "pass", text))

    def skipped(self, gate: str, text: str) -> None:
        self.gates.append(Gate(gate, "skip", text))

    def warned(self, gate: str, text: str, pending: str) -> None:
        """Not judged yet: `pending` says why in the verdict's reason."""
        self.gates.append(Gate(gate, "warn", text))
        self.soft.append(pending)

    def failed(self, gate: str, text: str, reject: str, timed: bool = False) -> None:
        """A REJECT: `reject` says why in the verdict's reason. `timed`: the failure is a loss
        of speed alone (Gate.timed)."""
        self.gates.append(Gate(gate, "fail", text, timed))
        self.hard.append(reject)

    def extend(self, other: GateResult) -> None:
        self.gates += other.gates
        self.hard += other.hard
        self.soft += other.soft
        self.strikes += other.strikes
        self.accuracy += other.accuracy
