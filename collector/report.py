"""A verdict as a terminal table, a GitHub-flavoured Markdown comment, or JSON.

One model of the page (sections of rows) renders three ways, laid out like the reference
comments: a metric/value header, then ctx/phase/main/PR/delta rows, concurrency rows,
prefill-path rows, and every gate with its reason. Hostile strings (title, author, labels,
failure details) are escaped for Markdown and stripped of control characters for a terminal.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from collector.axes import parse_axis, short_ctx
from collector.readout import (
    STATUS_ICONS,
    UNKNOWN_ICON,
    Evaluation,
    ReadoutError,
    prefill_bars,
    real_weights,
)

ReportError = ReadoutError  # a round or PR the database does not hold


def emoji(status: str) -> str:
    return STATUS_ICONS.get(status, UNKNOWN_ICON)[0]


# --- escaping ---------------------------------------------------------------------------------

_CTRL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def term_safe(s: object) -> str:
    """No escape sequences, no bidi overrides, one line."""
    return _CTRL.sub(lambda m: " " if m.group() in "\n\r\t" else "?", str(s))


_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_escape(s: object) -> str:
    """A hostile string as inert inline Markdown: no HTML, links, mentions, code or table breaks."""
    t = term_safe(s)
    t = t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    t = _MD_SPECIAL.sub(r"\\\1", t)
    # no @mentions, no #123 references, no autolinked URLs
    t = t.replace("#", "&#35;").replace("@", "&#64;").replace("://", "&#58;//")
    t = re.sub(r"(?i)www\.", "www&#46;", t)
    return t


def md_code(s: str) -> str:
    """Inline code for our own short strings (labels, commits): never contains a backtick."""
    return "`" + s.replace("`", "'") + "`"


# --- the page model ---------------------------------------------------------------------------


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
    label = ev.label
    v = ev.verdict or {}
    info = ev.info
    icon = emoji(
        "pass"
        if label in ("XS", "S", "M", "L", "XL", "none")
        else "fail"
        if label == "REJECT"
        else "warn"
    )
    heading = f"{icon} sparkboard auto-eval — PR #{ev.pr} — {label}"
    head: list[list[str]] = [
        ["label", label],
        ["title", info["title"]],
        ["author", info["author"]],
        ["labels", ", ".join(info["labels"] or []) or "–"],
        ["targets", ", ".join(info["targets"] or [])],
    ]
    comps = ev.comparisons
    tcomps = [c for c in comps if c["role"] == "target"]
    if tcomps:
        ctxs = sorted(
            {parse_axis(c["axis"])[1] for c in tcomps if not c["axis"].startswith("concurrent")}
        )
        widths = sorted(
            {parse_axis(c["axis"])[1] for c in tcomps if c["axis"].startswith("concurrent")}
        )
        head.append(
            [
                "scored at",
                f"decode + prefill @ {'/'.join(short_ctx(c) for c in ctxs)}"
                + (f" · concurrent decode @ {'/'.join(f'c{w}' for w in widths)}" if widths else "")
                + f" — {len(tcomps)} axes, each also a regression floor; the label is the best",
            ]
        )
    if v.get("best_axis"):
        significant = ev.best_significant
        head.append(
            [
                "tier from" if significant else "largest change",
                f"{v['best_model']} {v['best_axis']} ({pct(v['best_delta'])}, 95% CI {pct(v['ci_low'])}..{pct(v['ci_high'])})"
                + ("" if significant else ", not significant"),
            ]
        )
    for g in ev.gates:
        head.append([_gate_title(g["gate"]), f"{emoji(g['status'])} {g['reason']}"])
    for a in ev.accuracy:
        ratio = a["ppl_pr"] / a["ppl_main"] if a["ppl_main"] else float("nan")
        if real_weights(a["model"]):
            value = f"{ratio:.4f} ({a['ppl_pr']:.4f} / {a['ppl_main']:.4f})"
        else:
            value = f"{ratio:.4f} (dummy weights: absolute perplexity is meaningless)"
        head.append([f"PPL PR / main — {a['model']}", value])
    cand = ev.candidate or {}
    commit = (ev.commit or "–")[:9]
    main_commit = (ev.round.main_commit or "")[:9]
    merged = (cand.get("merged_commit") or "")[:9]
    head.append(
        [
            "commit",
            f"{commit}, measured merged onto main {main_commit} (this round's baseline)"
            + (f" as {merged}" if merged and merged != commit else ""),
        ]
    )
    head.append(
        [
            "merge-first",
            "yes — the round's best passing speedup, at this exact commit"
            if ev.merge_first
            else "no",
        ]
    )
    pol = ev.round.policy
    if pol is None:
        raise ReadoutError(f"round {ev.round_id}: its stored policy cannot be read")
    sections = [Section(None, ["metric", "value"], head, hostile_cols=(1,))]

    for role in ("target", "guard"):
        by_model: dict[str, list[dict]] = {}
        for c in comps:
            if c["role"] == role:
                by_model.setdefault(c["model"], []).append(c)
        for model, cs in by_model.items():
            rows = []
            crow = []
            for c in cs:
                kind, n = parse_axis(c["axis"])
                cells = [
                    num(c["main_value"]),
                    num(c["pr_value"]),
                    f"{pct(c['delta'])} [{pct(c['ci_low'])}, {pct(c['ci_high'])}]",
                    c["tier"] if c["significant"] else ("below floor" if c["below_floor"] else "–"),
                ]
                if kind == "concurrent":
                    crow.append([f"c{n}", *cells])
                else:
                    rows.append([short_ctx(n), kind, *cells])
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
    pre = ev.prefill
    if pre:
        by: dict[tuple[str, int], dict[str, tuple[float, float]]] = {}
        for r in pre:
            by.setdefault((r["model"], r["prefix"]), {}).setdefault(
                r["side"], (r["top1"], r["kl_mean"])
            )
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
        if rows:
            sections.append(
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
            )
    rules = pol.verdict
    tiers = ", ".join(f"{name} +{gate * 100:g}%" for name, gate in rules.tiers.items())
    footer = (
        f"{ev.reason}\n\nMeasured on {ev.round.device_name or 'this round’s box'} "
        f"(profile {ev.round.profile}) against a same-box main from the same round, sessions interleaved. "
        f"Any axis below {rules.floor * 100:.0f}% of main (beyond the round's noise) is a REJECT; otherwise the "
        f"label is the best significant delta (tiers {tiers}). "
        f"`none` only means no speedup was measured. The round's best passing speedup is merge-first "
        f"(never under a blocking label)."
    )
    return heading, sections, footer


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


# --- renderers ----------------------------------------------------------------------------------


def _width(s: str) -> int:
    return sum(
        2 if unicodedata.east_asian_width(ch) in "WF" else (0 if unicodedata.combining(ch) else 1)
        for ch in s
    )


def _term_table(sec: Section) -> str:
    rows = [[term_safe(c) for c in r] for r in sec.rows]
    cols = len(sec.headers)
    widths = [max([_width(sec.headers[i])] + [_width(r[i]) for r in rows]) for i in range(cols)]
    widths[-1] = min(widths[-1], 200)

    def line(cells: list[str]) -> str:
        return "  ".join(
            c + " " * max(0, widths[i] - _width(c)) for i, c in enumerate(cells)
        ).rstrip()

    out = [line(sec.headers), "  ".join("─" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def render_terminal(ev: Evaluation) -> str:
    heading, sections, footer = build_sections(ev)
    parts = [term_safe(heading), ""]
    for s in sections:
        if s.title:
            parts += [s.title, ""]
        parts += [_term_table(s), ""]
    parts.append(term_safe(footer.split("\n\n")[0]))
    return "\n".join(parts) + "\n"


def _md_table(sec: Section) -> str:
    def cell(i: int, c: str) -> str:
        return md_escape(c)

    out = [
        "| " + " | ".join(md_escape(h) for h in sec.headers) + " |",
        "|" + "|".join("---" for _ in sec.headers) + "|",
    ]
    for r in sec.rows:
        out.append("| " + " | ".join(cell(i, c) for i, c in enumerate(r)) + " |")
    return "\n".join(out)


def render_markdown(ev: Evaluation) -> str:
    heading, sections, footer = build_sections(ev)
    icon = heading.split(" ", 1)[0]
    parts = [f"### {icon} sparkboard auto-eval — {md_code(ev.label)} — PR \\#{ev.pr}", ""]
    for s in sections:
        if s.title:
            parts += [f"**{md_escape(s.title)}**", ""]
        parts += [_md_table(s), ""]
    reason, rest = footer.split("\n\n", 1)
    parts += [md_escape(reason), "", "<sub>" + md_escape(rest) + "</sub>"]
    return "\n".join(parts) + "\n"


def to_json(ev: Evaluation) -> dict[str, Any]:
    """One PR's verdict as plain data (hostile strings verbatim: JSON escapes them)."""
    v = ev.verdict or {}
    info = ev.info
    cand = ev.candidate or {}
    return {
        "round": ev.round_id,
        "pr": ev.pr,
        "title": info["title"],
        "author": info["author"],
        "labels": list(info["labels"] or []),
        "targets": list(info["targets"] or []),
        "commit": ev.commit,
        "merged_commit": cand.get("merged_commit"),
        "main_commit": ev.round.main_commit,
        "label": ev.label,
        "reason": ev.reason,
        "merge_first": ev.merge_first,
        "expect": info.get("expect"),
        "candidate": cand.get("status"),
        "best": None if not v.get("best_axis") else {k: v[c] for k, c in _BEST.items()},
        "gates": [{k: g[k] for k in ("gate", "status", "reason")} for g in ev.gates],
        "comparisons": [{k: c[k] for k in _COMPARISON} for c in ev.comparisons],
        "accuracy": [
            {k: a[k] for k in ("model", "n_tokens", "top1", "kl", "ppl_main", "ppl_pr")}
            for a in ev.accuracy
        ],
    }


