"""A real browser (Debian's headless Chromium) opens the leaderboard and a PR page.

Charts must be drawn (vega-embed put an <svg> in every chart), the console must stay silent,
and the page must request nothing but local files (read from Chromium's net log). Name
resolution is switched off, so nothing can reach the network even by mistake.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed"),
]


def open_page(url: str, tmp: Path, dark: bool = False) -> tuple[str, list[str], list[str]]:
    """(DOM after scripts ran, console lines, URLs the page requested)."""
    netlog = tmp / "net.json"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--no-first-run",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={tmp / 'profile'}",
        f"--log-net-log={netlog}",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1280,2000",
        "--virtual-time-budget=8000",
        "--dump-dom",
        url,
    ]
    if dark:  # the system asks for dark: the palette follows it (prefers-color-scheme)
        cmd[1:1] = ["--force-dark-mode", "--blink-settings=preferredColorScheme=0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console, page_requests(netlog)


def page_requests(netlog: Path) -> list[str]:
    """URLs requested on behalf of a file:// page (Chromium's own housekeeping excluded)."""
    text = netlog.read_text()
    if not text.rstrip().endswith("}"):  # a log cut short still has whole events before the tail
        text = text.rstrip().rstrip(",") + "]}"
    log = json.loads(text)
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log.get("events", []):
        params = event.get("params") or {}
        if event.get("type") == start and "file://" in str(params.get("network_isolation_key")):
            urls.append(params["url"])
    return urls


def rendered_charts(dom: str) -> tuple[int, int, int]:
    """(chart figures, figures drawn, drawn figures holding an svg)."""
    figures = re.findall(r'<figure class="sb-chart".*?</figure>', dom, flags=re.S)
    drawn = [f for f in figures if "data-sb-rendered=" in f]
    with_svg = [f for f in drawn if "<svg" in f]
    return len(figures), len(drawn), len(with_svg)


def test_detector_sees_console_errors_and_network_requests(tmp_path: Path) -> None:
    """The checks below can fail: a page that logs and fetches is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<html><body><img src="https://example.invalid/x.png">'
        '<script>console.error("boom")</script></body></html>'
    )
    _, console, requests = open_page(page.as_uri(), tmp_path)
    assert any("boom" in line for line in console)
    assert "https://example.invalid/x.png" in requests


@pytest.mark.parametrize("page", ["index.html", "rounds/index.html", "PR", "models/MODEL"])
def test_pages_render_charts_silently_and_offline(
    built: tuple[Path, Path], tmp_path: Path, page: str
) -> None:
    _, out = built
    if page == "PR":
        page = "pr/" + sorted((out / "pr").glob("*.html"))[0].name
    elif page == "models/MODEL":
        page = (
            "models/"
            + sorted(p.name for p in (out / "models").glob("*.html") if p.name != "index.html")[0]
        )
    url = (out / page).as_uri()
    dom, console, requests = open_page(url, tmp_path)
    assert "</html>" in dom
    assert console == [], console
    remote = [u for u in requests if not u.startswith("file://")]
    assert remote == [], remote
    figures, drawn, with_svg = rendered_charts(dom)
    if page.startswith(("pr/", "models/", "index")):
        assert figures >= 1
    assert drawn == figures and with_svg == figures, (figures, drawn, with_svg)
    assert "data-sb-error" not in dom


def test_round_page_charts_are_drawn(built: tuple[Path, Path], tmp_path: Path) -> None:
    """The leaderboard's chart and the canary's, on an A/A round and on the round collected
    with --unsandboxed (the synthetic database's first PR round), whose warning shows."""
    _, out = built
    rounds = sorted(p for p in (out / "rounds").glob("*.html") if p.name != "index.html")
    for page in (rounds[-1], out / "rounds" / "2026-06-01-gpu.html"):
        dom, console, _ = open_page(page.as_uri(), tmp_path)
        figures, drawn, with_svg = rendered_charts(dom)
        assert console == [] and figures == 2 and with_svg == 2, (page, figures, with_svg)
        canary = re.search(r'<figure class="sb-chart" id="chart-canary".*?</figure>', dom, re.S)
        assert canary and "<svg" in canary.group() and "data-sb-error" not in dom
        unsandboxed = 'class="admonition danger sb-unsandboxed"' in dom
        assert unsandboxed == (page.name == "2026-06-01-gpu.html"), page


def test_charts_redraw_for_the_dark_palette(built: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = built
    page = sorted((out / "pr").glob("*.html"))[0]
    dom, console, _ = open_page(page.as_uri(), tmp_path, dark=True)
    assert 'data-md-color-scheme="slate"' in dom
    figures, _, with_svg = rendered_charts(dom)
    assert console == [] and figures >= 1 and with_svg == figures
    assert dom.count('data-sb-rendered="dark"') == figures
    assert "#e9ecef" in dom  # main's series drawn light on the dark background
