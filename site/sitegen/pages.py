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
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from collector.readout import Evaluation, Round, Row
from sitegen import calibration, charts, fmt, tiers
from sitegen.escape import finalize, text
from sitegen.pr_pages import PRPages, chart
from sitegen.queries import SiteData

EXPORT_TABLES = [
    "rounds",
    "prs",
    "candidates",
    "verdicts",
    "comparisons",
    "gates",
    "accuracy",
    "prefill_checks",
    "sessions",
    "samples",
    "score_dumps",
    "strikes",
]
EXPORT_FORMATS = ["parquet", "csv", "json"]


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


class Site(PRPages):
    """Everything the templates need, derived once from the database (the PR and author
    pages' parts in pr_pages.PRPages)."""

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
        v = ev.verdict or {}
        if not v.get("best_axis"):
            return fmt.DASH
        cell = Markup("{} {}").format(v.get("best_model") or "", fmt.axis_label(v["best_axis"]))
        if not ev.best_significant:
            cell += Markup(" <em>(not significant)</em>")
        return cell

    def gate_summary(self, ev: Evaluation) -> Markup:
        """'(pass) 5 · (fail) 1 (floor)': counts per status (the theme's icons), and the gates
        that did not pass by name."""
        counts = Counter(g["status"] for g in ev.gates)
        parts = []
        for status in ("pass", "fail", "warn", "skip"):
            if not counts[status]:
                continue
            part = f"{fmt.icon(status)} {counts[status]}"
            if status in ("fail", "warn"):
                names = ", ".join(str(text(g["gate"])) for g in ev.gates if g["status"] == status)
                part += f" ({names})"
            parts.append(part)
        return Markup(" · ".join(parts)) if parts else fmt.DASH

    def eval_link(self, ev: Evaluation, root: str, pr_page: bool = False) -> Markup:
        """A link to the evaluation's section of its PR page."""
        href = "" if pr_page else f"{root}pr/{int(ev.pr)}.html"
        return Markup(f'<a href="{href}{self.eval_anchor(ev)}">{text(ev.round_id)}</a>')

    def eval_anchor(self, ev: Evaluation) -> str:
        return f"#round-{self.rslug(ev.round_id)}"

    # --- leaderboard ------------------------------------------------------------------------
    def ranked(self, round_id: str) -> list[Evaluation]:
        evs = self.data.by_round.get(round_id, [])

        def key(ev: Evaluation) -> tuple:
            # By verdict: tier order (XL first, then none, REJECT, unmeasured), then delta.
            return (tiers.rank_key(ev.label), -_delta(ev), ev.pr)

        return sorted(evs, key=key)

    def baseline(self, round_id: str) -> list[dict[str, Any]]:
        """main's medians of the round, one row per model and kind of axis."""
        rows = []
        for model in self.models:
            trend = self.trend.get((round_id, model))
            if not trend:
                continue
            by_kind: dict[str, list[Row]] = defaultdict(list)
            for t in sorted(trend, key=lambda t: fmt.axis_order(t["axis"])):
                parsed = fmt.split_axis(t["axis"])
                by_kind[parsed[0] if parsed else "other"].append(t)
            for kind in ("decode", "prefill", "concurrent", "other"):
                if kind not in by_kind:
                    continue
                values = " · ".join(
                    f"{fmt.axis_label(t['axis']).split('@')[-1]}: {fmt.num(t['value'], 1)}"
                    for t in by_kind[kind]
                )
                rows.append({"model": model, "kind": kind, "values": Markup(values)})
        return rows

    def leaderboard_rows(self, round_id: str) -> list[dict[str, Any]]:
        rows = []
        for rank, ev in enumerate(self.ranked(round_id), start=1):
            v = ev.verdict or {}
            rows.append(
                {
                    "rank": rank,
                    "ev": ev,
                    "model": v.get("best_model"),
                    "axis": v.get("best_axis"),
                    "delta": v.get("best_delta"),
                    "lo": v.get("ci_low"),
                    "hi": v.get("ci_high"),
                    "merge_first": bool(v.get("merge_first")),
                }
            )
        return rows

    def leaderboard_chart_rows(self, round_id: str, limit: int = 40) -> list[dict[str, Any]]:
        rows = []
        for row in self.leaderboard_rows(round_id):
            if row["delta"] is None or row["ev"].label not in tiers.TIERS:
                continue
            rows.append(
                {
                    "pr": f"#{row['ev'].pr}",
                    "rank": row["rank"],
                    "tier": row["ev"].label,
                    "axis": str(fmt.axis_label(row["axis"])),
                    "delta": round(row["delta"], 5),
                    "lo": round(row["lo"] if row["lo"] is not None else row["delta"], 5),
                    "hi": round(row["hi"] if row["hi"] is not None else row["delta"], 5),
                }
            )
            if len(rows) >= limit:
                break
        return rows

    # --- pages -----------------------------------------------------------------------------
    def leaderboard_figure(self, round_id: str, cid: str = "chart-leaderboard") -> Markup:
        """The interactive best-delta chart of a round (the interval ink is main's colour, which
        sparkboard.js lightens on the dark palette)."""
        look = dict(charts.LIGHT, ink=charts.MAIN_COLOUR)
        spec = charts.leaderboard(self.leaderboard_chart_rows(round_id), look)
        spec.pop("config", None)  # vega-embed's light or dark theme styles the axes
        spec.pop("background", None)
        spec["width"] = 560  # a fixed width: "container" cannot go with a per-PR row height
        caption = "best delta per PR with its 95% interval, coloured by tier"
        return chart(spec, caption, cid)

    def board_title(self, rnd: Round) -> str:
        """'NVIDIA H200 · gpu profile': what a leaderboard of the home page is about."""
        return f"{rnd.device_name or 'unknown device'} · {rnd.profile} profile"

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

    def round_page(self, rnd: Round) -> str:
        return self.render(
            "round.md.j2",
            root="../",
            round=rnd,
            chart=self.leaderboard_figure(rnd.round_id),
            cost=self.data.costs.get(rnd.round_id),
        )

    def pr_cost(self, ev: Evaluation) -> Markup:
        """The PR's device minutes in its round (own sessions + its share of main's)."""
        c = self.data.costs.get(ev.round_id)
        pc = c.prs.get(ev.pr) if c else None
        return Markup(fmt.minutes(pc.total_s)) if pc else fmt.DASH

    def cost_summary(self, cost: Any) -> Markup:
        """'12.3 device minutes in all: main 4.1 (9 sessions), the PRs' own 8.2; 9 PRs measured,
        1.4 minutes per PR'."""
        out = (
            f"{fmt.minutes(cost.total_s)} device minutes in all: main {fmt.minutes(cost.main_s)} "
            f"({int(cost.main_sessions)} sessions), the PRs' own sessions {fmt.minutes(cost.pr_s)}"
        )
        if cost.prs:
            n = len(cost.prs)
            out += (
                f"; {n} PR{'s' if n != 1 else ''} measured, "
                f"{fmt.minutes(cost.per_pr_s)} minutes per PR"
            )
        return Markup(out)

    def cost_kinds(self, cost: Any) -> list[str]:
        return list(dict.fromkeys([*cost.main_by_kind, *cost.pr_by_kind]))

    def rounds_index(self) -> str:
        return self.render("rounds.md.j2", root="../")

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
                    "verdict": ev.verdict,
                    "comparisons": ev.comparisons,
                    "gates": ev.gates,
                    "accuracy": ev.accuracy,
                    "prefill_checks": ev.prefill,
                    "failed_sessions": ev.failures,
                    "strikes": ev.strikes,
                }
            )
        return {"pr": pr, "evaluations": out}

    def tier_members(self) -> dict[str, list[dict[str, Any]]]:
        """Per label: each PR that got it, with the rounds it got it in (newest first)."""
        out: dict[str, dict[int, list[Evaluation]]] = defaultdict(dict)
        aa = {r.round_id for r in self.aa_rounds}
        for pr, evs in self.data.by_pr.items():
            for ev in evs:
                if ev.round_id in aa:
                    continue  # main against itself: calibration, not a PR's tier
                out[ev.label].setdefault(pr, []).append(ev)
        result: dict[str, list[dict[str, Any]]] = {}
        for label, prs in out.items():
            rows = []
            for pr, evs in prs.items():
                last = evs[-1]
                rows.append({"pr": pr, "latest": last, "evs": list(reversed(evs))})
            rows.sort(
                key=lambda r: (
                    -self.round_order.get(r["latest"].round_id, 0),
                    -_delta(r["latest"]),
                    r["pr"],
                )
            )
            result[label] = rows
        return result

    def tiers_index(self, members: dict[str, list[dict[str, Any]]]) -> str:
        return self.render("tiers.md.j2", root="../", members=members)

    def tier_page(self, label: str, rows: list[dict[str, Any]]) -> str:
        return self.render("tier.md.j2", root="../", label=label, rows=rows)

    def model_page(self, model: str) -> str:
        order = self.round_order
        kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
        table: dict[str, dict[str, Row]] = defaultdict(dict)
        for row in self.data.main_trend:
            if row["model"] != model:
                continue
            parsed = fmt.split_axis(row["axis"])
            if not parsed:
                continue
            kind, n = parsed
            series = f"c{n}" if kind == "concurrent" else fmt.short_ctx(n)
            kinds[kind].append(
                {
                    "round": row["round_id"],
                    "order": order.get(row["round_id"], 0),
                    "series": series,
                    "series_order": n,
                    "value": round(row["value"], 3),
                }
            )
            table[row["round_id"]][row["axis"]] = row
        figures = []
        for kind in ("decode", "prefill", "concurrent"):
            if kinds[kind]:
                spec = charts.trend(kinds[kind], kind)
                figures.append(
                    chart(spec, f"main's median {kind} tok/s per round", f"chart-trend-{kind}")
                )
        axes = sorted({a for r in table.values() for a in r}, key=fmt.axis_order)
        return self.render(
            "model.md.j2",
            root="../",
            model=model,
            figures=figures,
            axes=axes,
            table=table,
            accuracy=[
                a
                for r in self.rounds
                for a in self.data.main_accuracy.get(r.round_id, [])
                if a["model"] == model
            ],
        )

    def models_index(self) -> str:
        return self.render("models.md.j2", root="../")

    def rules_page(self) -> str:
        return self.render(
            "rules.md.j2",
            root="",
            policy=self.policy,
            flat=_flatten(self.policy_round.policy_raw if self.policy_round else {}),
            calibrations=calibration.profiles(self.data),
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


def _delta(ev: Evaluation) -> float:
    return (ev.verdict or {}).get("best_delta") or 0.0


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
