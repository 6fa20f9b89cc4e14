"""The box around a round: what seals every checkout's code, and what is checked between sessions.

Every command that runs a checkout's code runs in a sandbox (engine/harness/sandbox.py:
bubblewrap, each in its own user, PID, network and IPC namespaces, the filesystem read-only but
its own folders). `seal` makes sure this box can make one before a round starts, and refuses the
round (with bubblewrap's own words) where it cannot, unless the maintainer passes
`--unsandboxed`: then every page of the round says its PR code ran unsealed.

Between sessions the collector still checks what a session could have changed (`BoxGuard`).
Sealed, a PR's code can reach none of it, so these are a second line: every process the session
left behind is killed (the collector is a child subreaper, `PR_SET_CHILD_SUBREAPER`; a sandbox
dies with its session anyway), main's checkout must be exactly main's commit (`git status` with
ignored files; restored if not), and no other PR's checkout may change during a PR's session (by
stat; restored). A built engine's checkouts are builds (no git work trees): main's and the
other PRs' are watched by stat, and a change stops the round (only a rebuild restores one).
Unsealed (`--unsandboxed`), a PR's process runs as the collector's user and can
reach the box, so two more checks run after each PR session:
* every side's compiled-kernel cache (`Place.cache`; CuPy's `CUPY_CACHE_DIR`: a cached binary
  is what a process runs for a kernel's source): a PR session that changed or removed a file in
  main's or another PR's cache is `forged` and that cache is wiped;
* every file every later Python process trusts: the interpreter's standard library and site
  folders (start-up hooks such as `*.pth` and `sitecustomize.py` among them) and this
  sparkboard's own code, by size, times and inode (a rewrite changes the inode's change time,
  which no user can set back). A file a session added is removed (a `.pyc`: a cache; anything
  else makes the session `forged`); a file it changed or removed makes the session `forged` and
  stops the round once the session is recorded: the box must be restored by hand first.
Harness processes never write bytecode (PYTHONDONTWRITEBYTECODE), and neither does this process
once it guards a round, so an honest session adds nothing there.
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

from collector.errors import RoundError
from engine.harness.reaper import become_subreaper, descendants, kill_leftovers
from engine.harness.sandbox import Sandbox, SandboxError, probe
from engine.harness.sandbox import describe as describe_kind

if TYPE_CHECKING:
    from collector.run.runner import Place
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


def is_work_tree(path: Path) -> bool:
    """A git checkout (restorable from its commit), not a build folder."""
    return (path / ".git").exists()


def unrestorable(build: Path) -> str:
    return (
        f"a session changed the build {build}, which only building it again restores: remove "
        f"{build.parent} and run the round again"
    )


def restore_checkout(checkout: Path) -> None:
    for argv in (["git", "reset", "-q", "--hard"], ["git", "clean", "-qfdx"]):
        subprocess.run(argv, cwd=checkout, capture_output=True, timeout=GIT_TIMEOUT_S, check=False)


def trusted_roots() -> list[Path]:
    """The folders every Python process here imports from (the standard library, every site
    folder) and this sparkboard's own code; a folder inside another is walked with it."""
    paths = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    paths += [*site.getsitepackages(), site.getusersitepackages(), str(Path(__file__).parents[1])]
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


def seal(unsandboxed: bool, scratch: Path, gpu: bool) -> str:
    """The sandbox kind a round runs its checkouts' code in: 'bwrap' once this box has made one
    (a probe), 'none' when the maintainer asked for `--unsandboxed`. RoundError, saying why,
    when the box cannot make one."""
    if unsandboxed:
        return "none"
    try:
        probe(Sandbox("bwrap", gpu=gpu), scratch / "sandbox-probe")
    except SandboxError as e:
        raise RoundError(
            f"{e}; every PR's code runs in a sandbox, so the round cannot start: fix that, or "
            "pass --unsandboxed to run PR code with the collector's own rights (every page of "
            "the round then says so)"
        ) from None
    return "bwrap"


def describe(kind: str) -> str:
    """What sealed a round's checkouts, for its pages: 'bubblewrap 0.8.0', or 'none'."""
    try:
        return describe_kind(kind)
    except SandboxError:
        return kind


class BoxGuard:
    """Between sessions: kill what a session left running, and check that main's checkout,
    the other sides' checkouts and kernel caches, and the files every Python process trusts
    are as they were (collector/run/sandbox.py)."""

    def __init__(
        self,
        place: Place,
        log: Callable[[str], None],
        checkouts: tuple[Path, ...] = (),
    ) -> None:
        self.place = place
        self.main_checkout = place.main_checkout
        # a built engine's main is a build, no git work tree: watched by stat, and never
        # restored (rebuilt by hand: the round stops)
        self.main_build = (
            None if is_work_tree(self.main_checkout) else stat_tree([self.main_checkout])
        )
        self.log = log
        self.checkouts = {c: stat_tree([c]) for c in checkouts}  # the PRs' checkouts
        self.sealed = place.sandbox != "none"  # then the walks below cannot find anything
        self.kernel_caches = None if self.sealed else place.kernel_caches
        self.caches = stat_tree([self.kernel_caches]) if self.kernel_caches else {}
        self.subreaper = become_subreaper()
        sys.dont_write_bytecode = True  # this process adds nothing to the trusted folders
        self.roots = [] if self.sealed else trusted_roots()
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
        if self.main_build is None:
            changed = checkout_changes(self.main_checkout)
            if changed:
                restore_checkout(self.main_checkout)
                found.append("main's checkout (" + ", ".join(changed[:5]) + ")")
        else:
            added, changed = tree_changes(self.main_build, stat_tree([self.main_checkout]))
            if added or changed:
                found.append("main's build (" + ", ".join((changed + added)[:5]) + ")")
                self.stop_round = unrestorable(self.main_checkout)
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
                    if is_work_tree(path):
                        restore_checkout(path)
                    else:
                        self.stop_round = unrestorable(path)
                    now = stat_tree([path])
                    found.append(
                        f"another PR's checkout {path.name} ({', '.join((changed + added)[:5])})"
                    )
            self.checkouts[path] = now
        return found

    def _other_kernel_caches(self, who: str, task: Task) -> list[str]:
        """Main's or another PR's compiled kernels changed by a PR session: that cache wiped (a
        cache: its side compiles again). A file added to another PR's is only removed (main's
        engine, timed beside the PR's, adds its own compiles to main's)."""
        root = self.kernel_caches
        if root is None:
            return []
        now = stat_tree([root])
        if task.side == "pr":
            own = self.place.cache(task.side, task.pr)
            added, changed = tree_changes(self.caches, now)
            main = self.place.cache("main", 0)  # main's engine beside it compiles there
            added = [p for p in added if own not in Path(p).parents and main not in Path(p).parents]
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
        if task.side == "main" or self.sealed:  # main's code is trusted; sealed, a PR's cannot
            return []  # write there: one walk of ~10^5 files less
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
