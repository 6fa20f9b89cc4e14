"""The verdict rules: comparisons, gates, labels, merge-first. Reads a round, writes its verdict.

Everything is recomputed from the stored raw samples and dumps with the policy stored in the
round, so `sparkboard verdict` gives the same answer as the end of `collect`.

Rules (numbers from the policy; DESIGN.md "Verdict rules"):
* per axis, delta = median(PR) / median(main) - 1 with a bootstrap interval; the noise is how
  far one of main's sessions strays from the main sessions beside it in this round (drift
  taken out, a ratio: timing noise is multiplicative; stats.drift_free_spread; the
  noise_outliers most deviant sessions left out first, while four others remain), never less
  than the profile's calibrated floor for that axis (min_noise, or min_noise_axes where an
  axis needs more), and the band is (1 + noise) ** noise_multiplier;
* each PR session is also compared with the main sessions beside it (stats.local_ratios);
* an axis is significant when delta >= the XS gate, its interval excludes 0, PR / main is above
  the band, and each PR session alone clears the gate; its tier is then the highest gate it
  clears, else 'none';
* an axis is below the floor when PR < floor x main, its interval is wholly below 0, PR / main
  is under 1 / band, and each PR session alone is under the floor (so main against itself, or
  one session in a burst of load, never trips it); any such axis is a REJECT, on a target
  model or a guard;
* the PR's slowest sample > implausible_gain x main's fastest on any axis: REJECT as a broken
  measurement;
* accuracy vs main and the prefill path must pass on every target model;
* the label is the strongest significant target axis's tier: gains are never summed;
* a PR failure that may be flaky (timeout, death by signal, lost tokens) is a strike; the
  REJECT needs the same failure at the same commit in `strikes_to_reject` rounds. A crash with
  an error exit, garbage output or an implausible claim is a REJECT at once. Infrastructure
  (main failing, no device, no disk) is never a REJECT: the PR is 'pending';
* merge-first: the round's best passing speedup, never a PR with a blocking label.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from collector.accuracy import AccuracyError, compare_dumps
from collector.axes import axis, axis_sort_key
from collector.merge import DUMPS_LEFT_OUT
from collector.policy import Policy, ResolvedPolicy, resolve
from collector.schedule import guards_of
from collector.stats import (
    Slotted,
    bootstrap_delta_ci,
    drift_free_spread,
    is_implausible,
    local_ratios,
    median,
    seed_for,
)
from collector.store import Store

TIERS = ("XS", "S", "M", "L", "XL")
EPS = 1e-12


@dataclass
class Comparison:
    model: str
    role: str
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


@dataclass
class Gate:
    gate: str
    status: str  # pass | fail | warn | skip
    reason: str


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
    accuracy: list[tuple] = field(default_factory=list)
    strikes: list[tuple] = field(default_factory=list)


def pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def compare_axis(
    policy: ResolvedPolicy,
    model: str,
    role: str,
    ax: str,
    main_vals: list[float],
    pr_vals: list[float],
    main_sessions: Slotted,
    pr_sessions: Slotted | None = None,
) -> Comparison:
    """One axis, PR against main; sessions are (slot, median) pairs. A gain (or a loss) must
    also hold in each PR session alone, against main's sessions beside it: one session that ran
    during a burst of load elsewhere on the box decides nothing, and slow drift cancels."""
    v = policy.verdict
    d, lo, hi = bootstrap_delta_ci(
        main_vals,
        pr_vals,
        v.bootstrap_resamples,
        v.confidence,
        seed_for(v.bootstrap_seed, model, ax),
    )
    noise = max(drift_free_spread(main_sessions, v.noise_outliers), policy.profile.noise_floor(ax))
    band = (1 + noise) ** v.noise_multiplier  # beyond main's own spread, multiplier times over
    main_med = median(main_vals)
    per_session = (
        [r - 1 for r in local_ratios(main_sessions, pr_sessions)]
        if pr_sessions
        else [median(pr_vals) / main_med - 1]
    )
    significant = (
        d >= v.gate - EPS and lo > 0 and (1 + d) > band and min(per_session) >= v.gate - EPS
    )
    below = (
        (1 + d) < v.floor - EPS
        and hi < 0
        and (1 + d) < 1 / band
        and max(per_session) < v.floor - 1 - EPS
    )
    return Comparison(
        model=model,
        role=role,
        axis=ax,
        main_value=main_med,
        pr_value=median(pr_vals),
        delta=d,
        ci_low=lo,
        ci_high=hi,
        noise=noise,
        tier=v.tier(d) if significant else "none",
        significant=significant,
        below_floor=below,
        implausible=is_implausible(main_vals, pr_vals, v.implausible_gain),
        n_main=len(main_vals),
        n_pr=len(pr_vals),
    )


class RoundData:
    """Everything a round's verdict needs, read once."""

    def __init__(self, store: Store, round_id: str) -> None:
        rows = store.query_dicts("SELECT * FROM rounds WHERE round_id = ?", [round_id])
        if not rows:
            raise LookupError(f"no round {round_id!r} in {store.path}")
        self.round = rows[0]
        self.policy = ResolvedPolicy.model_validate_json(self.round["policy_json"])
        self.prs = store.query_dicts("SELECT * FROM prs WHERE round_id = ? ORDER BY pr", [round_id])
        self.candidates = {
            c["pr"]: c
            for c in store.query_dicts("SELECT * FROM candidates WHERE round_id = ?", [round_id])
        }
        self.sessions = store.query_dicts(
            "SELECT session_id, side, pr, slot, kind, model, status, fault, detail, exit_code "
            "FROM sessions WHERE round_id = ? ORDER BY slot, session_id",
            [round_id],
        )
        self.slots = {s["session_id"]: s["slot"] for s in self.sessions}
        # keyed by the shape of the run too: a guard sweep (one context in a fresh process) and
        # a full sweep reach the same context in different process states, and are only ever
        # compared like with like
        self.samples: dict[tuple, list[tuple[str, float]]] = defaultdict(list)
        for sid, side, pr, model, ax, kind, val in store.query(
            "SELECT s.session_id, s.side, s.pr, s.model, s.axis, x.kind, s.value FROM samples s "
            "JOIN sessions x USING (session_id) WHERE s.round_id = ? "
            "AND x.status IN ('ok', 'implausible', 'incomplete') ORDER BY s.session_id, s.axis, s.rep",
            [round_id],
        ):
            shape = "guard" if kind == "guard" else "full"
            self.samples[(side, pr, model, ax, shape)].append((sid, val))
        self.dumps: dict[tuple, list[str]] = defaultdict(list)
        for side, pr, model, doc in store.query(
            "SELECT d.side, d.pr, d.model, d.document FROM score_dumps d JOIN sessions x "
            "USING (session_id) WHERE d.round_id = ? ORDER BY x.slot",
            [round_id],
        ):
            self.dumps[(side, pr, model)].append(doc)
        self.checks: dict[tuple, dict[int, tuple[float, float]]] = defaultdict(dict)
        for side, pr, model, prefix, top1, kl in store.query(
            "SELECT c.side, c.pr, c.model, c.prefix, c.top1, c.kl_mean FROM prefill_checks c "
            "JOIN sessions x USING (session_id) WHERE c.round_id = ? ORDER BY x.slot DESC",
            [round_id],
        ):
            self.checks[(side, pr, model)][prefix] = (top1, kl)  # the earliest session wins

    def values(self, side: str, pr: int, model: str, ax: str, shape: str = "full") -> list[float]:
        return [v for _, v in self.samples.get((side, pr, model, ax, shape), [])]

    def session_medians(
        self, model: str, ax: str, side: str = "main", pr: int = 0, shape: str = "full"
    ) -> list[tuple[int, float]]:
        """(slot, median) of each session on one axis, in schedule order."""
        by: dict[str, list[float]] = defaultdict(list)
        for sid, v in self.samples.get((side, pr, model, ax, shape), []):
            by[sid].append(v)
        return sorted((self.slots[sid], median(v)) for sid, v in by.items())

    def axes(self, side: str, pr: int, model: str, shape: str = "full") -> set[str]:
        return {
            k[3]
            for k in self.samples
            if k[0] == side and k[1] == pr and k[2] == model and k[4] == shape
        }

    def main_guard_shape(self, model: str, ax: str) -> str:
        """Main's runs to hold a PR's guard sweep against: main's own guard sweeps, or (rounds
        collected before main ran them for models that some PR targets) its full sweeps."""
        return "guard" if self.samples.get(("main", 0, model, ax, "guard")) else "full"


