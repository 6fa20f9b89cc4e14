"""A verdict as a terminal table, a GitHub-flavoured Markdown comment, or JSON.

One model of the page (sections of rows) renders three ways, laid out like the reference
comments: a metric/value header, then ctx/phase/main/PR/delta rows, concurrency rows,
prefill-path rows, and every gate with its reason. Hostile strings (title, author, labels,
failure details) are escaped for Markdown and stripped of control characters for a terminal.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from collector.axes import axis_sort_key, parse_axis, short_ctx
from collector.store import Store

GATE_ORDER = ["merge", "run", "floor", "implausible", "accuracy", "prefill-path", "guard"]
ICON = {"pass": "✅", "fail": "❌", "warn": "⚠️", "skip": "⚠️"}


class ReportError(LookupError):
    pass


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


def latest_round(store: Store) -> str:
    rows = store.query(
        "SELECT round_id FROM rounds ORDER BY created_at DESC, round_id DESC LIMIT 1"
    )
    if not rows:
        raise ReportError(f"no rounds in {store.path}")
    return rows[0][0]


def load_pr(store: Store, round_id: str, pr: int) -> dict[str, Any]:
    rows = store.query_dicts(
        "SELECT p.*, v.commit, v.label, v.best_model, v.best_axis, v.best_delta, v.ci_low, v.ci_high, "
        "v.reason, v.merge_first, c.status AS candidate_status, c.merged_commit, c.main_commit, "
        "c.detail AS candidate_detail FROM prs p LEFT JOIN verdicts v USING (round_id, pr) "
        "LEFT JOIN candidates c USING (round_id, pr) WHERE p.round_id = ? AND p.pr = ?",
        [round_id, pr],
    )
    if not rows:
        raise ReportError(f"no PR #{pr} in round {round_id}")
    d = rows[0]
    d["comparisons"] = store.query_dicts(
        "SELECT * FROM comparisons WHERE round_id = ? AND pr = ?", [round_id, pr]
    )
    d["comparisons"].sort(
        key=lambda c: (c["role"] != "target", c["model"], axis_sort_key(c["axis"]))
    )
    d["gates"] = store.query_dicts(
        "SELECT gate, status, reason FROM gates WHERE round_id = ? AND pr = ? ORDER BY gate",
        [round_id, pr],
    )
    d["gates"].sort(
        key=lambda g: (
            GATE_ORDER.index(g["gate"].split(":")[0])
            if g["gate"].split(":")[0] in GATE_ORDER
            else 99
        )
    )
    d["accuracy"] = store.query_dicts(
        "SELECT model, n_tokens, top1, kl, ppl_main, ppl_pr FROM accuracy WHERE round_id = ? AND pr = ? ORDER BY model",
        [round_id, pr],
    )
    d["prefill"] = store.query_dicts(
        "SELECT c.side, c.model, c.prefix, c.top1, c.kl_mean, x.slot FROM prefill_checks c "
        "JOIN sessions x USING (session_id) WHERE c.round_id = ? AND ((c.side = 'main' AND c.pr = 0) "
        "OR (c.side = 'pr' AND c.pr = ?)) ORDER BY x.slot",
        [round_id, pr],
    )
    rnd = store.query_dicts(
        "SELECT round_id, main_commit, profile, device_name, policy_json FROM rounds WHERE round_id = ?",
        [round_id],
    )[0]
    d["round"] = {k: v for k, v in rnd.items() if k != "policy_json"}
    pol = json.loads(rnd["policy_json"])
    d["_policy"] = pol
    if d.get("label") is None:
        d["label"] = "pending"
        d["reason"] = "no verdict yet (run sparkboard verdict)"
        d["merge_first"] = False
    return d


def list_prs(store: Store, round_id: str) -> list[int]:
    return [
        r[0] for r in store.query("SELECT pr FROM prs WHERE round_id = ? ORDER BY pr", [round_id])
    ]


def pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.1f}%"


def num(x: float) -> str:
    return f"{x:,.2f}" if x < 1e6 else f"{x:.4g}"


def best_is_significant(verdict: dict[str, Any], comparisons: list[dict[str, Any]]) -> bool:
    """Whether the verdict's best axis cleared significance. With none that did, the best axis
    is only the largest change (a `none` PR's is noise until its interval says otherwise): it
    gave no tier."""
    return any(
        c["model"] == verdict.get("best_model")
        and c["axis"] == verdict.get("best_axis")
        and bool(c.get("significant"))
        for c in comparisons
    )


def build_sections(d: dict[str, Any]) -> tuple[str, list[Section], str]:
    """(heading, sections, footer) of one PR's verdict."""
    pol = d["_policy"]
    label = d["label"]
    icon = (
        "✅"
        if label in ("XS", "S", "M", "L", "XL", "none")
        else ("❌" if label == "REJECT" else "⚠️")
    )
    heading = f"{icon} sparkboard auto-eval — PR #{d['pr']} — {label}"
    head: list[list[str]] = [
        ["label", label],
        ["title", d["title"]],
        ["author", d["author"]],
        ["labels", ", ".join(d["labels"]) or "–"],
        ["targets", ", ".join(d["targets"])],
    ]
    comps = d["comparisons"]
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
    if d.get("best_axis"):
        significant = best_is_significant(d, tcomps)
        head.append(
            [
                "tier from" if significant else "largest change",
                f"{d['best_model']} {d['best_axis']} ({pct(d['best_delta'])}, 95% CI {pct(d['ci_low'])}..{pct(d['ci_high'])})"
                + ("" if significant else ", not significant"),
            ]
        )
    for g in d["gates"]:
        name = g["gate"]
        title = {
            "floor": "regression floor",
            "implausible": "implausible-gain guard",
            "merge": "merge onto main",
        }.get(name)
        if title is None and ":" in name:
            kind, model = name.split(":", 1)
            title = {
                "accuracy": f"accuracy vs main (teacher-forced) — {model}",
                "prefill-path": f"prefill path vs main — {model}",
                "guard": f"{model} guard",
                "run": f"run — {model}",
            }.get(kind, name)
        head.append([title or name, f"{ICON.get(g['status'], '?')} {g['reason']}"])
    for a in d["accuracy"]:
        head.append([f"PPL PR / main — {a['model']}", f"{a['ppl_pr']:.4f} / {a['ppl_main']:.4f}"])
    commit = (d.get("commit") or "–")[:9]
    main_commit = (d["round"]["main_commit"] or "")[:9]
    merged = (d.get("merged_commit") or "")[:9]
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
            if d["merge_first"]
            else "no",
        ]
    )
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
                runs = pol["profile"]["concurrent_runs"]
                sections.append(
                    Section(
                        f"{model} — concurrent decode, aggregate tok/s with N sequences in flight, median of {runs} complete runs per session",
                        ["concurrency", "main", "PR", "delta [95% CI]", "tier"],
                        crow,
                    )
                )
    pre = d["prefill"]
    if pre:
        pp = pol["prefill_path"]
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
            rows.append(
                [
                    model,
                    str(prefix),
                    f"{mt:.3f}",
                    f"{pt:.3f}",
                    f"≥{mt - pp['top1_margin']:.3f}",
                    f"{mk:.4f}",
                    f"{pk:.4f}",
                    f"≤{max(pp['kl_factor'] * mk, mk + pp['kl_margin']):.4f}",
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
    v = pol["verdict"]
    footer = (
        f"{d['reason']}\n\nMeasured on {d['round'].get('device_name') or 'this round’s box'} "
        f"(profile {d['round']['profile']}) against a same-box main from the same round, sessions interleaved. "
        f"Any axis below {v['floor'] * 100:.0f}% of main (beyond the round's noise) is a REJECT; otherwise the "
        f"label is the best significant delta (tiers XS +{v['tiers']['XS'] * 100:g}%, S +{v['tiers']['S'] * 100:g}%, "
        f"M +{v['tiers']['M'] * 100:g}%, L +{v['tiers']['L'] * 100:g}%, XL +{v['tiers']['XL'] * 100:g}%). "
        f"`none` only means no speedup was measured. The round's best passing speedup is merge-first "
        f"(never under a blocking label)."
    )
    return heading, sections, footer


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


def render_terminal(d: dict[str, Any]) -> str:
    heading, sections, footer = build_sections(d)
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


def render_markdown(d: dict[str, Any]) -> str:
    heading, sections, footer = build_sections(d)
    label = d["label"]
    icon = heading.split(" ", 1)[0]
    parts = [f"### {icon} sparkboard auto-eval — {md_code(label)} — PR \\#{d['pr']}", ""]
    for s in sections:
        if s.title:
            parts += [f"**{md_escape(s.title)}**", ""]
        parts += [_md_table(s), ""]
    reason, rest = footer.split("\n\n", 1)
    parts += [md_escape(reason), "", "<sub>" + md_escape(rest) + "</sub>"]
    return "\n".join(parts) + "\n"


def to_json(d: dict[str, Any]) -> dict[str, Any]:
    """One PR's verdict as plain data (hostile strings verbatim: JSON escapes them)."""
    return {
        "round": d["round"]["round_id"],
        "pr": d["pr"],
        "title": d["title"],
        "author": d["author"],
        "labels": list(d["labels"]),
        "targets": list(d["targets"]),
        "commit": d.get("commit"),
        "merged_commit": d.get("merged_commit"),
        "main_commit": d["round"]["main_commit"],
        "label": d["label"],
        "reason": d["reason"],
        "merge_first": bool(d["merge_first"]),
        "expect": d.get("expect"),
        "candidate": d.get("candidate_status"),
        "best": None
        if not d.get("best_axis")
        else {
            "model": d["best_model"],
            "axis": d["best_axis"],
            "delta": d["best_delta"],
            "ci_low": d["ci_low"],
            "ci_high": d["ci_high"],
        },
        "gates": d["gates"],
        "comparisons": [
            {
                k: c[k]
                for k in (
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
            }
            for c in d["comparisons"]
        ],
        "accuracy": d["accuracy"],
    }


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
