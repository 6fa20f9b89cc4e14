"""Is a speed session's evidence its own? The checks behind the `forged` and `diverged` statuses.

The numbers a verdict uses come from the timing parent (main's pinned harness, a process that
never imports the PR's code; engine/harness/timing.py). Its document also carries what the
engine process said about itself and what it produced, and the collector holds both against
what they must be:

* **timing**: every timed region has the parent's seconds and the engine process's own figure
  for it. The engine's figure lies inside the parent's interval, so it can only be a little
  shorter (the two pipe hops, whose cost is the box's: 0.13-0.18 ms idle on a 2-core VM, 0.3 ms
  loaded, 12-16% of a 1-2 ms region). A process whose clock was patched to run slow (or fast)
  shows it in every region at once, where load on the box only ever lengthens the parent's side,
  in bursts that a whole session can fall into (one 2-core round read two honest PR sessions at
  65-73% in the median region of prefill n=128, main at 91%). So: `forged` when, in the quietest
  quarter of the regions (`QUIET`, on both sides), the engine's own time is short of the parent's
  by more than `timing_rel_gap` *and* more than `timing_abs_gap_s` beyond main's own gap in the
  same operations in this round on this GPU (main's sessions run the same harness on the same
  box), or when in the median region it is longer than the parent's by more than
  `timing_rel_over` (impossible for an honest clock; load can only hide it). Main is not
  judged: it is the reference. The rules hold for the whole document and for each group of at
  least `timing_min_group` regions (one operation at one shape, labelled by the parent: "decode
  ctx=4096 w=1"), so a clock patched around one operation only, a minority of the document's
  regions, shows in its own group.
* **outputs**: the timed operations' outputs teacher-forced through main's model (verify.py):
  per generated token and per prefill's argmax, its margin below main's best log-prob. A token
  within `tie_nats` of main's pick agrees. `diverged` ("the timed run computed something else") when
  even the upper end of a one-sided confidence interval (z = `z`) of the agreement is under the
  model's accuracy bar `top1_min`, or the prefill digests' mean KL to main is over `kl_max` (a
  served engine's decode paths' too: server_verify.py, `decode_kl`): a run that took a shortcut
  while timed, replayed a cached answer, returned another prompt's result, or a kernel of one
  path alone that computes something else.
  A served engine's outputs are held against main's server, which batches and splits its work as
  it likes, so main's own outputs of the same session are held against it too (the report's
  baseline margins): where main's own agreement fails the bar itself, the PR may disagree
  `own_factor` times as often as main does (at the ends of both intervals: `own_bar`).
* **turns** (`idle_problem`): what the engine's processes did while it was not its turn, read by
  the parent from outside them (engine/harness/turns.py), and whether inside its requests they
  used more CPU than the cores the session gave them can run (`cores_problem`: on a one-core
  session an engine on two cores would be timed against main's engine on one; the sandbox
  forbids the move, this sees one made anyway); either is `forged`.
The rules live here, their numbers in policy.py's `ForgeryRules` and policy.toml's `[forgery]`; the gate that reports
them is the run gate (a `forged` or `diverged` session is the PR's fault, a REJECT at once).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

from collector.policy import MIN_REGIONS, ForgeryRules, ResolvedPolicy
from collector.samples import samples_of
from engine.harness.protocol import (
    ConcurrentResult,
    IdleReport,
    LongContextResult,
    SweepResult,
    TimingReport,
)

# The slow-clock rule reads this quantile of the regions' gaps: the quietest quarter.
QUIET = 0.25


Regions = Sequence[tuple[float, float]]  # (the parent's seconds, the engine's own) per region


def timing_problem(
    regions: Regions,
    rules: ForgeryRules,
    groups: Sequence[str] = (),
    main: Mapping[str, Regions] | None = None,
) -> str | None:
    """Why the engine process's own timings betray a clock it changed, or None: the median rule
    over the whole document, then over each group of `timing_min_group` regions or more (`groups`:
    one label per region, TimingReport.groups; empty in older documents). `main`: main's regions
    of the same round by group label ("" for unlabelled ones), whose gaps are the box's own pipe
    hops at each shape: the PR's gap counts beyond main's in the same groups."""
    if groups and len(groups) != len(regions):
        raise ValueError(f"{len(groups)} group labels for {len(regions)} timed regions")
    labels = list(groups) or [""] * len(regions)
    by_group: dict[str, list[tuple[float, float]]] = {}
    for region, group in zip(regions, labels, strict=True):
        by_group.setdefault(group, []).append(region)
    judged = [("", list(regions), set(by_group))]
    judged += [
        (g, rs, {g}) for g, rs in by_group.items() if g and len(rs) >= rules.timing_min_group
    ]
    for group, rs, covers in judged:
        base = [r for g in sorted(covers) for r in (main or {}).get(g, ())]
        why = _clock_rules(rs, group, rules, base)
        if why:
            return why
    return None


def _quantile(values: Iterable[float], q: float) -> float:
    """The lower q-quantile: the value below which a fraction q of the others lie."""
    xs = sorted(values)
    return xs[int(q * (len(xs) - 1))]


def _gaps(regions: Regions, q: float) -> tuple[float, float]:
    """The q-quantile region's gap: (relative to the parent's time, seconds)."""
    return (
        _quantile(((parent - own) / parent for parent, own in regions), q),
        _quantile((parent - own for parent, own in regions), q),
    )


def _clock_rules(
    regions: Regions, group: str, rules: ForgeryRules, main: Regions = ()
) -> str | None:
    """The clock rules on one set of regions (`group`: its label, "" for the whole document),
    the gap counted beyond main's in `main` (main's regions of the same operations)."""
    if len(regions) < MIN_REGIONS:
        return None  # too few to tell a clock from one slow pipe hop
    known = len(main) >= MIN_REGIONS
    parent_med = statistics.median(p for p, _ in regions) * 1e3
    own_med = statistics.median(o for _, o in regions) * 1e3
    where = f"{len(regions)} timed regions" + (f" of {group}" if group else "")
    # a slow clock: read in the quietest quarter of the regions on both sides (load only ever
    # lengthens the parent's side, in bursts a whole session can fall into; a patched clock
    # shortens every region)
    rel, absolute = _gaps(regions, QUIET)
    base_rel, base_abs = _gaps(main, QUIET) if known else (0.0, 0.0)
    if rel - base_rel > rules.timing_rel_gap and absolute - base_abs > rules.timing_abs_gap_s:
        beside = f", main's own {(1 - base_rel) * 100:.0f}% there" if known else ""
        return (
            f"the engine's own clock read {(1 - rel) * 100:.0f}% of the collector's in the "
            f"quietest quarter of {where} (median {own_med:.3g} ms against {parent_med:.3g} ms"
            f"{beside}; tolerance {rules.timing_rel_gap * 100:.0f}% and "
            f"{rules.timing_abs_gap_s * 1e3:g} ms{' beyond main' if known else ''}): its clock "
            "was changed"
        )
    # a fast clock: in the median region (load can only hide it)
    rel_median = statistics.median((parent - own) / parent for parent, own in regions)
    if -rel_median > rules.timing_rel_over:
        return (
            f"the engine's own clock read {(1 - rel_median) * 100:.0f}% of the collector's in the "
            f"median of {where} ({own_med:.3g} ms against {parent_med:.3g} ms): longer "
            "than the interval that contains it, so its clock was changed"
        )
    return None


def upper_bound(agree: int, n: int, z: float) -> float:
    """Wilson score upper bound of a proportion."""
    if n == 0:
        return 1.0
    p = agree / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def lower_bound(agree: int, n: int, z: float) -> float:
    """Wilson score lower bound of a proportion."""
    return 1.0 - upper_bound(n - agree, n, z)


def agreeing(margins: list[float], rules: ForgeryRules) -> int:
    """How many of the outputs agree with main's pick: within `tie_nats` of it."""
    return sum(m <= rules.tie_nats for m in margins)