def _strike_count(store: Store, pr: int, commit: str, key: str, round_id: str) -> int:
    rows = store.query(
        "SELECT count(DISTINCT round_id) FROM strikes WHERE pr = ? AND commit = ? AND failure_key = ? "
        "AND round_id <> ?",
        [pr, commit, key, round_id],
    )
    return int(rows[0][0]) + 1  # this round's strike counts too


def decide_pr(store: Store, data: RoundData, prow: dict) -> Verdict:
    pol = data.policy
    n = prow["pr"]
    cand = data.candidates.get(n)
    rid = data.round["round_id"]
    main_short = data.round["main_commit"][:9]
    if cand is None:
        return Verdict(n, None, "pending", "not yet checked out in this round")
    commit = cand["pr_commit"]
    if cand["status"] in ("needs-rebase", "harness-touched"):
        why = cand["detail"] or cand["status"]
        if cand["status"] == "needs-rebase":
            reason = f"Not measured: {why}. Rebase onto main {main_short} and push again."
        else:
            reason = f"Not measured: {why}. Harness files are pinned from main; move that change to its own PR."
        return Verdict(n, commit, cand["status"], reason, gates=[Gate("merge", "fail", reason)])
    if cand["status"] != "ready":
        return Verdict(
            n,
            commit,
            "pending",
            f"Not measured: {cand['detail'] or 'checkout failed'} (will retry).",
        )

    v = Verdict(n, commit, "none", "")
    targets = list(prow["targets"])
    guards = guards_of(targets, pol.profile)
    mine = [s for s in data.sessions if s["side"] == "pr" and s["pr"] == n]
    gates: list[Gate] = []
    hard: list[str] = []
    soft: list[str] = []

    # run:<model> - did every session of this PR (and the main ones it needs) finish?
    for model in targets + guards:
        failed = [s for s in mine if s["model"] == model and s["status"] != "ok"]
        main_bad = [
            s
            for s in data.sessions
            if s["side"] == "main" and s["model"] == model and s["status"] != "ok"
        ]
        ran = [s for s in mine if s["model"] == model]
        if not ran:
            gates.append(Gate(f"run:{model}", "warn", "not measured yet"))
            soft.append(f"{model} not measured yet")
            continue
        reasons = []
        status = "pass"
        for s in failed:
            what = f"{s['kind']} {s['status']}: {s['detail']}"
            if s["fault"] == "infra":
                status = "warn" if status != "fail" else status
                soft.append(f"{model} {s['kind']}: infrastructure ({s['detail']})")
                soft[:] = list(dict.fromkeys(soft))
                reasons.append(f"infrastructure, will retry: {what}")
                continue
            flaky = s["status"] in ("timeout", "incomplete") or (
                s["status"] == "crash" and (s["exit_code"] is None or s["exit_code"] < 0)
            )
            if flaky and commit:
                key = f"{s['status']}:{s['kind']}:{model}"
                v.strikes.append((n, commit, key, rid, s["detail"]))
                count = _strike_count(store, n, commit, key, rid)
                need = pol.verdict.strikes_to_reject
                if count >= need:
                    status = "fail"
                    hard.append(
                        f"{model} {s['kind']} {s['status']} in {count} rounds at this commit ({s['detail']})"
                    )
                    reasons.append(f"{what} (strike {count} of {need})")
                else:
                    status = "warn" if status != "fail" else status
                    soft.append(
                        f"{model} {s['kind']} {s['status']} (strike {count} of {need}; "
                        f"the same failure at this commit next round is a REJECT)"
                    )
                    reasons.append(f"{what} (strike {count} of {need}, may be flaky)")
            else:
                status = "fail"
                if s["status"] == "implausible":
                    hard.append(f"{model} {s['kind']}: broken measurement, {s['detail']}")
                else:
                    hard.append(f"{model} {s['kind']} {s['status']}: {s['detail']}")
                reasons.append(what)
        main_ok_kinds = {
            s["kind"]
            for s in data.sessions
            if s["side"] == "main" and s["model"] == model and s["status"] == "ok"
        }
        for kind in sorted({s["kind"] for s in main_bad} - main_ok_kinds):
            status = "warn" if status != "fail" else status
            soft.append(
                f"main could not be measured on {model} {kind} (infrastructure, will retry)"
            )
            reasons.append(f"main failed on {kind}: infrastructure, will retry")
        gates.append(Gate(f"run:{model}", status, "; ".join(reasons) or "every session finished"))

    # comparisons
    comps: list[Comparison] = []
    for model, role in [(m, "target") for m in targets] + [(m, "guard") for m in guards]:
        pr_shape = "full" if role == "target" else "guard"
        # each axis compared, with the shape of main's runs it is held against
        if role == "target":
            main_shapes = {
                a: "full" for a in data.axes("pr", n, model) & data.axes("main", 0, model)
            }
        else:
            g = pol.profile.guard_ctx_for(model)
            wanted = {axis("decode", g), axis("prefill", g)} & data.axes("pr", n, model, "guard")
            main_shapes = {a: data.main_guard_shape(model, a) for a in wanted}
            main_shapes = {
                a: s for a, s in main_shapes.items() if data.values("main", 0, model, a, s)
            }
        for ax in sorted(main_shapes, key=axis_sort_key):
            main_shape = main_shapes[ax]
            comps.append(
                compare_axis(
                    pol,
                    model,
                    role,
                    ax,
                    data.values("main", 0, model, ax, main_shape),
                    data.values("pr", n, model, ax, pr_shape),
                    data.session_medians(model, ax, shape=main_shape),
                    data.session_medians(model, ax, "pr", n, pr_shape),
                )
            )
    v.comparisons = comps
    tcomps = [c for c in comps if c.role == "target"]

    floor = [c for c in tcomps if c.below_floor]
    if floor:
        txt = "; ".join(
            f"{c.axis} on {c.model} is {(1 + c.delta) * 100:.1f}% of main ({pct(c.delta)}, CI {pct(c.ci_low)}..{pct(c.ci_high)})"
            for c in floor
        )
        gates.append(
            Gate("floor", "fail", f"below the {pol.verdict.floor * 100:.0f}% floor: {txt}")
        )
        hard.append(f"regression below the {pol.verdict.floor * 100:.0f}% floor: {txt}")
    elif tcomps:
        worst = min(tcomps, key=lambda c: c.delta)
        gates.append(
            Gate(
                "floor",
                "pass",
                f"no axis below {pol.verdict.floor * 100:.0f}% of main (worst {worst.axis} on {worst.model} {pct(worst.delta)})",
            )
        )
    implaus = [c for c in comps if c.implausible]
    if implaus:
        txt = "; ".join(f"{c.axis} on {c.model} at {1 + c.delta:.0f}x main" for c in implaus)
        gates.append(
            Gate(
                "implausible",
                "fail",
                f"gain beyond {pol.verdict.implausible_gain:.0f}x main: {txt}",
            )
        )
        hard.append(
            f"broken measurement: {txt} (beyond the {pol.verdict.implausible_gain:.0f}x implausible-gain guard)"
        )

    # accuracy:<model> and prefill-path:<model>
    for model in targets:
        gname = f"accuracy:{model}"
        main_dumps = data.dumps.get(("main", 0, model), [])
        pr_dumps = data.dumps.get(("pr", n, model), [])
        if not main_dumps:
            gates.append(Gate(gname, "warn", "main's score dump is missing (infrastructure)"))
            soft.append(f"main's score of {model} is missing")
        elif not pr_dumps:
            gates.append(Gate(gname, "skip", "no score dump from the PR (see run gate)"))
        else:
            import json

            bars = pol.accuracy.bars(model)
            try:
                acc = compare_dumps(json.loads(main_dumps[0]), json.loads(pr_dumps[0]))
            except AccuracyError as e:
                gates.append(Gate(gname, "fail", str(e)))
                hard.append(f"accuracy on {model}: {e}")
            else:
                v.accuracy.append((n, model, acc))
                ok = (
                    acc.top1 >= bars.top1_min - EPS
                    and acc.kl <= bars.kl_max + EPS
                    and acc.ppl_ratio <= bars.ppl_ratio_max + EPS
                )
                txt = (
                    f"top-1 {acc.top1:.4f} (bar ≥{bars.top1_min}) · KL {acc.kl:.5f} (bar ≤{bars.kl_max}) · "
                    f"PPL ×{acc.ppl_ratio:.4f} of main (bar ≤{bars.ppl_ratio_max}) over {acc.n_tokens} tokens"
                )
                gates.append(Gate(gname, "pass" if ok else "fail", txt))
                if not ok:
                    hard.append(f"accuracy vs main broke on {model}: {txt}")
        gname = f"prefill-path:{model}"
        mc = data.checks.get(("main", 0, model))
        pc = data.checks.get(("pr", n, model))
        if not mc:
            gates.append(Gate(gname, "warn", "main's prefill check is missing (infrastructure)"))
            soft.append(f"main's prefill check of {model} is missing")
        elif not pc:
            gates.append(Gate(gname, "skip", "no prefill check from the PR (see run gate)"))
        else:
            pp = pol.prefill_path
            bad, parts = [], []
            for prefix in sorted(mc):
                if prefix not in pc:
                    bad.append(f"prefix {prefix} missing")
                    continue
                mt, mk = mc[prefix]
                pt, pk = pc[prefix]
                tbar = mt - pp.top1_margin
                kbar = max(pp.kl_factor * mk, mk + pp.kl_margin)
                parts.append(
                    f"P={prefix}: top-1 {pt:.3f} (bar ≥{tbar:.3f}), KL {pk:.4f} (bar ≤{kbar:.4f})"
                )
                if pt < tbar - EPS or pk > kbar + EPS:
                    bad.append(
                        f"prefix {prefix}: top-1 {pt:.3f} vs bar {tbar:.3f}, KL {pk:.4f} vs bar {kbar:.4f}"
                    )
            if bad:
                gates.append(Gate(gname, "fail", "; ".join(bad)))
                hard.append(
                    f"batched prefill disagrees with the token loop on {model}: {'; '.join(bad)}"
                )
            else:
                gates.append(Gate(gname, "pass", "; ".join(parts)))

    for model in guards:
        gc = [c for c in comps if c.role == "guard" and c.model == model]
        bad = [c for c in gc if c.below_floor]
        if bad:
            txt = ", ".join(
                f"{c.axis} {pct(c.delta)} (CI {pct(c.ci_low)}..{pct(c.ci_high)})" for c in bad
            )
            gates.append(Gate(f"guard:{model}", "fail", f"regressed: {txt}"))
            hard.append(f"no-regression guard {model} regressed: {txt}")
        elif gc:
            gates.append(
                Gate(
                    f"guard:{model}",
                    "pass",
                    "no regression (" + ", ".join(f"{c.axis} {pct(c.delta)}" for c in gc) + ")",
                )
            )
        else:
            gates.append(Gate(f"guard:{model}", "warn", "not measured"))
            soft.append(f"guard {model} not measured")

    v.gates = gates
    sig = [c for c in tcomps if c.significant]
    best = (
        max(sig, key=lambda c: (TIERS.index(c.tier), c.delta))
        if sig
        else (max(tcomps, key=lambda c: c.delta) if tcomps else None)
    )
    v.best = best
    if hard:
        v.label = "REJECT"
        v.reason = "Rejected — " + "; ".join(dict.fromkeys(hard)) + "."
    elif soft:
        v.label = "pending"
        v.reason = "Pending — " + "; ".join(dict.fromkeys(soft)) + "."
    elif sig:
        assert best is not None
        v.label = best.tier
        v.reason = (
            f"{best.axis} on {best.model} {pct(best.delta)} (95% CI {pct(best.ci_low)}..{pct(best.ci_high)}) "
            f"clears the {best.tier} gate (+{pol.verdict.tiers[best.tier] * 100:g}%) and the round's noise "
            f"({best.noise * 100:.1f}%); every gate passed."
        )
    else:
        v.label = "none"
        v.reason = (
            f"No axis cleared both the +{pol.verdict.gate * 100:g}% gate and the round's noise"
            + (
                f" (best {best.axis} on {best.model} {pct(best.delta)}, noise {best.noise * 100:.1f}%)"
                if best
                else ""
            )
            + "; every gate passed."
        )
    return v


