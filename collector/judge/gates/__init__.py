"""The gates of a verdict: one module per kind, each a function of one PR's evidence.

A gate function takes a GateContext (the round's data, the PR, its comparisons, the policy)
and returns a GateResult: its Gate rows, and the reasons the PR is rejected (hard) or not
judged yet (soft). verdict.decide_pr runs them in order and turns the reasons into a label.
Adding a gate: one function in one module here, its kind in results.GATE_ORDER, one line in
verdict.PR_GATES. Every gate's text states the rule that decided it with the numbers it read.
"""

from collector.judge.gates.accuracy import accuracy_gate
from collector.judge.gates.base import GateContext, GateResult
from collector.judge.gates.build import BUILD_FAILED, build_gate
from collector.judge.gates.floor import floor_gate
from collector.judge.gates.guard import guard_gate
from collector.judge.gates.implausible import implausible_gate
from collector.judge.gates.long_context import long_context_gate
from collector.judge.gates.memory import memory_gate
from collector.judge.gates.merge import NOT_MERGED, merge_gate
from collector.judge.gates.prefill_path import prefill_path_gate
from collector.judge.gates.reference import reference_gate
from collector.judge.gates.run import run_gate
from collector.results import GATE_ORDER

__all__ = [
    "BUILD_FAILED",
    "GATE_ORDER",
    "NOT_MERGED",
    "GateContext",
    "GateResult",
    "accuracy_gate",
    "build_gate",
    "floor_gate",
    "guard_gate",
    "implausible_gate",
    "long_context_gate",
    "memory_gate",
    "merge_gate",
    "prefill_path_gate",
    "reference_gate",
    "run_gate",
]
