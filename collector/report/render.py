"""A verdict as a terminal table, a GitHub-flavoured Markdown comment, or JSON.

One model of the page (sections of rows, built in collector/report/page_model.py) renders three
ways, laid out like the reference comments. Hostile strings (title, author, labels, failure
details) are escaped for Markdown and stripped of control characters for a terminal.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict
from typing import Any

from collector.report.page_model import Section, build_sections, emoji, num, pct
from collector.store.readout import Evaluation, ReadoutError
from collector.store.writer import COMPARISON_COLUMNS, GATE_COLUMNS

__all__ = [
    "ReportError",
    "Section",
    "build_sections",
    "emoji",
    "md_code",
    "md_escape",
    "num",
    "pct",
    "render_cost",
    "render_markdown",
    "render_terminal",
    "term_safe",
    "to_json",
]

ReportError = ReadoutError  # a round or PR the database does not hold


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
    b = ev.best
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
        "best": None if b is None else {k: getattr(b, a) for k, a in _BEST.items()},
        "gates": [{k: getattr(g, k) for k in GATE_COLUMNS} for g in ev.gates],
        "comparisons": [{k: getattr(c, k) for k in COMPARISON_COLUMNS} for c in ev.comparisons],
        "accuracy": [{"model": model, **asdict(a)} for model, a in ev.accuracy.items()],
    }


# the best axis's keys in the JSON -> its Comparison's fields
_BEST = {k: k for k in ("model", "axis", "delta", "ci_low", "ci_high")}

# --- cost ---------------------------------------------------------------------------------------


def render_cost(cost: Any) -> str:
    """A round's device time (collector.store.cost.RoundCost) as terminal tables, in minutes."""
    from collector.store.cost import minutes

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
    sections = [where, per_pr] if cost.prs else [where]
    if cost.steps_by_kind:
        from collector.store.cost import STEPS

        sections.append(
            Section(
                "Inside a speed session (median seconds, from the harness's phases)",
                ["kind", *STEPS],
                [
                    [k, *[f"{steps[s]:.1f}" for s in STEPS]]
                    for k, steps in cost.steps_by_kind.items()
                ],
            )
        )
    parts = [head, ""]
    for s in sections:
        parts += [s.title, "", _term_table(s), ""]
    return "\n".join(parts)
