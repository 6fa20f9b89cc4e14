"""What every gate shares: the evidence of one PR it reads, and what it gives back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from collector.results import Gate

if TYPE_CHECKING:
    from collector.policy import ResolvedPolicy
    from collector.results import AccuracyResult, Comparison, SessionRecord, Strike
    from collector.store.evidence import RoundData


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
    def sessions(self) -> list[SessionRecord]:
        """This PR's sessions (main's are in data.sessions)."""
        return [s for s in self.data.sessions if s.side == "pr" and s.pr == self.pr]

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
    strikes: list[Strike] = field(default_factory=list)
    accuracy: dict[str, AccuracyResult] = field(default_factory=dict)  # model -> against main

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
        self.accuracy |= other.accuracy