_BEST = {"model": "best_model", "axis": "best_axis", "delta": "best_delta"} | {
    k: k for k in ("ci_low", "ci_high")
}
_COMPARISON = (
    "model",
    "role",
    "axis",
    "main_value",
    "pr_value",
    "delta",
    "ci_low",
    "ci_high",
    "noise",
    "tier",
    "significant",
    "below_floor",
    "implausible",
)


# --- cost ---------------------------------------------------------------------------------------


def render_cost(cost: Any) -> str:
    """A round's device time (collector.cost.RoundCost) as terminal tables, in minutes."""
    from collector.cost import minutes

    per = cost.per_pr_s
    head = (
        f"round {term_safe(cost.round_id)}: {minutes(cost.total_s)} device minutes, "
        f"{len(cost.prs)} PRs measured"
        + (f", {minutes(per)} min per PR" if per is not None else "")
        + f" (main {minutes(cost.main_s)} min over {cost.main_sessions} sessions, shared evenly)"
    )
    kinds = list(dict.fromkeys([*cost.main_by_kind, *cost.pr_by_kind]))
    where = Section(
        "Where the time goes (minutes)",
        ["kind", "main", "PRs", "total"],
        [
            [
                k,
                minutes(cost.main_by_kind.get(k, 0.0)),
                minutes(cost.pr_by_kind.get(k, 0.0)),
                minutes(cost.main_by_kind.get(k, 0.0) + cost.pr_by_kind.get(k, 0.0)),
            ]
            for k in kinds
        ]
        + [["all", minutes(cost.main_s), minutes(cost.pr_s), minutes(cost.total_s)]],
    )
    per_pr = Section(
        "Per PR: its own sessions plus its share of main's (minutes)",
        ["PR", "total", "own", "main share", *kinds],
        [
            [
                f"#{c.pr}",
                minutes(c.total_s),
                minutes(c.own_s),
                minutes(c.main_share_s),
                *[minutes(c.by_kind().get(k, 0.0)) for k in kinds],
            ]
            for c in cost.prs.values()
        ],
    )
    parts = [head, ""]
    for s in (where, per_pr) if cost.prs else (where,):
        parts += [s.title, "", _term_table(s), ""]
    return "\n".join(parts)
