"""Label colours: one per verdict label (badges, charts, legend) and the badge SVGs. The labels
are the collector's (collector.policy.LABELS), shown strongest tier first;
what a tier's gate is comes from the policy in force (pages.Site.tier_meaning)."""

from __future__ import annotations

from markupsafe import Markup

from collector.policy import LABELS, TIER_NAMES
from sitegen.escape import text

# label -> (fill, text colour, meaning). Fills are mid-tone so a badge reads on both the light
# and the dark palette; the text colour is chosen for contrast against the fill.
TIERS: dict[str, tuple[str, str, str]] = {
    "XL": ("#7b3fb8", "#ffffff", "speedup tier"),
    "L": ("#1f6fc5", "#ffffff", "speedup tier"),
    "M": ("#0f8a80", "#ffffff", "speedup tier"),
    "S": ("#2f9a3a", "#ffffff", "speedup tier"),
    "XS": ("#9bbf3a", "#1a1a1a", "speedup tier"),
    "none": ("#8a8f98", "#ffffff", "no significant speedup (passes every gate)"),
    "REJECT": ("#d0312d", "#ffffff", "a gate failed: regression, accuracy, guard or crash"),
    "needs-rebase": ("#f08c00", "#1a1a1a", "does not merge onto the round's main; not measured"),
    "harness-touched": ("#a0522d", "#ffffff", "edits the pinned harness; not measured"),
    "pending": ("#c9b458", "#1a1a1a", "not decided yet"),
}
assert set(TIERS) == set(LABELS), "one colour per collector label"
ORDER = [*reversed(TIER_NAMES), *(label for label in LABELS if label not in TIER_NAMES)]
PASSING = list(reversed(TIER_NAMES))  # XL first
UNKNOWN = ("#555555", "#ffffff", "unknown label")


def known(label: str) -> str:
    """The label, or 'unknown' for one the collector does not give (its badge file name)."""
    return label if label in TIERS else "unknown"


def colour(label: str) -> str:
    return TIERS.get(label, UNKNOWN)[0]


def rank_key(label: str) -> int:
    return ORDER.index(label) if label in TIERS else len(ORDER)


def badge_svg(label: str) -> str:
    """A small deterministic SVG badge: the label in white or black on its tier colour."""
    fill, ink, _ = TIERS.get(label, UNKNOWN)
    name = label if label in TIERS else "?"
    width = 12 + 7 * len(name)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="18" '
        f'viewBox="0 0 {width} 18" role="img" aria-label="{name}">'
        f'<rect width="{width}" height="18" rx="4" fill="{fill}"/>'
        f'<text x="{width / 2:g}" y="13" fill="{ink}" text-anchor="middle" '
        f'font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" font-weight="bold">'
        f"{name}</text></svg>\n"
    )


def badge(label: str, root: str) -> Markup:
    """An <img> of the label's badge, relative to the page (root is '' or '../')."""
    name = known(label)
    return Markup(
        f'<img class="sb-badge" src="{root}assets/badges/{name}.svg" alt="{text(label)}" '
        f'title="{text(label)}" height="18">'
    )
