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
* checks no other PR's checkout changed during a PR's session (by stat, like the trusted files
  below: a competitor's engine slowed is a gain too) and restores it if one did;
* gives every side its own compiled-kernel cache (CuPy's `CUPY_CACHE_DIR`: `kernel_cache`),
  since a cached binary is what a process runs for a kernel source: main's sessions and the
  timing parent of every session read main's, a PR's engine its own. A PR session that
  changed or removed a file in main's or another PR's cache is `forged` (that cache is wiped:
  its next session compiles again); a file it added there is removed (the timing parent's own
  compile of a kernel main's sessions never built would add one);
* watches every file every later Python process trusts: the interpreter's standard library and
  site folders (start-up hooks such as `*.pth` and `sitecustomize.py` among them) and this
  sparkboard's own code, by size, times and inode (`os.stat`: a rewrite changes the inode's
  change time, which no user can set back). A file a PR session added is removed (a `.pyc` it
  dropped silently: a cache; anything else makes the session `forged`); a file it changed or
  removed makes the session `forged` and stops the round once the session is recorded: the box
  must be restored by hand before the round resumes.
A session that changed main's checkout or the box is `forged` (the PR's fault). Harness
processes never write bytecode (PYTHONDONTWRITEBYTECODE), and neither does this process once it
guards a round, so an honest session adds nothing there.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from engine.harness.reaper import become_subreaper, descendants, kill_leftovers
from engine.harness.timing import ENGINE_KERNEL_CACHE

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


def trusted_roots() -> list[Path]:
    """The folders every Python process here imports from (the standard library, every site
    folder) and this sparkboard's own code; a folder inside another is walked with it."""
    paths = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    paths += [*site.getsitepackages(), site.getusersitepackages(), str(Path(__file__).parent)]
    roots = sorted({Path(p).resolve() for p in paths if p and Path(p).is_dir()})
    return [r for r in roots if not any(o in r.parents for o in roots)]


Stamp = tuple[int, int, int, int]  # size, modification and change time (ns), inode


def stat_tree(roots: list[Path]) -> dict[str, Stamp]:
    """path -> stamp of every file under `roots` (symbolic links not followed)."""
    out: dict[str, Stamp] = {}
    stack = [str(r) for r in roots]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                    continue
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            out[e.path] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    return out


def tree_changes(before: dict[str, Stamp], after: dict[str, Stamp]) -> tuple[list[str], list[str]]:
    """(files added, files changed or removed) between two stat_tree snapshots."""
    added = sorted(after.keys() - before.keys())
    changed = sorted(p for p in before if after.get(p) != before[p])
    return added, changed


def kernel_cache(root: Path, task: Task) -> Path:
    """The compiled-kernel cache of a task's side under `root`: main's, or the PR's own."""
    return root / ("main" if task.side == "main" else f"pr-{task.pr}")


def kernel_cache_env(root: Path, task: Task, timed: bool) -> dict[str, str]:
    """The environment that points a session's processes at their caches: CUPY_CACHE_DIR
    (main's for the timing parent, the side's own for what runs the side's code) and the
    engine child's (engine/harness/timing.py). Each is made a plain folder first: a PR may have
    left a link to another side's in place of its own. A PR's cache starts as a copy of main's,
    so the kernels it did not change are not compiled again."""
    own, main = kernel_cache(root, task), root / "main"
    for path in (main, own):
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            path.unlink()
        if not path.exists():
            if path != main:
                shutil.copytree(main, path, symlinks=True)
            path.mkdir(parents=True, exist_ok=True)
    parent = main if timed else own  # a timed session's code under test runs in its child only
    return {"CUPY_CACHE_DIR": str(parent), ENGINE_KERNEL_CACHE: str(own)}


class BoxGuard:
    """Between sessions: kill what a session left running, and check that main's checkout,
    the other sides' checkouts and kernel caches, and the files every Python process trusts
    are as they were (collector/sandbox.py)."""

    def __init__(
        self,
        main_checkout: Path,
        log: Callable[[str], None],
        checkouts: tuple[Path, ...] = (),
        kernel_caches: Path | None = None,
    ) -> None:
        self.main_checkout = main_checkout
        self.log = log
        self.checkouts = {c: stat_tree([c]) for c in checkouts}  # the PRs' checkouts
        self.kernel_caches = kernel_caches  # every side's under it (kernel_cache)
        self.caches = stat_tree([kernel_caches]) if kernel_caches else {}
        self.subreaper = become_subreaper()
        sys.dont_write_bytecode = True  # this process adds nothing to the trusted folders
        self.roots = trusted_roots()
        self.trusted = stat_tree(self.roots)
        self.running: set[int] = set()
        self.stop_round: str | None = None  # set when a session changed what cannot be restored

    def before_session(self) -> None:
        """What runs before a session (a Ray head, a notebook's helpers) is not the session's."""
        self.running = descendants()

    def after_session(self, task: Task, own: Path | None = None) -> str | None:
        """What the session changed outside its own checkout `own` (restored where it can be),
        or None. Sets `stop_round` when it changed a trusted file that was there before."""
        who = "main" if task.side == "main" else f"PR #{task.pr}"
        left = kill_leftovers(spare=self.running)
        if left:
            self.log(f"  {who} {task.kind} {task.model}: killed {left} processes it left running")
        found = []
        changed = checkout_changes(self.main_checkout)
        if changed:
            restore_checkout(self.main_checkout)
            found.append("main's checkout (" + ", ".join(changed[:5]) + ")")
        found += self._other_checkouts(task, own)
        found += self._other_kernel_caches(who, task)
        found += self._trusted_files(who, task)
        if not found:
            return None
        return "changed files outside its checkout: " + "; ".join(found) + " (restored)"

    def _other_checkouts(self, task: Task, own: Path | None) -> list[str]:
        """Another PR's checkout changed by this session (a competitor's engine slowed, say):
        restored. Its own checkout is its own business."""
        found = []
        for path, before in self.checkouts.items():
            now = stat_tree([path])
            if task.side == "pr" and path != own:
                added, changed = tree_changes(before, now)
                if added or changed:
                    restore_checkout(path)
                    now = stat_tree([path])
                    found.append(
                        f"another PR's checkout {path.name} ({', '.join((changed + added)[:5])})"
                    )
            self.checkouts[path] = now
        return found

    def _other_kernel_caches(self, who: str, task: Task) -> list[str]:
        """Main's or another PR's compiled kernels changed by a PR session: that cache wiped (a
        cache: its side compiles again). A file added there is only removed."""
        root = self.kernel_caches
        if root is None:
            return []
        now = stat_tree([root])
        if task.side == "pr":
            own = kernel_cache(root, task)
            added, changed = tree_changes(self.caches, now)
            added = [p for p in added if own not in Path(p).parents]
            changed = [p for p in changed if own not in Path(p).parents]
            for path in added:
                Path(path).unlink(missing_ok=True)
            sides = sorted({Path(p).relative_to(root).parts[0] for p in changed})
            for side in sides:
                if (root / side).is_dir() and not (root / side).is_symlink():
                    shutil.rmtree(root / side, ignore_errors=True)
                else:
                    (root / side).unlink(missing_ok=True)
            if added or sides:
                self.log(
                    f"  {who} {task.kind} {task.model}: removed {len(added)} files it added to "
                    f"other sides' kernel caches; wiped {', '.join(sides) or 'none'}"
                )
            now = stat_tree([root])
            if sides:
                self.caches = now
                return [f"the compiled kernels of {', '.join(sides)} ({', '.join(changed[:5])})"]
        self.caches = now
        return []

    def _trusted_files(self, who: str, task: Task) -> list[str]:
        if task.side == "main":  # main's code is trusted (and writes nothing there): one walk
            return []  # of ~10^5 files less per main session
        now = stat_tree(self.roots)
        added, changed = tree_changes(self.trusted, now)
        for path in added:  # what a session added is removed: bytecode is only a cache
            Path(path).unlink(missing_ok=True)
            now.pop(path, None)
        self.trusted = now
        planted = [p for p in added if not p.endswith(".pyc")]
        if not (planted or changed):
            if added:
                self.log(f"  {who} {task.kind} {task.model}: removed {len(added)} .pyc it wrote")
            return []
        if changed:
            self.stop_round = (
                f"{who}'s {task.kind} session changed files every Python process on this box "
                f"trusts ({', '.join(changed[:5])}): restore them (reinstall the environment), "
                "then run the round again; it resumes after this session"
            )
            self.log(f"  {self.stop_round}")
        return [f"the interpreter's or sparkboard's files ({', '.join((changed + planted)[:5])})"]
