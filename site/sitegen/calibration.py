"""Calibration from the A/A rounds (main measured against itself), per profile.

Every number comes from the database: the noise each A/A round stored per axis
(comparisons.noise, never below the floor of the policy that round was decided under: min_noise,
or the axis's own floor in profile.min_noise_axes), the spread its A/A PRs' paired sessions
measured before that floor (collector.judge.stats.session_spread over each PR's pairs, main's engine
timed beside the PR's), the largest |delta| its A/A PRs got, any tier or floor an axis got (an
A/A axis must be `none`), main-against-main accuracy (accuracy rows with pr = 0) and the A/A PRs'
accuracy, beside the gate in force: the policy of the profile's newest round. Noise and deltas
are judged against the floor of their own axis and the band it implies.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from markupsafe import Markup

from collector.axes import is_axis, is_memory_axis
from collector.judge.stats import session_spread
from collector.policy import AccuracyBars, ResolvedPolicy
from collector.results import AccuracyResult, Comparison
from collector.store.readout import Evaluation, Readout, Round
from sitegen import fmt

KINDS = ("decode", "prefill", "concurrent")
_EPS = 1e-9


@dataclass
class KindCell:
    """One kind of axis (decode, prefill or concurrent) of one model in one A/A round."""

    noise_median: float
    noise_max: float
    noise_axis: str  # the axis of the largest noise
    at_floor: bool  # the largest noise is its axis's floor in the round's policy: measured no more
    delta: float  # the A/A delta largest in magnitude, signed
    axis: str
    pr: int

    @property
    def where(self) -> str:
        """The axis without its kind: '@4k' for decode@4096, 'c8' for concurrent@8."""
        parsed = fmt.split_axis(self.axis)
        if not parsed:
            return self.axis
        kind, n = parsed
        return f"c{n}" if kind == "concurrent" else f"@{fmt.short_ctx(n)}"


@dataclass
class SpeedRow:
    model: str
    round_id: str
    cells: dict[str, KindCell]
    flagged: list[str]  # "XS decode@128 #1", "below floor prefill@512 #2": must stay empty
    # the largest spread between an A/A PR's paired sessions on any speed axis of the model,
    # before the floor (collector.judge.stats.session_spread, as the verdict computes it), its axis
    # and PR; None for a round stored before paired sessions (no main samples in PR sessions)
    measured: tuple[float, str, int] | None = None
    deltas: list[tuple[str, int, float]] = field(default_factory=list)  # axis, PR, delta


@dataclass
class BigDelta:
    """An A/A delta picked out of the rounds (the largest in magnitude of some set of axes)."""

    delta: float
    axis: str
    pr: int
    model: str
    round_id: str


@dataclass
class AccuracyRow:
    model: str
    round_id: str
    main: AccuracyResult | None  # main against main (pr = 0)
    prs: list[AccuracyResult]  # the A/A PRs' against main
    bars: AccuracyBars  # in force for the model

    @property
    def main_ppl_ratio(self) -> float | None:
        return ppl_ratio(self.main) if self.main else None

    @property
    def worst(self) -> dict[str, float] | None:
        """The A/A PRs' worst top-1, KL and PPL ratio."""
        if not self.prs:
            return None
        return {
            "top1": min(a.top1 for a in self.prs),
            "kl": max(a.kl for a in self.prs),
            "ppl_ratio": max(ppl_ratio(a) or 0.0 for a in self.prs),
        }

    @property
    def passes(self) -> bool | None:
        """Do main-vs-main and every A/A PR clear the bars in force?"""
        rows = [*([self.main] if self.main else []), *self.prs]
        if not rows:
            return None
        return all(
            a.top1 >= self.bars.top1_min - _EPS
            and a.kl <= self.bars.kl_max + _EPS
            and (ppl_ratio(a) or 1.0) <= self.bars.ppl_ratio_max + _EPS
            for a in rows
        )


