"""Chart specs and static SVGs."""

import json

from sitegen import charts, tiers

from collector.results import Comparison


def test_comparison_svg_for_a_comment_is_deterministic() -> None:
    rows = [
        Comparison(
            model="tiny", role="target", axis=f"decode@{n}", main_value=100.0 - i,
            pr_value=110.0 - i, delta=0.1, ci_low=0.09, ci_high=0.11, noise=0.005, tier="L",
            significant=True, below_floor=False, implausible=False, n_main=3, n_pr=3,
        )
        for i, n in enumerate((128, 512, 4096))
    ]  # fmt: skip
    svg = charts.comparison_svg(rows, "decode")
    assert svg.startswith("<svg") and svg == charts.comparison_svg(rows, "decode")
    assert "4k" in svg and "tok/s" in svg


def test_chart_specs_carry_their_rows_and_no_urls() -> None:
    rows = [
        {"x": "128", "label": "128", "order": 0, "side": "PR", "value": 1.0, "lo": 0.9, "hi": 1.1}
    ]
    spec = charts.versus(rows, "context", tiers.colour("XL"))
    assert spec["datasets"][charts.DATA] == rows
    text = json.dumps(spec)
    assert "http" not in text and tiers.colour("XL") in text and "__PR__" not in text


def test_leaderboard_colours_are_the_tier_colours() -> None:
    spec = charts.leaderboard([], charts.DARK)
    scale = spec["layer"][0]["encoding"]["color"]["scale"]
    assert scale["domain"] == tiers.ORDER
    assert scale["range"] == [tiers.colour(t) for t in tiers.ORDER]


def test_slugs_are_safe_and_distinct() -> None:
    from sitegen.fmt import unique_slugs

    slugs = unique_slugs(["a/b", "a:b", "../../etc", "index", "", "ok-1"])
    assert len(set(slugs.values())) == 6
    for s in slugs.values():
        assert s and not s.startswith(".") and "/" not in s and s != "index"
