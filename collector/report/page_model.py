"""The page model of one PR's verdict: sections of rows, built once here and rendered by
collector/report/render.py as a terminal table or a GitHub-flavoured Markdown comment; its header
facts (`headline`) are the site's PR page header too (site/sitegen/pr_pages.py).

Laid out like the reference comments: a metric/value header, then ctx/phase/main/PR/delta rows
per model, concurrency rows, prefill-path rows, every gate with its reason, and a footer that
states the rules of the round's policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.axes import is_axis, parse_axis, short_ctx
from collector.policy import ResolvedPolicy
from collector.results import Comparison
from collector.store.readout import (
    STATUS_ICONS,
    UNKNOWN_ICON,
    Evaluation,
    ReadoutError,
    prefill_bars,
    real_weights,
)


def emoji(status: str) -> str:
    return STATUS_ICONS.get(status, UNKNOWN_ICON)[0]


@dataclass
class Section:
    title: str | None
    headers: list[str]
    rows: list[list[str]]
    # which cells hold hostile text (row index, column index) -> escaped differently
    hostile_cols: tuple[int, ...] = ()


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.1f}%"


def num(x: float) -> str:
    return f"{x:,.2f}" if x < 1e6 else f"{x:.4g}"


def build_sections(ev: Evaluation) -> tuple[str, list[Section], str]:
    """(heading, sections, footer) of one PR's verdict."""
    head = headline_rows(ev)
    pol = ev.round.policy
    if pol is None:
        raise ReadoutError(f"round {ev.round_id}: its stored policy cannot be read")
    sections = [Section(None, ["metric", "value"], head, hostile_cols=(1,))]
    for role in ("target", "guard"):
        sections += comparison_sections(ev, role, pol)
    sections += prefill_sections(ev, pol)
    return heading(ev), sections, footer(ev, pol)


def heading(ev: Evaluation) -> str:
    label = ev.label
    icon = emoji(
        "pass"
        if label in ("XS", "S", "M", "L", "XL", "none")
        else "fail"
        if label == "REJECT"
        else "warn"
    )
    return f"{icon} sparkboard auto-eval — PR #{ev.pr} — {label}"


@dataclass(frozen=True)
class Fact:
    """One metric/value row of a verdict's header, in plain words (a PR author's text verbatim:
    each renderer escapes it), with what it names so a web page can badge or link it: `kind`
    'label' (ref: the label), 'models' (ref: the model names), 'gate' (ref: its status, which
    the words follow), else 'text'."""

    key: str
    text: str
    kind: str = "text"
    ref: tuple[str, ...] = ()


# facts a PR page shows in its own heading, above the header table
ABOUT_THE_PR = ("title", "author", "labels")


def headline(ev: Evaluation) -> list[Fact]:
    """The header of one verdict, the same wherever it is shown (the comment, `show`, the PR's
    page): the PR, what was scored, the best axis, every gate, accuracy, the commits and
    merge-first."""
    info = ev.info
    targets = list(info["targets"] or [])
    facts = [
        Fact("label", ev.label, "label", (ev.label,)),
        Fact("title", info["title"]),
        Fact("author", info["author"]),
        Fact("labels", ", ".join(info["labels"] or []) or "–"),
        Fact("targets", ", ".join(targets) or "–", "models", tuple(targets)),
    ]
    facts += scored(ev)
    facts += [Fact(_gate_title(g.gate), g.reason, "gate", (g.status,)) for g in ev.gates]
    facts += perplexity(ev)
    facts += commits(ev)
    return facts


def headline_rows(ev: Evaluation) -> list[list[str]]:
    """The header as metric/value text rows (a gate's status as its emoji)."""
    return [
        [f.key, f"{emoji(f.ref[0])} {f.text}" if f.kind == "gate" else f.text] for f in headline(ev)
    ]


def scored(ev: Evaluation) -> list[Fact]:
    """'scored at' (the target axes) and the best axis with its interval."""
    out: list[Fact] = []
    tcomps = [c for c in ev.comparisons if c.role == "target"]
    if tcomps:
        known = [parse_axis(c.axis) for c in tcomps if is_axis(c.axis)]  # stored: any text
        ctxs = sorted({n for kind, n in known if kind != "concurrent"})
        widths = sorted({n for kind, n in known if kind == "concurrent"})
        out.append(
            Fact(
                "scored at",
                f"decode + prefill @ {'/'.join(short_ctx(c) for c in ctxs)}"
                + (f" · concurrent decode @ {'/'.join(f'c{w}' for w in widths)}" if widths else "")
                + f" — {len(tcomps)} axes, each also a regression floor; the label is the best",
            )
        )
    if (b := ev.best) is not None:
        significant = ev.best_significant
        out.append(
            Fact(
                "tier from" if significant else "largest change",
                f"{b.model} {b.axis} ({pct(b.delta)}, 95% CI {pct(b.ci_low)}..{pct(b.ci_high)})"
                + ("" if significant else ", not significant"),
            )
        )
    return out


def perplexity(ev: Evaluation) -> list[Fact]:
    """The perplexity ratio per model (absolute perplexity only with trained weights)."""
    out: list[Fact] = []
    for model, a in ev.accuracy.items():
        ratio = a.ppl_ratio if a.ppl_main else float("nan")
        if real_weights(model):
            value = f"{ratio:.4f} ({a.ppl_pr:.4f} / {a.ppl_main:.4f})"
        else:
            value = f"{ratio:.4f} (dummy weights: absolute perplexity is meaningless)"
        out.append(Fact(f"PPL PR / main — {model}", value))
    return out