@dataclass
class ProfileCalibration:
    profile: str
    rounds: list[Round]  # the A/A rounds, oldest first
    gate_round: Round  # the round whose policy is the gate in force
    speed: list[SpeedRow] = field(default_factory=list)
    accuracy: list[AccuracyRow] = field(default_factory=list)

    @property
    def policy(self) -> ResolvedPolicy | None:
        return self.gate_round.policy

    def has_own_floor(self, axis: str) -> bool:
        return self.policy is not None and self.policy.profile.has_own_floor(axis)

    def noise_floor(self, axis: str) -> float | None:
        """The noise floor the gate in force credits `axis` with."""
        return self.policy.profile.noise_floor(axis) if self.policy else None

    def band_of(self, axis: str) -> float | None:
        """The gain `axis` needs at its floor."""
        floor = self.noise_floor(axis)
        return None if floor is None or self.policy is None else self.policy.verdict.band(floor) - 1

    def floor_words(self, axis: str) -> Markup:
        """Which floor `axis` is judged at: 'min_noise 2.0%' or 'prefill@128's floor 35.0%'."""
        if self.has_own_floor(axis):
            return fmt.axis_name(axis) + Markup(f"'s floor {fmt.share(self.noise_floor(axis))}")
        return Markup(f"min_noise {fmt.share(self.noise_floor(axis))}")

    @property
    def floors(self) -> Markup:
        """Every floor of the gate in force with its band."""
        return fmt.noise_floors(self.policy)

    @property
    def largest_noise(self) -> tuple[float, SpeedRow, str, str] | None:
        """The largest noise stored: (noise, row, kind, axis)."""
        best = None
        for row in self.speed:
            for kind, c in row.cells.items():
                if best is None or c.noise_max > best[0]:
                    best = (c.noise_max, row, kind, c.noise_axis)
        return best

    @property
    def largest_measured(self) -> tuple[float, SpeedRow] | None:
        """The largest spread measured between an A/A PR's paired sessions, and its row."""
        rows = [r for r in self.speed if r.measured]
        if not rows:
            return None
        row = max(rows, key=lambda r: r.measured[0])  # type: ignore[index]
        return row.measured[0], row  # type: ignore[index]

    def _largest_delta(self, at_min_noise: bool) -> BigDelta | None:
        best = None
        for row in self.speed:
            for axis, pr, delta in row.deltas:
                if at_min_noise and self.has_own_floor(axis):
                    continue
                if best is None or abs(delta) > abs(best.delta):
                    best = BigDelta(delta, axis, pr, row.model, row.round_id)
        return best

    @property
    def largest_delta(self) -> BigDelta | None:
        """The A/A delta largest in magnitude on any axis."""
        return self._largest_delta(at_min_noise=False)

    @property
    def largest_delta_at_min_noise(self) -> BigDelta | None:
        """The largest on the axes without a floor of their own, when some axes have one (the
        largest overall may sit on a high-floor axis and hide a small band's overrun)."""
        if not (self.policy and self.policy.profile.min_noise_axes):
            return None
        best = self._largest_delta(at_min_noise=True)
        return None if best == self.largest_delta else best

    @property
    def flagged(self) -> int:
        return sum(len(r.flagged) for r in self.speed)


def ppl_ratio(a: AccuracyResult) -> float | None:
    return a.ppl_ratio if a.ppl_main else None


def measured_spreads(data: Readout, round_id: str) -> dict[str, tuple[float, str, int]]:
    """Per model, the largest spread between an A/A PR's paired sessions on one speed axis,
    before the floor: (spread, axis, PR), from the pairs the verdict reads (each of the PR's
    sessions its median PR / main ratio; collector.judge.stats.session_spread). Axes measured in one
    session only (nothing to spread) and memory axes (bytes, no noise band) are left out; ties go
    to the first axis in collector.axes' order, then the lower PR."""
    best: dict[str, tuple[float, str, int]] = {}
    for (rid, pr, model, axis), pairs in sorted(
        data.aa_pairs.items(), key=lambda kv: (kv[0][2], fmt.axis_order(kv[0][3]), kv[0][1])
    ):
        if rid != round_id or not is_axis(axis) or is_memory_axis(axis):
            continue
        if len({slot for slot, _, _ in pairs}) < 2:
            continue
        spread = session_spread(pairs)
        if model not in best or spread > best[model][0]:
            best[model] = (spread, axis, pr)
    return best


