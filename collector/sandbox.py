"""What a PR's processes could leave behind on the box, found and undone between sessions.

A PR's engine runs as the collector's user, so at run time it can reach more than its own
checkout: it could leave a process running into main's next session, rewrite main's checkout
(the timing parent runs main's harness from there), or drop a `.pth` / `sitecustomize.py` where
every later Python process would import it. Between sessions the collector therefore:

* kills every process a session left behind: the collector is a child subreaper (Linux
  `PR_SET_CHILD_SUBREAPER`), so a daemon that detached itself is re-parented here, not to init
  (processes that were running before the session are spared);
* checks main's checkout is exactly main's commit (`git status` with ignored files too) and
  restores it if not, and re-pins the harness in the PR's checkout before each of its sessions;
* fingerprints the interpreter's start-up hooks (`*.pth`, `sitecustomize`, `usercustomize` in
  every `site` folder) and this sparkboard's own code; a change means the box itself is no longer
  trustworthy, and the round stops.
A session that changed main's checkout or the box is `forged` (the PR's fault).
"""

from __future__ import annotations

import hashlib
import site
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from collector.errors import RoundError
from engine.harness.reaper import become_subreaper, descendants, kill_leftovers

if TYPE_CHECKING:
    from collector.schedule import Task

GIT_TIMEOUT_S = 60


def checkout_changes(checkout: Path) -> list[str]:
    """Paths in a checkout that differ from its commit, untracked and ignored files included."""
    res = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--ignored", "--no-renames"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    if res.returncode != 0:
        return [f"(git status failed: {res.stderr.strip()[:200]})"]
    return [ln[3:] for ln in res.stdout.splitlines() if ln.strip()]


def restore_checkout(checkout: Path) -> None:
    for argv in (["git", "reset", "-q", "--hard"], ["git", "clean", "-qfdx"]):
        subprocess.run(argv, cwd=checkout, capture_output=True, timeout=GIT_TIMEOUT_S, check=False)


def _startup_hooks() -> list[Path]:
    dirs = {Path(p) for p in [*site.getsitepackages(), site.getusersitepackages()] if p}
    hooks: list[Path] = []
    for d in dirs:
        if d.is_dir():
            hooks += sorted(d.glob("*.pth"))
            hooks += [d / n for n in ("sitecustomize.py", "usercustomize.py") if (d / n).exists()]
    return hooks


def _own_code() -> list[Path]:
    here = Path(__file__).resolve().parent
    return sorted(here.rglob("*.py")) + sorted(here.glob("*.toml")) + sorted(here.glob("*.sql"))


def fingerprint() -> dict[str, str]:
    """path -> content hash of the interpreter's start-up hooks and the collector's own code."""
    out = {}
    for path in _startup_hooks() + _own_code():
        try:
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            out[str(path)] = "unreadable"
    return out


def fingerprint_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


class BoxGuard:
    """Between sessions: kill what a session left running, and check that main's checkout and
    the interpreter's start-up hooks are as they were (collector/sandbox.py)."""

    def __init__(self, main_checkout: Path, log: Callable[[str], None]) -> None:
        self.main_checkout = main_checkout
        self.log = log
        self.subreaper = become_subreaper()
        self.prints = fingerprint()
        self.running: set[int] = set()

    def before_session(self) -> None:
        """What runs before a session (a Ray head, a notebook's helpers) is not the session's."""
        self.running = descendants()

    def after_session(self, task: Task) -> str | None:
        """What the session changed outside its own checkout (restored), or None."""
        who = "main" if task.side == "main" else f"PR #{task.pr}"
        left = kill_leftovers(spare=self.running)
        if left:
            self.log(f"  {who} {task.kind} {task.model}: killed {left} processes it left running")
        found = []
        changed = checkout_changes(self.main_checkout)
        if changed:
            restore_checkout(self.main_checkout)
            found.append("main's checkout (" + ", ".join(changed[:5]) + ")")
        hooks = fingerprint_changes(self.prints, fingerprint())
        if hooks:
            raise RoundError(
                f"{who}'s {task.kind} session changed files every Python process on this box "
                f"trusts ({', '.join(hooks[:5])}): the box can no longer be trusted; restore them "
                "and start a new round"
            )
        if not found:
            return None
        return "changed files outside its checkout: " + "; ".join(found) + " (restored)"
