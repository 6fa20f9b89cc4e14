"""Number, status and link formatting shared by the page builders and templates.

Every function returns Markup (safe to print) built only from numbers, fixed words and
escaped text, so templates can print the results without escaping them twice.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

from markupsafe import Markup

from collector.axes import is_axis, parse_axis, short_ctx
from collector.policy import ResolvedPolicy
from collector.store.readout import STATUS_ICONS, UNKNOWN_ICON, axis_key
from sitegen.escape import text

__all__ = ["short_ctx"]  # re-exported for the templates
DASH = Markup("–")


def pct(value: float | None, digits: int = 1) -> Markup:
    if value is None:
        return DASH
    return Markup(f"{value * 100:+.{digits}f}%")


def share(value: float | None, digits: int = 1) -> Markup:
    """A fraction as an unsigned percentage (noise, gates)."""
    if value is None:
        return DASH
    return Markup(f"{value * 100:.{digits}f}%")


def interval(lo: float | None, hi: float | None) -> Markup:
    if lo is None or hi is None:
        return DASH
    return Markup(f"[{lo * 100:+.1f}%, {hi * 100:+.1f}%]")


def num(value: float | None, digits: int = 2) -> Markup:
    if value is None:
        return DASH
    return Markup(f"{value:,.{digits}f}")


def minutes(seconds: float | None) -> Markup:
    """Device seconds as minutes with one decimal."""
    if seconds is None:
        return DASH
    return Markup(f"{seconds / 60:,.1f}")


def ratio(value: float | None, digits: int = 4) -> Markup:
    if value is None:
        return DASH
    return Markup(f"×{value:.{digits}f}")


def when(value: object) -> Markup:
    """A database time to the minute, in UTC ('2026-11-30 05:54 UTC')."""
    if value is None:
        return DASH
    if hasattr(value, "strftime"):
        return Markup(value.strftime("%Y-%m-%d %H:%M UTC"))
    return text(value)


@functools.cache
def _svg(name: str) -> str:
    """A Material Design icon bundled with the theme, inlined: no font or network needed."""
    import material  # noqa: PLC0415 - the theme package, only when a page is rendered

    path = Path(material.__file__).parent / "templates" / ".icons" / "material" / f"{name}.svg"
    return path.read_text(encoding="utf-8").strip()


def svg_icon(name: str, cls: str, title: str) -> Markup:
    """An inline SVG icon of the theme (`name` a Material Design icon) with a tooltip."""
    return Markup(f'<span class="sb-icon {cls}" title="{text(title)}">{_svg(name)}</span>')


def icon(status: str | None) -> Markup:
    """A gate status (pass, fail, warn, skip) as the theme's SVG icon."""
    _, name = STATUS_ICONS.get(status or "", UNKNOWN_ICON)
    return svg_icon(name, f"sb-{slug(status or 'unknown')}", status or "unknown")


def status_cell(status: str | None) -> Markup:
    """The status's icon and its name (unknown statuses shown escaped)."""
    return Markup(f"{icon(status)} {text(status or 'unknown')}")


MERGE_FIRST = ("flag-checkered", "sb-merge-first", "merge-first")


def commit(sha: str | None, n: int = 9) -> Markup:
    if not sha:
        return DASH
    return Markup(f"<code>{text(sha[:n])}</code>")


def split_axis(name: str | None) -> tuple[str, int] | None:
    """collector.axes.parse_axis, None for a name that is not an axis."""
    return parse_axis(name) if name and is_axis(name) else None


def axis_label(name: str | None) -> Markup:
    """'decode@4096' -> 'decode@4k', 'concurrent@8' -> 'c8'; anything else escaped."""
    parsed = split_axis(name)
    if not parsed:
        return text(name) if name else DASH
    kind, n = parsed
    if kind == "concurrent":
        return Markup(f"c{n}")
    if not n:  # memory after load: no context
        return Markup(kind)
    return Markup(f"{kind}@{short_ctx(n)}")


def axis_name(name: str | None) -> Markup:
    """An axis by its full name as the policy spells it ('prefill@4096'); anything else escaped."""
    parsed = split_axis(name)
    if not parsed:
        return text(name) if name else DASH
    return Markup(f"{parsed[0]}@{parsed[1]}")


axis_order = axis_key


_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def slug(value: str) -> str:
    """A file-name-safe slug (round ids, model names); never empty, never hidden."""
    s = _SLUG.sub("-", value).strip("-.") or "x"
    return s[:80]


def unique_slugs(values: list[str]) -> dict[str, str]:
    """A distinct file-name slug per value: a slug shared by two values gets a short hash."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for value in values:
        s = slug(value)
        if s in taken or s.lower() in ("index",):
            s = f"{s[:70]}-{hashlib.sha1(value.encode()).hexdigest()[:8]}"
        taken.add(s)
        out[value] = s
    return out


def finished(value: object) -> Markup:
    """A round's finished_at; a published round without one did not finish (it is not running)."""
    return when(value) if value is not None else Markup("unfinished")


def _and(names: list[Markup]) -> Markup:
    if len(names) <= 1:
        return Markup("").join(names)
    return Markup(", ").join(names[:-1]) + Markup(" and ") + names[-1]


def noise_floors(policy: ResolvedPolicy | None) -> Markup:
    """'min_noise 2.0% (band +3.0%); prefill@128 and prefill@512: 35.0% (band +56.8%)': the
    floors of a policy, each with the band it implies; axes sharing a floor are named together."""
    if policy is None:
        return Markup("min_noise –")

    def with_band(floor: float) -> Markup:
        return share(floor) + Markup(f" (band {pct(policy.verdict.band(floor) - 1)})")

    prof = policy.profile
    parts = [Markup("min_noise ") + with_band(prof.min_noise)]
    by_floor: dict[float, list[str]] = {}
    for name in prof.min_noise_axes:
        floor = prof.noise_floor(name)
        by_floor.setdefault(floor, []).append(name)
    for floor, names in sorted(by_floor.items()):
        ordered = sorted(names, key=lambda a: (axis_order(a), a))
        parts.append(_and([axis_name(a) for a in ordered]) + Markup(": ") + with_band(floor))
    return Markup("; ").join(parts)


def merge_first_icon() -> Markup:
    return svg_icon(*MERGE_FIRST)
