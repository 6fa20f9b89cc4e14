"""The parts of the site about one PR or one author: a PR page's tables and charts, the
static chart of its comment, author pages and the find-a-PR index. A mixin of pages.Site."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from collector.report import page_model
from collector.results import Comparison
from collector.store.readout import Evaluation, PrefillCheck, prefill_bars, real_weights
from sitegen import charts, fmt, tiers
from sitegen.escape import block, script_json, text

if TYPE_CHECKING:
    from sitegen.queries import SiteData


def chart(spec: dict[str, Any], caption: str, cid: str) -> Markup:
    """A chart container: the spec inline as JSON (works from file://), drawn by sparkboard.js."""
    return Markup(
        f'<figure class="sb-chart" id="{text(cid)}"><div class="sb-chart-view"></div>'
        f'<script type="application/json">{script_json(spec)}</script>'
        f"<figcaption>{text(caption)}</figcaption></figure>"
    )


class PRPages:
    data: SiteData
    authors: dict[str, list[int]]
    author_slug: dict[str, str]

    # --- per-PR ----------------------------------------------------------------------------
    def context_rows(self, ev: Evaluation, model: str) -> list[Comparison]:
        rows = [
            c
            for c in ev.comparisons
            if c.model == model
            and c.role != "memory"
            and (fmt.split_axis(c.axis) or ("",))[0] != "concurrent"
        ]
        return sorted(rows, key=lambda c: fmt.axis_order(c.axis))

    def width_rows(self, ev: Evaluation, model: str) -> list[Comparison]:
        rows = [
            c
            for c in ev.comparisons
            if c.model == model and (fmt.split_axis(c.axis) or ("",))[0] == "concurrent"
        ]
        return sorted(rows, key=lambda c: fmt.axis_order(c.axis))

    def target_models(self, ev: Evaluation) -> list[str]:
        models = [c.model for c in ev.comparisons if c.role == "target"]
        return sorted(set(models), key=models.index)

    def guard_rows(self, ev: Evaluation) -> list[Comparison]:
        return sorted(
            (c for c in ev.comparisons if c.role == "guard"),
            key=lambda c: (c.model, fmt.axis_order(c.axis)),
        )

    def memory_rows(self, ev: Evaluation) -> list[Comparison]:
        """Memory of the engine process (bytes, lower is better), read from outside it."""
        return sorted(
            (c for c in ev.comparisons if c.role == "memory"),
            key=lambda c: (c.model, fmt.axis_order(c.axis)),
        )

    def prefill_rows(self, ev: Evaluation) -> list[dict[str, Any]]:
        policy = ev.round.policy
        cells: dict[tuple[str, int], dict[str, PrefillCheck]] = defaultdict(dict)
        for p in ev.prefill:
            cells[(p.model, p.prefix)][p.side] = p
        rows = []
        for (model, prefix), sides in sorted(cells.items()):
            main, pr = sides.get("main"), sides.get("pr")
            bars = prefill_bars(policy, main.top1, main.kl_mean) if main and policy else None
            rows.append(
                {
                    "model": model,
                    "prefix": prefix,
                    "main_top1": main.top1 if main else None,
                    "pr_top1": pr.top1 if pr else None,
                    "top1_bar": bars[0] if bars else None,
                    "main_kl": main.kl_mean if main else None,
                    "pr_kl": pr.kl_mean if pr else None,
                    "kl_bar": bars[1] if bars else None,
                }
            )
        return rows

    def headline(self, ev: Evaluation, root: str) -> list[tuple[str, Markup]]:
        """The verdict's header (collector.report.page_model.headline: the comment's rows; the PR
        itself is in the page's heading), then the device time, the reason and the device."""
        rows = [
            (text(f.key), self.fact(f, root))
            for f in page_model.headline(ev)
            if f.key not in page_model.ABOUT_THE_PR
        ]
        cost = self.data.costs.get(ev.round_id)
        pc = cost.prs.get(ev.pr) if cost else None
        if pc:
            rows.append(
                (
                    text("device time"),
                    Markup(
                        f"{fmt.minutes(pc.total_s)} min: its own sessions {fmt.minutes(pc.own_s)}"
                        f" + its share of main's {fmt.minutes(pc.main_share_s)} "
                        f'(<a href="{root}rules.html#cost">how</a>)'
                    ),
                )
            )
        rnd = ev.round
        rows.append(
            (text("reason"), text((ev.verdict.reason if ev.verdict else "") or "no verdict yet"))
        )
        rows.append(
            (text("device"), text(f"{rnd.device_name or '?'} · driver {rnd.driver or '?'}"))
        )
        return rows

    def fact(self, f: page_model.Fact, root: str) -> Markup:
        """One header fact as HTML: a label as its badge, models linked, a gate's words after
        its status icon, anything else escaped."""
        if f.kind == "label":
            return tiers.badge(f.ref[0], root)
        if f.kind == "models" and f.ref:
            return Markup(", ".join(self.model_link(m, root) for m in f.ref))
        if f.kind == "gate":
            return Markup(f"{fmt.icon(f.ref[0])} {text(f.text)}")
        return text(f.text)

    def pr_charts(self, ev: Evaluation) -> list[Markup]:
        out = []
        colour = tiers.colour(ev.label)
        tag = self.rslug(ev.round_id)
        for model in self.target_models(ev):
            comps = [c for c in ev.comparisons if c.model == model]
            for kind, title in (
                ("decode", "context"),
                ("prefill", "context"),
                ("concurrent", "concurrency"),
            ):
                rows = charts.versus_rows(comps, kind)
                if not rows:
                    continue
                spec = charts.versus(rows, title, colour)
                caption = (
                    f"{model}: {kind} tok/s, main vs PR (bars: PR's 95% interval, main's noise)"
                )
                out.append(chart(spec, caption, f"chart-{tag}-{fmt.slug(model)}-{kind}"))
        return out

    def comment_svg(self, ev: Evaluation) -> str | None:
        """The static chart of `ev` for its PR comment: the best axis's kind, its model."""
        best = ev.best
        model = best.model if best else next(iter(self.target_models(ev)), None)
        parsed = fmt.split_axis(best.axis if best else "")
        kind = parsed[0] if parsed else "decode"
        comps = [c for c in ev.comparisons if c.model == model]
        if not comps or not charts.versus_rows(comps, kind):
            return None
        return charts.comparison_svg(comps, kind, tiers.colour(ev.label))

    def has_comment_svg(self, ev: Evaluation) -> bool:
        return bool(ev.comparisons) and self.comment_round.get(ev.pr) == ev.round_id

    def failures(self, ev: Evaluation) -> list[dict[str, Any]]:
        return [
            {**asdict(f), "log": block(f.log_tail, 2000) if f.log_tail else None}
            for f in ev.failures
        ]

    def real_weights(self, model: str) -> bool:
        return real_weights(model)

    def dummy_accuracy(self, ev: Evaluation) -> bool:
        return any(not real_weights(model) for model in ev.accuracy)

    def tier_meaning(self, label: str) -> str:
        """What a label means; a tier's gate from the policy in force."""
        if label in tiers.PASSING and self.policy is not None:
            return f"speedup of {fmt.pct(self.policy.verdict.tiers[label])} or more"
        return tiers.TIERS.get(label, tiers.UNKNOWN)[2]

    # --- authors ---------------------------------------------------------------------------
    def author_link(self, author: object, root: str) -> Markup:
        name = str(author or "")
        if name not in self.author_slug:
            return text(name)
        return Markup(f'<a href="{root}authors/{self.author_slug[name]}.html">{text(name)}</a>')

    def author_page(self, author: str) -> str:
        rows = [
            {"pr": pr, "evs": list(reversed(self.data.by_pr[pr]))}
            for pr in sorted(self.authors[author])
        ]
        return self.render("author.md.j2", root="../", author=author, rows=rows)

    def find_index(self) -> list[dict[str, Any]]:
        """The find-a-PR page's index: per PR its number, newest title, author and label."""
        out = []
        for pr, evs in self.data.by_pr.items():
            last = evs[-1]
            author = str(last.info.get("author") or "")
            out.append(
                {
                    "pr": pr,
                    "title": str(last.info.get("title") or ""),
                    "author": author,
                    "author_page": self.author_slug.get(author, ""),
                    "label": last.label,
                    "round": last.round_id,
                }
            )
        return out
