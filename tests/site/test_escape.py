import html

import pytest
from sitegen.escape import block, finalize, script_json, text
from synthetic_round import HOSTILE

SPECIALS = set("<>\"'`[]()!|#{}*_~:@&\\$=^")


@pytest.mark.parametrize("value", HOSTILE)
def test_text_leaves_no_markup_or_markdown_syntax(value: str) -> None:
    out = str(text(value))
    for ch in SPECIALS - {"&", "#"}:
        assert ch not in out, (value, out)
    # Only numeric character references use '&' and '#'; invisible characters become U+XXXX.
    shown = " ".join(value.replace("\u202e", "U+202E").replace("\u200b", "U+200B").split())
    assert html.unescape(out) == shown


def test_text_keeps_plain_text_and_caps_length() -> None:
    assert str(text("perf(decode): fuse 2 kernels, +3.5%")) != ""
    assert html.unescape(str(text("perf(decode): fuse 2 kernels, +3.5%"))) == (
        "perf(decode): fuse 2 kernels, +3.5%"
    )
    assert len(html.unescape(str(text("x" * 1000, limit=50)))) == 50


def test_text_shows_bidi_and_zero_width_characters() -> None:
    assert html.unescape(str(text("a\u202eb\u200bc"))) == "aU+202EbU+200Bc"


def test_block_keeps_lines_as_entities_on_one_source_line() -> None:
    out = str(block("line 1\n<b>line 2</b>"))
    assert "\n" not in out and "<" not in out
    assert html.unescape(out) == "line 1\n<b>line 2</b>"


def test_finalize_escapes_everything_but_markup_and_numbers() -> None:
    assert "<" not in str(finalize("<i>x</i>"))
    assert finalize(3) == 3
    assert str(finalize(text("<"))) == str(text("<"))


def test_script_json_cannot_close_its_script_element() -> None:
    out = str(script_json({"t": "</script><script>alert(1)</script> & <!--"}))
    assert "<" not in out and ">" not in out and "&" not in out
