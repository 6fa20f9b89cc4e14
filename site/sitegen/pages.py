"""Page builders: SiteData -> Markdown pages (through Jinja2 templates) and data JSON files.

Each `*_page` function returns the Markdown of one page. Templates are compiled once. Every
`{{ }}` in a template is escaped by `escape.finalize` unless the value is Markup built here from
numbers, fixed words and escaped text. Database strings are never used as templates.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from collector.policy import ENGINE_GATES
from collector.results import GATE_ORDER
from collector.store.readout import EXPORT_FORMATS as READOUT_EXPORT_FORMATS
from collector.store.readout import (
    Evaluation,
    Round,
    Row,
    accuracy_rows,
    as_stored,
    row_of,
    verdict_row,
)
from sitegen import calibration, fmt, tiers
from sitegen.escape import finalize, text
from sitegen.pr_pages import PRPages
from sitegen.queries import SiteData
from sitegen.round_pages import RoundPages

EXPORT_FORMATS = list(READOUT_EXPORT_FORMATS)  # the one export's (collector/store/export.py)


def environment() -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(str(resources.files("sitegen").joinpath("templates")))
    return jinja2.Environment(
        loader=loader,
        autoescape=False,  # Markdown, not HTML: `finalize` escapes for both instead
        finalize=finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


class Site(RoundPages, PRPages):
    """Everything the templates need, derived once from the database (the leaderboard, round,
    tier and model pages' parts in round_pages.RoundPages; the PR and author pages' parts in
    pr_pages.PRPages)."""

    def __init__(self, data: SiteData) -> None:
        self.data = data
        self.env = environment()
        self.rounds = data.rounds
        self.round_by_id = data.round_by_id
        self.round_order = {r.round_id: i for i, r in enumerate(data.rounds)}
        self.round_slug = fmt.unique_slugs([r.round_id for r in data.rounds])
        self.latest = data.rounds[-1] if data.rounds else None
        # The home page's leaderboards: the newest PR round (never an A/A round) of each
        # (profile, device), the gpu profile first, then the newest first.
        self.boards = leaderboard_rounds(data.rounds)
        self.primary = self.boards[0] if self.boards else None
        self.aa_rounds = [r for r in data.rounds if r.kind == "aa"]
        # Which round's static chart pr/<n>.svg shows: the PR's evaluation on the first board
        # that measured it (a PR number can be on the gpu and the local board alike).
        self.comment_round: dict[int, str] = {}
        for rnd in self.boards:
            for ev in data.by_round.get(rnd.round_id, []):
                if ev.comparisons:
                    self.comment_round.setdefault(ev.pr, rnd.round_id)
        self.models = sorted({t["model"] for t in data.main_trend})
        self.model_slug = fmt.unique_slugs(self.models)
        self.trend = defaultdict(list)
        for row in data.main_trend:
            self.trend[(row["round_id"], row["model"])].append(row)
        # The rules page's policy: the primary board's round (else the newest round).
        self.policy_round = self.primary or self.latest
        self.policy = self.policy_round.policy if self.policy_round else None
        # One page per author (authors/<slug>.html): every PR and verdict across rounds.
        self.authors: dict[str, list[int]] = defaultdict(list)
        for pr, evs in data.by_pr.items():
            for author in dict.fromkeys(str(ev.info.get("author") or "") for ev in evs):
                self.authors[author].append(pr)
        self.author_slug = fmt.unique_slugs(sorted(self.authors))
        self._templates: dict[str, jinja2.Template] = {}

    # --- helpers used by templates -------------------------------------------------------
    def render(self, name: str, **ctx: Any) -> str:
        tpl = self._templates.get(name)
        if tpl is None:
            tpl = self._templates[name] = self.env.get_template(name)
        return tpl.render(site=self, fmt=fmt, tiers=tiers, **ctx)

    def rslug(self, round_id: str) -> str:
        """The round's file slug (a PR row of a round missing from `rounds` still gets one)."""
        return self.round_slug.get(round_id) or fmt.slug(round_id)

    def front(self, title: str, wide: bool = False) -> Markup:
        """YAML front matter with the page's title. MkDocs and Material print a page title raw
        (and `striptags` unescapes it), so it never holds database text: only letters, digits
        and a few safe marks, everything else becomes '-'."""
        safe = re.sub(r"[^A-Za-z0-9 #._:-]", "-", title)[:120]
        hide = "hide: [navigation, toc]\n" if wide else ""  # Material: room for a wide table
        return Markup(f"---\ntitle: {json.dumps(safe)}\n{hide}---\n")

    def badge(self, label: str, root: str) -> Markup:
        return tiers.badge(label, root)

    def pr_link(self, pr: int, root: str, anchor: str = "") -> Markup:
        return Markup(f'<a href="{root}pr/{int(pr)}.html{anchor}">#{int(pr)}</a>')

    def sandbox_warning(self, rounds: list[Round], root: str) -> Markup:
        """A warning box (Material's admonition, as HTML) for the rounds of `rounds` whose PR
        code ran unsandboxed (`collect --unsandboxed`); empty when there is none."""
        bare = list({r.round_id: r for r in rounds if r.unsandboxed}.values())
        if not bare:
            return Markup("")
        names = Markup(", ").join(self.round_link(r.round_id, root) for r in bare)
        which = "round" if len(bare) == 1 else "rounds"
        return Markup(
            '<div class="admonition danger sb-unsandboxed"><p class="admonition-title">'
            "PR code ran unsandboxed (--unsandboxed)</p>"
            f"<p>In {which} {names} every PR's code ran with the collector's own rights, not "
            "sealed in a sandbox: the maintainer collected it with <code>--unsandboxed</code>. "
            "A PR's process could reach the box, main's checkout and the other PRs'; its numbers "
            "rest on the collector's checks between sessions alone "
            f'(<a href="{root}rules.html#boundary">the harness boundary</a>).</p></div>\n'
        )

    def round_link(self, round_id: str, root: str) -> Markup:
        if round_id not in self.round_slug:
            return text(round_id)
        return Markup(
            f'<a href="{root}rounds/{self.round_slug[round_id]}.html">{text(round_id)}</a>'
        )

    def model_link(self, model: str, root: str) -> Markup:
        if model not in self.model_slug:
            return text(model)
        return Markup(f'<a href="{root}models/{self.model_slug[model]}.html">{text(model)}</a>')

    def tier_link(self, label: str, root: str) -> Markup:
        if label not in tiers.TIERS:
            return tiers.badge(label, root)  # an unknown label has no page
        return Markup(
            f'<a href="{root}tiers/{tiers.known(label)}.html">{tiers.badge(label, root)}</a>'
        )

    def best_axis(self, ev: Evaluation) -> Markup:
        """'model axis' of the verdict's best target axis, marked when it is not significant."""
        best = ev.best
        if best is None:
            return fmt.DASH
        cell = Markup("{} {}").format(best.model, fmt.axis_label(best.axis))
        if not ev.best_significant:
            cell += Markup(" <em>(not significant)</em>")
        return cell

    def gate_summary(self, ev: Evaluation) -> Markup:
        """'(pass) 5 · (fail) 1 (floor)': counts per status (the theme's icons), and the gates
        that did not pass by name."""
        counts = Counter(g.status for g in ev.gates)
        parts = []
        for status in ("pass", "fail", "warn", "skip"):
            if not counts[status]:
                continue
            part = f"{fmt.icon(status)} {counts[status]}"
            if status in ("fail", "warn"):
                names = ", ".join(str(text(g.gate)) for g in ev.gates if g.status == status)
                part += f" ({names})"
            parts.append(part)
        return Markup(" · ".join(parts)) if parts else fmt.DASH

    def eval_link(self, ev: Evaluation, root: str, pr_page: bool = False) -> Markup:
        """A link to the evaluation's section of its PR page."""
        href = "" if pr_page else f"{root}pr/{int(ev.pr)}.html"
        return Markup(f'<a href="{href}{self.eval_anchor(ev)}">{text(ev.round_id)}</a>')

    def eval_anchor(self, ev: Evaluation) -> str:
        return f"#round-{self.rslug(ev.round_id)}"

    # --- pages -----------------------------------------------------------------------------
    def home_page(self, headline_svg: bool) -> str:
        boards = [
            {
                "round": rnd,
                "anchor": f"board-{self.rslug(rnd.round_id)}",
                "chart": self.leaderboard_figure(
                    rnd.round_id, f"chart-leaderboard-{self.rslug(rnd.round_id)}"
                ),
            }
            for rnd in self.boards
        ]
        return self.render("home.md.j2", root="", boards=boards, headline_svg=headline_svg)

    def pr_page(self, pr: int) -> str:
        evs = list(reversed(self.data.by_pr[pr]))  # newest first
        return self.render("pr.md.j2", root="../", pr=pr, evs=evs, latest=evs[0])

    def pr_data(self, pr: int) -> dict[str, Any]:
        """The page's data as JSON: every evaluation of the PR, as stored."""
        out = []
        for ev in self.data.by_pr[pr]:
            out.append(
                {
                    "round_id": ev.round_id,
                    "pr": ev.info,
                    "candidate": ev.candidate,
                    "verdict": verdict_row(ev),
                    "comparisons": [as_stored(ev, c) for c in ev.comparisons],
                    "gates": [as_stored(ev, g) for g in ev.gates],
                    "accuracy": accuracy_rows(ev.round_id, ev.pr, ev.accuracy),
                    "prefill_checks": [row_of(ev.round_id, p) for p in ev.prefill],
                    "failed_sessions": [row_of(ev.round_id, f) for f in ev.failures],
                    "strikes": [asdict(s) for s in ev.strikes],
                }
            )
        return {"pr": pr, "evaluations": out}

    def rules_page(self) -> str:
        return self.render(
            "rules.md.j2",
            root="",
            policy=self.policy,
            flat=_flatten(self.policy_round.policy_raw if self.policy_round else {}),
            calibrations=calibration.profiles(self.data),
            engine_gates=ENGINE_GATES,
            gate_kinds=GATE_ORDER,
        )

    def data_page(self, exports: dict[str, dict[str, list[str]]], schema_sql: str | None) -> str:
        tables: dict[str, list[Row]] = defaultdict(list)
        for row in self.data.tables:
            tables[row["table_name"]].append(row)
        return self.render(
            "data.md.j2",
            root="",
            tables=dict(tables),
            exports=exports,
            schema_sql=schema_sql,
            formats=EXPORT_FORMATS,
        )


def leaderboard_rounds(rounds: list[Round]) -> list[Round]:
    """The newest leaderboard round (never an A/A round) of each (profile, device), gpu profile
    first, then the newest first. `rounds` is oldest first."""
    newest: dict[tuple[str, str], tuple[int, Round]] = {}
    for i, r in enumerate(rounds):
        if r.leaderboard:
            newest[(r.profile, r.device_name or "")] = (i, r)
    picked = sorted(newest.values(), key=lambda p: (p[1].profile != "gpu", -p[0]))
    return [r for _, r in picked]


def _flatten(node: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        out: list[tuple[str, str]] = []
        for key in sorted(node):
            out.extend(_flatten(node[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(node, list):
        return [(prefix, ", ".join(map(str, node)))]
    return [(prefix, str(node))]


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
