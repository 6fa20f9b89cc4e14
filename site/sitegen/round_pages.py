"""The parts of the site about rounds, tiers and models: a round's leaderboard (ranked rows, its
chart, main's baseline), round pages with their canary and device cost, the rounds index, tier
pages and main's trend per model. A mixin of pages.Site, like pr_pages.PRPages."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from collector.store.readout import Evaluation, Round, Row
from sitegen import charts, fmt, tiers
from sitegen.pr_pages import chart

if TYPE_CHECKING:
    from sitegen.queries import SiteData


class RoundPages:
    data: SiteData
    rounds: list[Round]
    round_order: dict[str, int]
    aa_rounds: list[Round]
    models: list[str]
    trend: dict[tuple[str, str], list[Row]]

    # --- a round's leaderboard -------------------------------------------------------------
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
            best = ev.best
            rows.append(
                {
                    "rank": rank,
                    "ev": ev,
                    "model": best.model if best else None,
                    "axis": best.axis if best else None,
                    "delta": best.delta if best else None,
                    "lo": best.ci_low if best else None,
                    "hi": best.ci_high if best else None,
                    "merge_first": ev.merge_first,
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

    # --- round pages, their GPUs and their cost ---------------------------------------------
    def round_page(self, rnd: Round) -> str:
        return self.render(
            "round.md.j2",
            root="../",
            round=rnd,
            chart=self.leaderboard_figure(rnd.round_id),
            cost=self.data.costs.get(rnd.round_id),
            gpus=self.main_per_gpu(rnd.round_id),
            shards=self.shard_prs(rnd.round_id),
            canary=self.canary(rnd),
        )

    def canary(self, rnd: Round) -> dict[str, Any] | None:
        """The canary over the round: per speed session that recorded one (in the order they
        started) its milliseconds before and after, as a chart, with the largest move of one
        session (max(after / before, before / after) - 1) beside the profile's canary_limit.
        None for a round collected before the canary was timed."""
        rows = self.data.canaries.get(rnd.round_id, [])
        points: list[dict[str, Any]] = []
        moves: list[float] = []
        for n, r in enumerate(rows, start=1):
            who = f"#{int(r['pr'])}" if r.get("side") == "pr" else "main"
            what = f"{who} {r.get('kind') or ''} {r.get('model') or ''}".strip()
            started = r.get("started_at")
            when = started.strftime("%Y-%m-%d %H:%M:%S") if hasattr(started, "strftime") else ""
            before, after = r.get("canary_before_s"), r.get("canary_after_s")
            for moment, value in (("before", before), ("after", after)):
                if value is not None:
                    points.append(
                        {
                            "n": n,
                            "session": what,
                            "when": when,
                            "moment": moment,
                            "ms": round(value * 1e3, 4),
                        }
                    )
            if before and after:
                moves.append(max(after / before, before / after) - 1)
        if not points:
            return None
        caption = "the canary's ms right before and right after each speed session"
        policy = rnd.policy
        return {
            "chart": chart(charts.canary(points), caption, "chart-canary"),
            "sessions": len(rows),
            "lo": min(p["ms"] for p in points),
            "hi": max(p["ms"] for p in points),
            "largest": max(moves) if moves else None,
            "limit": policy.profile.canary_limit if policy else None,
        }

    def main_per_gpu(self, round_id: str) -> list[dict[str, Any]]:
        """Per model, main's median per GPU on a few axes (decode at the smallest and largest
        context, prefill at the largest, of the axes every GPU timed main's engine on, else of
        any) and the spread between GPUs (largest / smallest − 1). Main's engine is timed in the
        PRs' sessions, so a GPU has the axes its own PRs measured: a full sweep of their targets,
        the guard context of the rest. Empty for a round on one GPU."""
        by_model: dict[str, list[Row]] = defaultdict(list)
        for row in self.data.main_by_gpu.get(round_id, []):
            by_model[row["model"]].append(row)
        out = []
        for model in sorted(by_model, key=lambda m: (m not in self.models, m)):
            rows = by_model[model]
            per_gpu: dict[tuple, set[str]] = defaultdict(set)
            for r in rows:
                per_gpu[(r["shard"], r["host"], r["gpu_index"], r["gpu_uuid"])].add(r["axis"])
            common = set.intersection(*per_gpu.values())
            axes = _gpu_axes(common) or _gpu_axes({r["axis"] for r in rows})
            gpus: dict[tuple, dict[str, float]] = defaultdict(dict)
            for r in rows:
                if r["axis"] in axes:
                    gpus[(r["shard"], r["host"], r["gpu_index"], r["gpu_uuid"])][r["axis"]] = r[
                        "value"
                    ]
            spread = {}
            for axis in axes:
                values = [v[axis] for v in gpus.values() if v.get(axis)]
                spread[axis] = max(values) / min(values) - 1 if len(values) > 1 else None
            out.append(
                {
                    "model": model,
                    "axes": axes,
                    "gpus": [
                        {"shard": k[0], "host": k[1], "gpu": _gpu_name(k[2], k[3]), "values": v}
                        for k, v in sorted(gpus.items(), key=lambda kv: _gpu_sort(kv[0]))
                    ],
                    "spread": spread,
                }
            )
        return out

    def shard_prs(self, round_id: str) -> dict[int, list[int]]:
        """Per shard, the PRs compared with its main; empty for a round of one shard."""
        out: dict[int, list[int]] = defaultdict(list)
        for ev in self.data.by_round.get(round_id, []):
            if ev.shard is not None:
                out[ev.shard].append(ev.pr)
        return dict(sorted(out.items())) if len(out) > 1 else {}

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

    # --- tier pages ------------------------------------------------------------------------
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

    # --- model pages -----------------------------------------------------------------------
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
        axes = sorted({a for r in table.values() for a in r}, key=lambda a: (fmt.axis_order(a), a))
        return self.render(
            "model.md.j2",
            root="../",
            model=model,
            figures=figures,
            axes=axes,
            table=table,
            accuracy=[
                (r.round_id, a)
                for r in self.rounds
                if (a := self.data.main_accuracy.get(r.round_id, {}).get(model)) is not None
            ],
        )

    def models_index(self) -> str:
        return self.render("models.md.j2", root="../")


def _gpu_axes(axes: set[str]) -> list[str]:
    """decode at the smallest and largest context, prefill at the largest, of those measured."""
    by_kind: dict[str, dict[int, str]] = defaultdict(dict)  # kind -> context -> axis name
    for axis in axes:
        parsed = fmt.split_axis(axis)
        if parsed and parsed[0] in ("decode", "prefill") and parsed[1]:
            by_kind[parsed[0]][parsed[1]] = axis
    decode, prefill = by_kind["decode"], by_kind["prefill"]
    picked = [decode[min(decode)], decode[max(decode)]] if decode else []
    if prefill:
        picked.append(prefill[max(prefill)])
    return list(dict.fromkeys(picked))


def _gpu_name(index: int | None, uuid: str | None) -> str:
    """'GPU 3 (GPU-8c1…)', 'GPU 3', or '?' when the session recorded no GPU."""
    name = "?" if index is None else f"GPU {index}"
    return f"{name} ({uuid})" if uuid else name


def _gpu_sort(key: tuple) -> tuple:
    shard, host, index, uuid = key
    return (shard, host or "", -1 if index is None else index, uuid or "")


def _delta(ev: Evaluation) -> float:
    return ev.best_delta or 0.0