def commits(ev: Evaluation) -> list[Fact]:
    """The commit measured, merged onto which main, a candidate not measured, and merge-first."""
    cand = ev.candidate or {}
    commit = (ev.commit or "–")[:9]
    main_commit = (cand.get("main_commit") or ev.round.main_commit or "")[:9]
    merged = (cand.get("merged_commit") or "")[:9]
    out = [
        Fact(
            "commit",
            f"{commit}, measured merged onto main {main_commit} (this round's baseline)"
            + (f" as {merged}" if merged and merged != commit else ""),
        )
    ]
    if cand.get("status") and cand["status"] != "ready":
        out.append(Fact("candidate", f"{cand['status']}: {cand.get('detail') or ''}"))
    out.append(
        Fact(
            "merge-first",
            "yes — the round's best passing speedup, at this exact commit"
            if ev.merge_first
            else "no",
        )
    )
    return out


def comparison_sections(ev: Evaluation, role: str, pol: ResolvedPolicy) -> list[Section]:
    """Per model of `role` (target or guard): its ctx/phase rows, then its concurrency rows."""
    by_model: dict[str, list[Comparison]] = {}
    for c in ev.comparisons:
        if c.role == role:
            by_model.setdefault(c.model, []).append(c)
    sections = []
    for model, cs in by_model.items():
        rows = []
        crow = []
        for c in cs:
            kind, n = parse_axis(c.axis) if is_axis(c.axis) else (c.axis, None)
            cells = [
                num(c.main_value),
                num(c.pr_value),
                f"{pct(c.delta)} [{pct(c.ci_low)}, {pct(c.ci_high)}]",
                c.tier if c.significant else ("below floor" if c.below_floor else "–"),
            ]
            if kind == "concurrent":
                crow.append([f"c{n}", *cells])
            else:  # an axis name this collector does not know: shown as it is stored
                rows.append(["–" if n is None else short_ctx(n), kind, *cells])
        what = "target" if role == "target" else "guard"
        if rows:
            sections.append(
                Section(
                    f"{model} ({what}) — tok/s, median of every repetition; delta with its 95% bootstrap interval",
                    ["ctx", "phase", "main", "PR", "delta [95% CI]", "tier"],
                    rows,
                )
            )
        if crow:
            runs = pol.profile.concurrent_runs
            sections.append(
                Section(
                    f"{model} — concurrent decode, aggregate tok/s with N sequences in flight, median of {runs} complete runs per session",
                    ["concurrency", "main", "PR", "delta [95% CI]", "tier"],
                    crow,
                )
            )
    return sections


def prefill_sections(ev: Evaluation, pol: ResolvedPolicy) -> list[Section]:
    """The prefill-path checks of main and the PR beside the bars the gate allows."""
    by: dict[tuple[str, int], dict[str, tuple[float, float]]] = {}
    for r in ev.prefill:
        by.setdefault((r.model, r.prefix), {}).setdefault(r.side, (r.top1, r.kl_mean))
    rows = []
    for (model, prefix), sides in sorted(by.items()):
        if "main" not in sides or "pr" not in sides:
            continue
        mt, mk = sides["main"]
        pt, pk = sides["pr"]
        top1_bar, kl_bar = prefill_bars(pol, mt, mk)
        rows.append(
            [
                model,
                str(prefix),
                f"{mt:.3f}",
                f"{pt:.3f}",
                f"≥{top1_bar:.3f}",
                f"{mk:.4f}",
                f"{pk:.4f}",
                f"≤{kl_bar:.4f}",
            ]
        )
    if not rows:
        return []
    return [
        Section(
            "Prefill path — batched prefill against the token loop, teacher-forced positions",
            [
                "model",
                "prefix",
                "main top-1",
                "PR top-1",
                "top-1 bar",
                "main KL",
                "PR KL",
                "KL bar",
            ],
            rows,
        )
    ]


def footer(ev: Evaluation, pol: ResolvedPolicy) -> str:
    """The verdict's reason, then the round's rules in words."""
    rules = pol.verdict
    tiers = ", ".join(f"{name} +{gate * 100:g}%" for name, gate in rules.tiers.items())
    if ev.round.sandbox is None:
        how = "against a same-box main from the same round, sessions interleaved. "
    else:
        how = "with main's engine beside the PR's in each session, turn by turn. "
    if ev.round.unsandboxed:
        how += "Unsandboxed round: the PR's code ran with the collector's own rights. "
    return (
        f"{ev.reason}\n\nMeasured on {ev.round.device_name or 'this round’s box'} "
        f"(profile {ev.round.profile}) {how}"
        f"Any axis below {rules.floor * 100:.0f}% of main (beyond the round's noise) is a REJECT; otherwise the "
        f"label is the best significant delta (tiers {tiers}). "
        f"`none` only means no speedup was measured. The round's best passing speedup is merge-first "
        f"(never under a blocking label)."
    )


def _gate_title(name: str) -> str:
    """'floor' -> 'regression floor', 'accuracy:tiny' -> 'accuracy vs main (teacher-forced) — tiny'."""
    fixed = {
        "floor": "regression floor",
        "implausible": "implausible-gain guard",
        "merge": "merge onto main",
    }
    if name in fixed:
        return fixed[name]
    kind, _, model = name.partition(":")
    return (
        {
            "accuracy": f"accuracy vs main (teacher-forced) — {model}",
            "prefill-path": f"prefill path vs main — {model}",
            "guard": f"{model} guard",
            "run": f"run — {model}",
        }.get(kind, name)
        if model
        else name
    )
