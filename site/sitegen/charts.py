"""Charts: Vega-Lite specs made with Altair, and static SVGs through vl-convert.

Altair builds each kind of chart once, as a template over a named dataset; a page's chart is
that template with the page's rows attached (a string splice, no Altair call per page), so
thousands of pages cost milliseconds. The browser renders the specs with the vendored
vega-embed (assets/sparkboard.js). `svg` renders a spec to a static, deterministic SVG,
cached by content hash; `comparison_svg` is the one the collector's Markdown comment can use.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import altair as alt

from collector.results import Comparison
from sitegen import tiers

DATA = "rows"
MAIN_COLOUR = "#343a40"  # near black; sparkboard.js swaps it for MAIN_COLOUR_DARK on slate
MAIN_COLOUR_DARK = "#e9ecef"
# Light and dark looks for static SVGs (the interactive charts switch with the palette).
LIGHT = {"background": "#ffffff", "ink": "#1f2328", "grid": "#d0d7de"}
DARK = {"background": "#1e2129", "ink": "#e6edf3", "grid": "#3a3f4b"}


def _config(chart: alt.TopLevelMixin) -> alt.TopLevelMixin:
    return chart.configure_view(strokeWidth=0).configure_axis(labelFontSize=11, titleFontSize=12)


def _template(chart: alt.TopLevelMixin) -> str:
    spec = chart.to_dict()
    spec.pop("$schema", None)  # a URL nobody needs to fetch
    spec.pop("datasets", None)
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def _attach(template: str, rows: list[dict[str, Any]], **subs: str) -> dict[str, Any]:
    for key, value in subs.items():
        template = template.replace(f'"__{key}__"', json.dumps(value))
    spec = json.loads(template)
    spec["datasets"] = {DATA: rows}
    return spec


@functools.cache
def _versus_template(x_title: str) -> str:
    """main vs PR per context (or width): points joined by lines, PR's interval as error bars."""
    base = alt.Chart(alt.NamedData(name=DATA)).encode(
        x=alt.X(
            "x:N",
            title=x_title,
            sort=alt.EncodingSortField("order", op="min"),
            axis=alt.Axis(labelAngle=0),
        ),
        color=alt.Color(
            "side:N",
            title=None,
            scale=alt.Scale(domain=["main", "PR"], range=[MAIN_COLOUR, "__PR__"]),
            legend=alt.Legend(orient="top"),
        ),
    )
    y = alt.Y("value:Q", title="tok/s", scale=alt.Scale(zero=False))
    lines = base.mark_line(point=alt.OverlayMarkDef(size=60, filled=True)).encode(
        y=y,
        strokeDash=alt.StrokeDash(
            "side:N",
            title=None,
            scale=alt.Scale(domain=["main", "PR"], range=[[4, 3], [1, 0]]),
            legend=alt.Legend(orient="top"),
        ),
        tooltip=[
            alt.Tooltip("label:N", title=x_title),
            alt.Tooltip("side:N"),
            alt.Tooltip("value:Q", title="tok/s", format=",.2f"),
            alt.Tooltip("lo:Q", title="low", format=",.2f"),
            alt.Tooltip("hi:Q", title="high", format=",.2f"),
        ],
    )
    bars = base.mark_rule(strokeWidth=2).encode(y="lo:Q", y2="hi:Q")
    return _template(_config((bars + lines).properties(width="container", height=220)))


def versus(rows: list[dict[str, Any]], x_title: str, pr_colour: str) -> dict[str, Any]:
    """rows: {x, label, order, side ('main'|'PR'), value, lo, hi}."""
    return _attach(_versus_template(x_title), rows, PR=pr_colour)


@functools.cache
def _trend_template(title: str) -> str:
    """main's median per round, one line per context or width."""
    chart = (
        alt.Chart(alt.NamedData(name=DATA))
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "round:N",
                title="round",
                sort=alt.EncodingSortField("order", op="min"),
                axis=alt.Axis(labelAngle=-40),
            ),
            y=alt.Y("value:Q", title=f"{title} tok/s", scale=alt.Scale(zero=False)),
            color=alt.Color(
                "series:N",
                title=None,
                sort=alt.EncodingSortField("series_order", op="min"),
                legend=alt.Legend(orient="top"),
            ),
            tooltip=[
                alt.Tooltip("round:N"),
                alt.Tooltip("series:N"),
                alt.Tooltip("value:Q", title="tok/s", format=",.2f"),
            ],
        )
        .properties(width="container", height=240)
    )
    return _template(_config(chart))


def trend(rows: list[dict[str, Any]], title: str) -> dict[str, Any]:
    """rows: {round, order, series, series_order, value}."""
    return _attach(_trend_template(title), rows)


CANARY_AFTER_COLOUR = tiers.colour("L")  # before is main's ink, swapped on the dark palette