def own_bar(margins: list[float], bar: float, rules: ForgeryRules) -> tuple[float, str]:
    """The agreement bar for a served engine's outputs, with its words: the model's, unless main's
    own outputs of the session (`margins`) fail it themselves, even at the upper end of their
    interval; then the PR may disagree `own_factor` times as often as main does with itself (at
    the lower end of main's agreement)."""
    n = len(margins)
    agree = agreeing(margins, rules)
    if not n or upper_bound(agree, n, rules.z) >= bar:
        return bar, f"bar ≥ {bar}"
    own = max(0.0, 1.0 - rules.own_factor * (1.0 - lower_bound(agree, n, rules.z)))
    return own, (
        f"bar ≥ {own:.3f}: main's own outputs agreed with its server on {agree} of {n}, "
        f"its disagreement allowed {rules.own_factor:g}x"
    )


def output_problem(
    doc: SweepResult | ConcurrentResult | LongContextResult,
    top1_min: float,
    kl_max: float,
    rules: ForgeryRules,
) -> str | None:
    """Why the timed outputs are not main's model's within the accuracy bars, or None."""
    if doc.measured is None:
        return None
    v = doc.measured.verification
    if v is None:
        return "the timed outputs were not verified against main's model"
    parts = []
    for what, margins, own in (
        ("generated tokens", v.decode_margins, v.baseline_decode_margins),
        ("prefills", v.prefill_margins, v.baseline_prefill_margins),
    ):
        n = len(margins)
        agree = agreeing(margins, rules)
        bar, words = own_bar(own, top1_min, rules)
        if n and upper_bound(agree, n, rules.z) < bar:
            parts.append(
                f"{what} agree with main's model on {agree} of {n} ({agree / n:.1%}; {words})"
            )
    for what, kls in (
        ("prefill", v.prefill_kl),
        ("decode-path", v.decode_kl),
        ("batched decode", v.batched_decode_kl),
    ):
        kl = statistics.fmean(kls) if kls else 0.0
        if kl > kl_max:
            parts.append(f"{what} logits KL {kl:.4f} from main's (bar ≤ {kl_max})")
    if not parts:
        return None
    return "the timed run computed something else: " + "; ".join(parts)


