"""Number, status and link formatting shared by the page builders and templates.

Every function returns Markup (safe to print) built only from numbers, fixed words and
escaped text, so templates can print the results without escaping them twice.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from markupsafe import Markup

from sitegen.escape import text

ICONS = {"pass": "✅", "fail": "❌", "warn": "⚠️", "skip": "⏭️"}
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


def icon(status: str | None) -> Markup:
    return Markup(ICONS.get(status or "", "❔"))


def status_cell(status: str | None) -> Markup:
    """✅ pass / ❌ fail / ⚠️ warn / ⏭️ skip (unknown statuses shown escaped)."""
    return Markup(f"{icon(status)} {text(status or 'unknown')}")


def commit(sha: str | None, n: int = 9) -> Markup:
    if not sha:
        return DASH
    return Markup(f"<code>{text(sha[:n])}</code>")


def short_ctx(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


_AXIS = re.compile(r"^(decode|prefill|concurrent)@([0-9]+)$")


def parse_axis(name: str) -> tuple[str, int] | None:
    m = _AXIS.match(name or "")
    return (m.group(1), int(m.group(2))) if m else None


def axis_label(name: str | None) -> Markup:
    """'decode@4096' -> 'decode@4k', 'concurrent@8' -> 'c8'; anything else escaped."""
    parsed = parse_axis(name or "")
    if not parsed:
        return text(name) if name else DASH
    kind, n = parsed
    if kind == "concurrent":
        return Markup(f"c{n}")
    return Markup(f"{kind}@{short_ctx(n)}")


def axis_name(name: str | None) -> Markup:
    """An axis by its full name as the policy spells it ('prefill@4096'); anything else escaped."""
    parsed = parse_axis(name or "")
    if not parsed:
        return text(name) if name else DASH
    return Markup(f"{parsed[0]}@{parsed[1]}")


def axis_order(name: str) -> tuple[int, int, int]:
    parsed = parse_axis(name)
    if not parsed:
        return (9, 0, 0)
    kind, n = parsed
    if kind == "concurrent":
        return (1, n, 0)
    return (0, n, 0 if kind == "decode" else 1)


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


def policy_get(policy: dict[str, Any], paths: str, default: Any = None) -> Any:
    """Look up 'a.b.c' in the policy JSON; 'a.b|c' tries each path in turn. A missing or
    differently shaped key gives `default`."""
    for path in paths.split("|"):
        node: Any = policy
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            return node
    return default


def finished(value: object) -> Markup:
    """A round's finished_at; a published round without one did not finish (it is not running)."""
    return when(value) if value is not None else Markup("unfinished")


def band(floor: float | None, multiplier: float | None) -> float | None:
    """The gain an axis needs at noise `floor`: (1 + floor) ** multiplier - 1."""
    if floor is None or multiplier is None:
        return None
    return (1 + floor) ** multiplier - 1


def axis_floors(policy: dict[str, Any]) -> dict[str, float]:
    """profile.min_noise_axes of a resolved policy: the axes credited a higher noise floor."""
    axes = policy_get(policy, "profile.min_noise_axes", {})
    if not isinstance(axes, dict):
        return {}
    return {str(k): float(v) for k, v in axes.items() if isinstance(v, int | float)}


def _and(names: list[Markup]) -> Markup:
    if len(names) <= 1:
        return Markup("").join(names)
    return Markup(", ").join(names[:-1]) + Markup(" and ") + names[-1]


def noise_floors(
    min_noise: float | None, axes: dict[str, float], multiplier: float | None
) -> Markup:
    """'min_noise 2.0% (band +3.0%); prefill@128 and prefill@512: 35.0% (band +56.8%)': the
    floors of a policy, each with the band it implies; axes sharing a floor are named together."""

    def with_band(floor: float) -> Markup:
        b = band(floor, multiplier)
        return share(floor) + (Markup(f" (band {pct(b)})") if b is not None else Markup(""))

    parts = [Markup("min_noise ") + (with_band(min_noise) if min_noise is not None else DASH)]
    by_floor: dict[float, list[str]] = {}
    for name, floor in axes.items():
        by_floor.setdefault(floor, []).append(name)
    for floor, names in sorted(by_floor.items()):
        ordered = sorted(names, key=lambda a: (axis_order(a), a))
        parts.append(_and([axis_name(a) for a in ordered]) + Markup(": ") + with_band(floor))
    return Markup("; ").join(parts)