def _speed_rows(data: Readout, rnd: Round, evs: list[Evaluation]) -> list[SpeedRow]:
    spreads = measured_spreads(data, rnd.round_id)
    by_model: dict[str, list[tuple[Evaluation, Comparison]]] = {}
    for ev in evs:
        for c in ev.comparisons:
            by_model.setdefault(c.model, []).append((ev, c))
    rows = []
    for model in sorted(by_model):
        cells: dict[str, KindCell] = {}
        flagged: list[str] = []
        for kind in KINDS:
            comps = [
                (ev, c) for ev, c in by_model[model] if (fmt.split_axis(c.axis) or ("",))[0] == kind
            ]
            if not comps:
                continue
            noise: dict[str, float] = {}  # per axis: main's noise, the same for every PR
            for _, c in comps:
                noise[c.axis] = max(noise.get(c.axis, 0.0), c.noise)
            ev, big = max(comps, key=lambda p: (abs(p[1].delta), -p[0].pr))
            top, top_axis = max((v, a) for a, v in noise.items())
            floor_noise = rnd.policy.profile.noise_floor(top_axis) if rnd.policy else None
            cells[kind] = KindCell(
                noise_median=statistics.median(noise.values()),
                noise_max=top,
                noise_axis=top_axis,
                at_floor=floor_noise is not None and abs(top - floor_noise) < _EPS,
                delta=big.delta,
                axis=big.axis,
                pr=ev.pr,
            )
        for ev, c in sorted(by_model[model], key=lambda p: (p[0].pr, fmt.axis_order(p[1].axis))):
            what = []
            if c.tier not in (None, "none"):
                what.append(str(c.tier))
            if c.below_floor:
                what.append("below floor")
            if c.implausible:
                what.append("implausible")
            if what:
                flagged.append(f"{' '.join(what)} {fmt.axis_label(c.axis)} #{ev.pr}")
        measured = spreads.get(model)
        # speed axes only: a memory axis has no noise band (it has its growth bar instead)
        deltas = [
            (c.axis, ev.pr, c.delta) for ev, c in by_model[model] if not is_memory_axis(c.axis)
        ]
        rows.append(SpeedRow(model, rnd.round_id, cells, flagged, measured, deltas))
    return rows


def profiles(data: Readout) -> list[ProfileCalibration]:
    """One calibration per profile that has A/A rounds; gpu first, then by name."""
    aa = [r for r in data.rounds if r.kind == "aa"]
    names = sorted({r.profile for r in aa}, key=lambda p: (p != "gpu", p))
    out = []
    for name in names:
        rounds = [r for r in aa if r.profile == name]
        gate_round = [r for r in data.rounds if r.profile == name][-1]
        cal = ProfileCalibration(profile=name, rounds=rounds, gate_round=gate_round)
        for rnd in rounds:
            evs = data.by_round.get(rnd.round_id, [])
            cal.speed.extend(_speed_rows(data, rnd, evs))
            main_rows = data.main_accuracy.get(rnd.round_id, {})
            pr_rows: dict[str, list[AccuracyResult]] = {}
            for ev in evs:
                for model, a in ev.accuracy.items():
                    pr_rows.setdefault(model, []).append(a)
            for model in sorted(set(main_rows) | set(pr_rows)):
                policy = gate_round.policy or rnd.policy
                bars = policy.accuracy.bars(model) if policy else AccuracyBars()
                cal.accuracy.append(
                    AccuracyRow(
                        model, rnd.round_id, main_rows.get(model), pr_rows.get(model, []), bars
                    )
                )
        order = {r.round_id: i for i, r in enumerate(rounds)}
        cal.speed.sort(key=lambda r: (r.model, order[r.round_id]))
        cal.accuracy.sort(key=lambda r: (r.model, order[r.round_id]))
        out.append(cal)
    return out