def choose_merge_first(
    verdicts: list[Verdict], prs: dict[int, dict], policy: ResolvedPolicy
) -> int | None:
    blocking = {b.lower() for b in policy.verdict.blocking_labels}
    eligible = [
        v
        for v in verdicts
        if v.label in TIERS
        and v.best is not None
        and not any(lb.lower() in blocking for lb in prs[v.pr]["labels"])
    ]
    if not eligible:
        return None
    return max(eligible, key=lambda v: (v.best.delta, -v.pr)).pr  # type: ignore[union-attr]


def calibration(data: RoundData) -> list[tuple]:
    """Main against main for every model main scored twice: the accuracy row with pr = 0."""
    import json

    out = []
    for (side, _pr, model), docs in sorted(data.dumps.items()):
        if side == "main" and len(docs) >= 2:
            try:
                out.append((0, model, compare_dumps(json.loads(docs[0]), json.loads(docs[1]))))
            except AccuracyError:
                continue
    return out


def _require_dumps(store: Store, round_id: str) -> None:
    """A round published without its score dumps cannot be judged again: say so."""
    if store.query("SELECT 1 FROM schema_meta WHERE key = ?", [DUMPS_LEFT_OUT + round_id]):
        raise LookupError(
            f"{store.path} was published without score dumps (the teacher-forced logits): the "
            f"verdicts of round {round_id} stand as stored; re-judge it in the database its "
            "collector wrote"
        )