SpeedDocument = SweepResult | ConcurrentResult | LongContextResult


def clock_problem(doc: object, rules: ForgeryRules) -> str | None:
    """Why a PR's speed document betrays a clock its engine process changed (`forged`), or None.
    Main's engine, timed beside it in the same session (`baseline`), gives the box's own gaps."""
    if not isinstance(doc, SpeedDocument) or doc.measured is None:
        return None  # a long-context check that died before any timed work: its gate judges it
    timing = doc.measured.timing
    base = getattr(doc, "baseline", None)
    main = regions_by_group(base.timing) if base is not None else None
    return timing_problem(timing.regions, rules, timing.groups, main)


def regions_by_group(timing: TimingReport) -> dict[str, list[tuple[float, float]]]:
    """A timing report's regions by group label ("" for unlabelled ones)."""
    out: dict[str, list[tuple[float, float]]] = {}
    labels = timing.groups or [""] * len(timing.regions)
    for (parent, own), group in zip(timing.regions, labels, strict=True):
        out.setdefault(group, []).append((float(parent), float(own)))
    return out


def idle_problem(doc: object, rules: ForgeryRules) -> str | None:
    """Why the PR's engine worked while it was not its turn (`forged`), or None. The timing
    parent stops an engine's every process after each answer and reads from outside what they
    used meanwhile (engine/harness/turns.py); main's engine beside it is the box's reference."""
    measured = getattr(doc, "measured", None)
    idle = measured.idle if measured is not None else None
    if idle is None:
        return None
    base = getattr(doc, "baseline", None)
    main = base.idle if base is not None else None
    slowest = max(idle.stop_s, default=0.0)
    if slowest >= rules.idle_stop_s:
        return (
            f"its processes could not all be stopped after an answer (one stop took "
            f"{slowest:.2f} s, limit {rules.idle_stop_s:g} s): it works while it is not its turn"
        )
    stopped = sum(idle.while_stopped_s)
    if stopped > rules.idle_cpu_s:
        return (
            f"its processes used {stopped * 1e3:.0f} ms of CPU while stopped between its turns "
            f"(limit {rules.idle_cpu_s * 1e3:.0f} ms): a process escaped the stop"
        )
    beyond = cores_problem(idle, rules)
    if beyond:
        return beyond
    outside = sum(idle.between_s) + sum(idle.after_answer_s)
    beside = sum(main.between_s) + sum(main.after_answer_s) if main else 0.0
    watched = sum(idle.window_s)  # its processes ran with nothing asked (then were stopped)
    limit = max(rules.idle_cpu_s, rules.idle_share * watched)
    if outside - beside > limit:
        return (
            f"its processes kept the CPU busy while it had nothing to do: {outside * 1e3:.0f} ms "
            f"between and after its answers over {len(idle.stop_s)} turns, {watched * 1e3:.0f} ms "
            "of them watched idle"
            + (f"; main's engine beside it {beside * 1e3:.0f} ms" if main else "")
            + f" (limit {limit * 1e3:.0f} ms beyond main's): it works while it is not its turn"
        )
    return device_problem(idle, main, rules)


