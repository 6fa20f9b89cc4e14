"""A throwaway git repo holding a fake engine that speaks the bench protocol, and the helpers
tests use to write PR branches and manifests into it (the fixtures in conftest.py build it).

The fake harness (fake_engine/engine/harness/bench.py, score.py) is pinned from main like the real
one; its behaviour comes from engine/fake_behavior.py, which a test PR edits to be faster,
slower, inaccurate, or to crash, hang, segfault, print garbage, or claim 1000x. A module of its
own (not conftest.py) so that tests import it by a name no other test folder uses.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from collector.policy import default_policy_path

HERE = Path(__file__).parent
REPO_ROOT = HERE.parent.parent
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        env=GIT_ENV,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_policy_text(hang_timeout: int = 8, long_context: bool = False) -> str:
    text = default_policy_path().read_text()
    text = text.replace("infra_retries = 4", "infra_retries = 1")
    text = text.replace("retry_wait_s = 2.0", "retry_wait_s = 0.0")
    text = text.replace("min_free_disk_mb = 200", "min_free_disk_mb = 1")
    # the fake engine's speeds are exact: no box noise to credit
    for floor in ("min_noise = 0.03", "min_noise_axes = { concurrent = 0.04, "):
        assert floor in text
    text = text.replace("min_noise = 0.03", "min_noise = 0.0", 1)
    text = text.replace("min_noise_axes = { concurrent = 0.04, ", "min_noise_axes = { ", 1)
    cpu_timeouts = 'timeouts = { sweep = 300, concurrent = 300, score = 300, "prefill-check" = 300, guard = 300, longctx = 300 }'
    assert cpu_timeouts in text
    t = hang_timeout
    text = text.replace(
        cpu_timeouts,
        f'timeouts = {{ sweep = {t}, concurrent = {t}, score = {t}, "prefill-check" = {t}, guard = {t}, longctx = {t} }}',
        1,
    )
    # the fake engine's long-context check always completes (tests of memory use the real
    # engine): only tests of its timing keep it
    for line in ('long_context = { "tiny" = 8000 }', 'memory_budget_mib = { "tiny" = 256 }'):
        assert line in text
        if not long_context:
            text = text.replace(line, "", 1)
    return text


test_policy_text.__test__ = False  # type: ignore[attr-defined]


class FakeRepo:
    def __init__(self, path: Path) -> None:
        self.path = path

    def branch(self, name: str, behaviour: str, base: str = "main") -> str:
        """A PR branch whose fake_behavior.py holds `behaviour`; returns its name."""
        git(self.path, "checkout", "-q", "-b", name, base)
        (self.path / "engine" / "fake_behavior.py").write_text(
            (HERE / "fake_engine" / "engine" / "fake_behavior.py").read_text()
            + "\n"
            + behaviour
            + "\n"
        )
        git(self.path, "commit", "-qam", f"PR {name}")
        git(self.path, "checkout", "-q", "main")
        return name

    def edit_branch(self, name: str, rel: str, text: str) -> str:
        git(self.path, "checkout", "-q", "-b", name, "main")
        (self.path / rel).write_text(text)
        git(self.path, "add", rel)
        git(self.path, "commit", "-qm", f"PR {name}")
        git(self.path, "checkout", "-q", "main")
        return name

    def manifest(
        self, round_id: str, prs: list[dict], name: str = "round.toml", **top: str
    ) -> Path:
        from collector.manifest import toml_string

        lines = [
            f"round = {toml_string(round_id)}",
            'engine_repo = "."',
            f"base_ref = {toml_string(top.get('base_ref', 'main'))}",
            f"policy = {toml_string(top.get('policy', 'policy.toml'))}",
            'profile = "cpu"',
        ]
        for p in prs:
            lines.append("\n[[pr]]")
            for k, v in p.items():
                if isinstance(v, list):
                    lines.append(f"{k} = [" + ", ".join(toml_string(x) for x in v) + "]")
                elif isinstance(v, int):
                    lines.append(f"{k} = {v}")
                else:
                    lines.append(f"{k} = {toml_string(v)}")
        path = self.path / name
        path.write_text("\n".join(lines) + "\n")
        return path


def pr(number: int, ref: str | None = None, **kw: object) -> dict:
    d: dict = {
        "number": number,
        "title": kw.pop("title", f"PR {number}"),
        "author": kw.pop("author", "alice"),
    }
    d["labels"] = kw.pop("labels", [])
    d["targets"] = kw.pop("targets", ["tiny"])
    if ref is not None:
        d["ref"] = ref
    d.update(kw)
    return d
