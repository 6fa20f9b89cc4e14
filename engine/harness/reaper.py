"""Processes a measured engine leaves behind: made ours (Linux child subreaper), then killed.

A process of the engine under test can detach itself (double fork, `setsid`) and go on running
into the next measurement. Once a process has called `become_subreaper()`, such orphans are
re-parented to it instead of to init, so `kill_leftovers()` finds every one of them in /proc.
The timing parent does it after its engine process exits (before it verifies the outputs), the
collector after every session.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process, and this process is made
    non-dumpable: another process of the same (non-root) user can then no longer read its memory
    (its seed) through /proc or ptrace (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields and int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def descendants() -> set[int]:
    """Every live descendant of this process (empty where there is no /proc)."""
    if not Path("/proc/self/stat").exists():
        return set()
    found: set[int] = set()
    todo = _children(os.getpid())
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += _children(pid)
    return found


def _ended(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def kill_leftovers(spare: set[int] | frozenset[int] = frozenset()) -> int:
    """SIGKILL every descendant of this process that is still alive, but those in `spare` (what
    was running before the work began); returns how many. One that already ended (a zombie
    re-parented here: a sandbox's own PID 1 outlives its command by a moment) is only reaped."""
    left = descendants() - set(spare)
    ended = [p for p in left if _ended(p)]
    for pid in ended:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    found = sorted(set(left) - set(ended))
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    for pid in found:  # reap the ones re-parented to us
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                break
            time.sleep(0.01)
    return len(found)