def cores_problem(idle: IdleReport, rules: ForgeryRules) -> str | None:
    """Why the engine's processes used more CPU inside its requests than the cores the session
    gave them can run in that time, or None. The parent reads the CPU within the wall-clock
    interval of each request, so one core reads at most 1x; documents written before the
    readings have none."""
    if not idle.cores or not idle.request_wall_s:
        return None
    used, wall = sum(idle.request_cpu_s), sum(idle.request_wall_s)
    limit = idle.cores * wall * (1 + rules.core_slack) + rules.idle_cpu_s
    if used <= limit:
        return None
    cores = f"{idle.cores} core" + ("s" if idle.cores != 1 else "")
    return (
        f"its processes used {used:.3f} s of CPU in {wall:.3f} s of its requests "
        f"({used / wall:.2f}x), more than the {cores} the session gave them can run (limit "
        f"{limit:.3f} s): it ran on cores main's engine beside it did not have"
    )


def trimmed_busy(readings: Sequence[float], spare: int) -> float:
    """The GPU's busy seconds after an engine's turns, less its `spare` largest readings."""
    return float(sum(sorted(readings)[: max(len(readings) - spare, 0)]))


def device_problem(idle: IdleReport, main: IdleReport | None, rules: ForgeryRules) -> str | None:
    """Why the GPU's readings after the PR's turns show work it left queued (`forged`), or None.

    Each reading is how long the device stayed busy once the engine had stopped (at least the
    probe's own first launch, ~0.3 ms on the H200). Main's engine beside it gives the box's own
    readings. Each engine's largest `device_spare_turns` readings are left out, no more: another
    process's kernels can land in a turn of either engine, but a spare of a share of the turns
    would let an engine leave work after one turn of each repetition of an axis (its 4-8 turns
    of 100) and move that axis's median unseen. More turns than that on a shared device make
    the session `infra` (shared_device_problem), never a verdict."""
    if not idle.device_busy_s:
        return None
    spare = rules.device_spare_turns
    mains = main.device_busy_s if main is not None else []
    if mains:
        mine = trimmed_busy(idle.device_busy_s, spare)
        beside = trimmed_busy(mains, spare)
    else:  # no readings beside it: what is beyond the probe's own time
        excess = [max(r - rules.device_turn_s, 0.0) for r in idle.device_busy_s]
        mine, beside = trimmed_busy(excess, spare), 0.0
    if mine - beside > rules.idle_cpu_s:
        return (
            f"the GPU stayed busy {mine * 1e3:.0f} ms after its turns ended"
            + (f", main's engine beside it {beside * 1e3:.0f} ms" if mains else "")
            + f" (each one's largest {spare} left out; limit {rules.idle_cpu_s * 1e3:.0f} ms "
            "beyond main's): it works while it is not its turn"
        )
    return None


