"""The one escaping filter for text a PR author controls, shown in Markdown or HTML.

Titles, authors, labels, branches, reasons and log tails are untrusted. `text` turns any value
into inert text for both contexts at once: HTML-escaped (tags, attributes, entities) and every
ASCII punctuation mark that Markdown, Jinja-looking syntax, tables or autolinks could act on
written as a numeric character reference. The browser shows the same characters; no parser
sees syntax. Templates apply it to every `{{ }}` by default (see `pages.environment`), so only
values built by the generator itself and wrapped in `Markup` pass through unescaped.
"""

from __future__ import annotations

import json
import re

from markupsafe import Markup

# Punctuation kept as is: harmless anywhere inside a line of Markdown or HTML text.
_KEEP = set(" ,.-/?;%")
_TABLE = {c: f"&#{ord(c)};" for c in map(chr, range(33, 127)) if not c.isalnum() and c not in _KEEP}
_SPACES = re.compile(r"[\s\u2028\u2029]+")
# Characters that reorder or hide text (bidi overrides, zero-width), shown as visible escapes.
_INVISIBLE = re.compile(
    "[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
)


def text(value: object, limit: int = 300) -> Markup:
    """Inert text for Markdown and HTML: one line, at most `limit` characters."""
    if isinstance(value, Markup):
        return value
    s = "" if value is None else str(value)
    s = _INVISIBLE.sub(lambda m: f"U+{ord(m.group()):04X}", s)
    s = _SPACES.sub(" ", s).strip()
    if limit and len(s) > limit:
        s = s[: limit - 1] + "…"
    return Markup("".join(_TABLE.get(c, c) for c in s))


def block(value: object, limit: int = 4000) -> Markup:
    """Inert multi-line text (a log tail) for an HTML <pre> inside Markdown."""
    s = "" if value is None else str(value)
    s = _INVISIBLE.sub(lambda m: f"U+{ord(m.group()):04X}", s)
    if limit and len(s) > limit:
        s = "…" + s[-(limit - 1) :]
    lines = [
        "".join(_TABLE.get(c, c) for c in line.replace("\t", "    ")) for line in s.splitlines()
    ]
    return Markup("&#10;".join(lines))


def finalize(value: object) -> object:
    """Jinja's finalize hook: everything printed is escaped unless it is already Markup."""
    if isinstance(value, Markup | int | float):
        return value
    return text(value)


def script_json(data: object) -> Markup:
    """JSON safe inside <script type="application/json"> (no '<', '>' or '&' at all)."""
    s = json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=True)
    s = s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(s)