def adopt_policy(store: Store, round_id: str, policy: Policy) -> None:
    """Judge a round from now on under `policy` (its profile re-resolved), e.g. once A/A rounds
    have calibrated the gates; the round records the policy it is judged under."""
    rows = store.query("SELECT profile FROM rounds WHERE round_id = ?", [round_id])
    if not rows:
        raise LookupError(f"no round {round_id!r} in {store.path}")
    _require_dumps(store, round_id)
    resolved = resolve(policy, rows[0][0])
    with store.transaction() as con:
        con.execute(
            "UPDATE rounds SET policy_json = ? WHERE round_id = ?",
            [resolved.model_dump_json(), round_id],
        )


def decide_round(store: Store, round_id: str) -> list[Verdict]:
    _require_dumps(store, round_id)
    data = RoundData(store, round_id)
    verdicts = [decide_pr(store, data, p) for p in data.prs]
    winner = choose_merge_first(verdicts, {p["pr"]: p for p in data.prs}, data.policy)
    for v in verdicts:
        v.merge_first = v.pr == winner
    decided = datetime.now(UTC).replace(tzinfo=None)
    with store.transaction() as con:
        for table in ("comparisons", "gates", "verdicts", "accuracy"):
            con.execute(f"DELETE FROM {table} WHERE round_id = ?", [round_id])
        for pr, model, acc in calibration(data) + [a for v in verdicts for a in v.accuracy]:
            con.execute(
                "INSERT INTO accuracy VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [round_id, pr, model, acc.n_tokens, acc.top1, acc.kl, acc.ppl_main, acc.ppl_pr],
            )
        for v in verdicts:
            for c in v.comparisons:
                con.execute(
                    "INSERT INTO comparisons (round_id, pr, model, role, axis, main_value, pr_value, "
                    "delta, ci_low, ci_high, noise, tier, significant, below_floor, implausible, "
                    "n_main, n_pr) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        round_id,
                        v.pr,
                        c.model,
                        c.role,
                        c.axis,
                        c.main_value,
                        c.pr_value,
                        c.delta,
                        c.ci_low,
                        c.ci_high,
                        c.noise,
                        c.tier,
                        c.significant,
                        c.below_floor,
                        c.implausible,
                        c.n_main,
                        c.n_pr,
                    ],
                )
            for g in v.gates:
                con.execute(
                    "INSERT INTO gates VALUES (?, ?, ?, ?, ?)",
                    [round_id, v.pr, g.gate, g.status, g.reason],
                )
            b = v.best
            con.execute(
                "INSERT INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    round_id,
                    v.pr,
                    v.commit,
                    v.label,
                    b.model if b else None,
                    b.axis if b else None,
                    b.delta if b else None,
                    b.ci_low if b else None,
                    b.ci_high if b else None,
                    v.reason,
                    v.merge_first,
                    decided,
                ],
            )
            for s in v.strikes:
                con.execute("INSERT OR IGNORE INTO strikes VALUES (?, ?, ?, ?, ?)", list(s))
    return verdicts