def shared_device_problem(doc: object, rules: ForgeryRules) -> str | None:
    """Why a paired GPU session ran on a device something else used (`infra`, measured again),
    or None: after more than `device_spare_turns` of the turns of main's engine (main's code,
    honest by definition, every other engine stopped and drained before its turn) the device
    stayed busy beyond the probe's own time (`device_turn_s`: main's own readings reach ~2 ms now
    and then). Then no reading can be laid at either engine's door. One such turn of either
    engine is what the spare in device_problem is for (2026-12-05: the GPU tests beside a round's
    session put 20.5 ms on one of the PR's turns, and an honest PR read `forged` on the sums)."""
    base = getattr(doc, "baseline", None)
    main = base.idle if base is not None else None
    if main is None:
        return None
    busy = [r for r in main.device_busy_s if r > rules.device_turn_s]
    if len(busy) > rules.device_spare_turns:
        return (
            f"the GPU stayed busy after {len(busy)} of {len(main.device_busy_s)} turns of main's "
            f"engine (more than {rules.device_turn_s * 1e3:g} ms, up to {max(busy) * 1e3:.0f} "
            "ms): something beside the two engines used the device during the session"
        )
    return None


def canary_problem(doc: object, limit: float) -> str | None:
    """Why a speed session was measured on a box whose own speed moved under it (the canary
    timed right before and after: `infra`, measured again), or None."""
    measured = getattr(doc, "measured", None)
    canary = measured.canary if measured is not None else None
    if canary is None:
        return None
    moved = max(canary.after_s / canary.before_s, canary.before_s / canary.after_s) - 1
    if moved <= limit:
        return None
    return (
        f"the box's own speed moved during the session: its canary ({canary.workload}) took "
        f"{canary.before_s * 1e3:.3g} ms before and {canary.after_s * 1e3:.3g} ms after "
        f"({moved:+.0%}, limit {limit:.0%}): measured again, never judged"
    )


def implausible_claim(doc: object, gain: float, guard: bool = False) -> str | None:
    """A PR axis beyond `gain` x main's engine beside it, even the PR's slowest sample against
    main's fastest: a broken measurement (`implausible`), or None. `guard`: a guard's sweep."""
    by_axis: dict[str, dict[str, list[float]]] = {}
    for side, ax, _rep, v in samples_of(doc, guard=guard):
        by_axis.setdefault(ax, {}).setdefault(side, []).append(v)
    for ax, sides in sorted(by_axis.items()):
        mine, main = sides.get("pr", []), sides.get("main", [])
        if ax.startswith(("mem", "vram")) or not (mine and main):
            continue
        if min(mine) > gain * max(main):
            ratio = statistics.median(mine) / statistics.median(main)
            return (
                f"{ax} claims {ratio:.0f}x main ({statistics.median(mine):.4g} vs "
                f"{statistics.median(main):.4g} tok/s)"
            )
    return None


def diverged_evidence(doc: object, model: str, policy: ResolvedPolicy) -> str | None:
    """Why a speed document's timed outputs are not main's model's (`diverged`), or None."""
    if not isinstance(doc, SpeedDocument) or doc.measured is None:
        return None
    bars = policy.accuracy.bars(model)
    return output_problem(doc, bars.top1_min, bars.kl_max, policy.forgery)