@functools.cache
def _canary_template() -> str:
    """The canary over a round: its milliseconds right before and right after each speed
    session, the sessions in the order they started."""
    chart = (
        alt.Chart(alt.NamedData(name=DATA))
        .mark_line(point=alt.OverlayMarkDef(size=30, filled=True), strokeWidth=1.5)
        .encode(
            x=alt.X(
                "n:Q",
                title="speed session, in the order they started",
                axis=alt.Axis(format="d", tickMinStep=1),
                scale=alt.Scale(zero=False, nice=False),
            ),
            y=alt.Y("ms:Q", title="canary ms", scale=alt.Scale(zero=False)),
            color=alt.Color(
                "moment:N",
                title=None,
                scale=alt.Scale(domain=["before", "after"], range=[MAIN_COLOUR, "__AFTER__"]),
                legend=alt.Legend(orient="top"),
            ),
            tooltip=[
                alt.Tooltip("n:Q", title="session"),
                alt.Tooltip("session:N", title="what"),
                alt.Tooltip("when:N", title="started"),
                alt.Tooltip("moment:N"),
                alt.Tooltip("ms:Q", title="ms", format=",.3f"),
            ],
        )
        .properties(width="container", height=220)
    )
    return _template(_config(chart))


def canary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """rows: {n (the session's place by started_at, from 1), session, when, moment ('before'|
    'after'), ms}."""
    return _attach(_canary_template(), rows, AFTER=CANARY_AFTER_COLOUR)


@functools.cache
def _leaderboard_template() -> str:
    """Best delta per PR with its interval, coloured by tier."""
    base = alt.Chart(alt.NamedData(name=DATA)).encode(
        y=alt.Y("pr:N", title=None, sort=alt.EncodingSortField("rank", op="min")),
    )
    bars = base.mark_bar(height=12).encode(
        x=alt.X("delta:Q", title="best delta vs main", axis=alt.Axis(format="+%")),
        color=alt.Color(
            "tier:N",
            title="tier",
            scale=alt.Scale(domain=tiers.ORDER, range=[tiers.colour(t) for t in tiers.ORDER]),
            legend=alt.Legend(orient="bottom", columns=5),
        ),
        tooltip=[
            alt.Tooltip("pr:N", title="PR"),
            alt.Tooltip("tier:N"),
            alt.Tooltip("axis:N", title="axis"),
            alt.Tooltip("delta:Q", format="+.1%"),
            alt.Tooltip("lo:Q", title="interval low", format="+.1%"),
            alt.Tooltip("hi:Q", title="interval high", format="+.1%"),
        ],
    )
    ci = base.mark_rule(strokeWidth=1.5, color="__INK__").encode(x="lo:Q", x2="hi:Q")
    return _template(
        _config((bars + ci).properties(width=520, height=alt.Step(18))).configure(
            background="__BG__"
        )
    )


def leaderboard(rows: list[dict[str, Any]], look: dict[str, str] = LIGHT) -> dict[str, Any]:
    """rows: {pr ('#123'), rank, tier, axis, delta, lo, hi}."""
    spec = _attach(_leaderboard_template(), rows, INK=look["ink"], BG=look["background"])
    return _themed(spec, look)


def _themed(spec: dict[str, Any], look: dict[str, str]) -> dict[str, Any]:
    cfg = spec.setdefault("config", {})
    axis = cfg.setdefault("axis", {})
    axis.update(
        labelColor=look["ink"],
        titleColor=look["ink"],
        gridColor=look["grid"],
        domainColor=look["grid"],
    )
    cfg.setdefault("legend", {}).update(labelColor=look["ink"], titleColor=look["ink"])
    cfg["background"] = look["background"]
    return spec


@functools.cache
def _svg_cached(key: str, spec_json: str) -> str:
    import vl_convert as vlc

    return vlc.vegalite_to_svg(json.loads(spec_json))


def svg(spec: dict[str, Any]) -> str:
    """A static SVG of a Vega-Lite spec; the same spec always gives the same bytes."""
    spec_json = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return _svg_cached(hashlib.sha256(spec_json.encode()).hexdigest(), spec_json)


def comparison_svg(
    comparisons: list[Comparison], kind: str = "decode", pr_colour: str | None = None
) -> str:
    """A static SVG of main vs PR across contexts (kind 'decode'/'prefill') or widths
    ('concurrent'), from a PR's comparisons (axis, main_value,
    pr_value, ci_low, ci_high, noise). Light background, for a GitHub comment or an <img>."""
    rows = versus_rows(comparisons, kind)
    title = "concurrency" if kind == "concurrent" else "context"
    spec = versus(rows, title, pr_colour or tiers.colour("L"))
    spec["width"] = 420
    return svg(_themed(spec, LIGHT))


def versus_rows(comparisons: list[Comparison], kind: str) -> list[dict[str, Any]]:
    """Chart rows of one kind of axis: main's median and the PR's median with its interval."""
    rows: list[dict[str, Any]] = []
    picked = []
    for c in comparisons:
        k, _, n = str(c.axis).partition("@")
        if k == kind and n.isdigit():
            picked.append((int(n), c))
    for order, (n, c) in enumerate(sorted(picked, key=lambda p: p[0])):
        label = f"c{n}" if kind == "concurrent" else short_ctx(n)
        main, pr = c.main_value, c.pr_value
        noise = c.noise or 0.0
        rows.append(
            {
                "x": label,
                "label": label,
                "order": order,
                "side": "main",
                "value": round(main, 3),
                "lo": round(main * (1 - noise), 3),
                "hi": round(main * (1 + noise), 3),
            }
        )
        rows.append(
            {
                "x": label,
                "label": label,
                "order": order,
                "side": "PR",
                "value": round(pr, 3),
                "lo": round(main * (1 + c.ci_low), 3),
                "hi": round(main * (1 + c.ci_high), 3),
            }
        )
    return rows


def short_ctx(n: int) -> str:
    """128 -> '128', 4096 -> '4k' (the reference tables' spelling)."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)
