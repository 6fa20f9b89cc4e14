"""Candidates: each PR merged onto the exact main commit, in a git worktree under a scratch dir.

Git runs with argument lists (never a shell), with a timeout, with hooks and signing off, and
with a fixed identity and date, so the merge of the same PR onto the same main is the same
commit in every round (strikes count failures "at the same commit"). Harness paths are taken
from main: a PR that changes one is `harness-touched` and not measured; in every checkout the
harness files are rewritten from main anyway.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from pathlib import Path

from collector.manifest import LoadedManifest, ManifestError, PRSpec
from collector.results import Candidate

GIT_TIMEOUT_S = 300
_FIXED_DATE = "2000-01-01T00:00:00+0000"


class GitError(Exception):
    pass


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="sparkboard",
        GIT_AUTHOR_EMAIL="sparkboard@localhost",
        GIT_COMMITTER_NAME="sparkboard",
        GIT_COMMITTER_EMAIL="sparkboard@localhost",
        GIT_AUTHOR_DATE=_FIXED_DATE,
        GIT_COMMITTER_DATE=_FIXED_DATE,
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
    )
    return env


def git(
    cwd: Path, *args: str, check: bool = True, timeout: float = GIT_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    cmd = [
        "git",
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "commit.gpgsign=false",
        "-c",
        "merge.renames=true",
        *args,
    ]
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=_git_env(),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} timed out after {timeout:.0f} s") from None
    except OSError as e:
        raise GitError(f"cannot run git: {e.strerror}") from None
    if check and proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise GitError(f"git {args[0]} failed: {last}")
    return proc


class Workspace:
    """The engine repo plus a scratch directory of worktrees, removed by cleanup()."""

    def __init__(self, repo: Path | str, scratch: Path) -> None:
        self.scratch = scratch
        if scratch.exists():  # left by an interrupted run: nothing in it is worth keeping
            shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        if isinstance(repo, str):
            dest = scratch / "repo"
            git(scratch, "clone", "--quiet", "--no-checkout", "--end-of-options", repo, str(dest))
            # GitHub keeps PR heads under refs/pull/N/head: fetch them so a PR's head commit
            # (gh's headRefOid) resolves even from a fork (best effort: other hosts lack them)
            git(
                dest,
                "fetch",
                "--quiet",
                "origin",
                "+refs/pull/*/head:refs/remotes/origin/pr/*",
                check=False,
            )
            self.repo = dest
        else:
            self.repo = repo
        if git(self.repo, "rev-parse", "--git-dir", check=False).returncode != 0:
            raise GitError(f"{self.repo} is not a git repository")
        git(self.repo, "worktree", "prune", check=False)
        self._worktrees: list[Path] = []

    def resolve(self, ref: str) -> str | None:
        """The full commit a ref names, or None."""
        p = git(
            self.repo,
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"{ref}^{{commit}}",
            check=False,
        )
        return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None

    def add_worktree(self, name: str, commit: str) -> Path:
        path = self.scratch / name
        git(self.repo, "worktree", "add", "--quiet", "--detach", str(path), commit)
        self._worktrees.append(path)
        return path

    def remove_worktree(self, path: Path) -> None:
        git(self.repo, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)
        if path in self._worktrees:
            self._worktrees.remove(path)

    def cleanup(self) -> None:
        for wt in list(self._worktrees):
            self.remove_worktree(wt)
        repo_inside = self.scratch in self.repo.parents
        if not repo_inside:
            git(self.repo, "worktree", "prune", check=False)
        shutil.rmtree(self.scratch, ignore_errors=True)
        with contextlib.suppress(OSError):  # the folder that holds every round's scratch
            self.scratch.parent.rmdir()


def preflight(loaded: LoadedManifest, ws: Workspace) -> tuple[str, dict[int, str]]:
    """Check every ref and patch before anything is measured: (main commit, PR number -> tip)."""
    m = loaded.manifest
    main_commit = ws.resolve(m.base_ref)
    if main_commit is None:
        raise ManifestError(
            f"manifest {loaded.path}: base_ref: {m.base_ref!r} is not a commit in {ws.repo}"
        )
    tips: dict[int, str] = {}
    for p in m.pr:
        if p.ref is not None:
            tip = ws.resolve(p.ref)
            if tip is None:
                raise ManifestError(
                    f"manifest {loaded.path}: PR #{p.number}: ref: {p.ref!r} is not a commit in {ws.repo}"
                )
            tips[p.number] = tip
        else:
            patch = loaded.patches[p.number]
            st = git(ws.repo, "apply", "--stat", "--", str(patch), check=False)
            if st.returncode != 0 or not st.stdout.strip():
                why = (st.stderr.strip().splitlines() or ["no changes in it"])[-1]
                raise ManifestError(
                    f"manifest {loaded.path}: PR #{p.number}: patch: {patch} is not a patch ({why})"
                )
    return main_commit, tips


def _changed(checkout: Path, a: str, b: str) -> list[str]:
    out = git(checkout, "diff", "--no-renames", "--name-only", a, b).stdout
    return [ln for ln in out.splitlines() if ln]


def is_harness_path(path: str, harness_paths: list[str]) -> bool:
    """Whether `path` is pinned: named exactly, or inside a pinned folder (written `dir/`)."""
    return any(path.startswith(p) if p.endswith("/") else path == p for p in harness_paths)


def _pinned_files(repo: Path, main_commit: str, paths: list[str]) -> list[str]:
    """The files main has under the harness paths (a folder names every file in it)."""
    out: list[str] = []
    for rel in paths:
        if not rel.endswith("/"):
            out.append(rel)
            continue
        listing = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", main_commit, "--", rel],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
        out += [ln for ln in listing.stdout.splitlines() if ln]
    return out


@functools.cache
def pinned_blobs(repo: Path, main_commit: str, paths: tuple[str, ...]) -> dict[str, bytes]:
    """Main's content of every pinned file (read once per round)."""
    blobs = {}
    for rel in _pinned_files(repo, main_commit, list(paths)):
        blob = subprocess.run(
            ["git", "show", f"{main_commit}:{rel}"],
            cwd=repo,
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
        if blob.returncode == 0:  # not in main: nothing to pin
            blobs[rel] = blob.stdout
    return blobs


def _strays(checkout: Path, pinned: dict[str, bytes], paths: list[str]) -> list[Path]:
    """Files in a pinned folder of the checkout that main does not have there."""
    out = []
    for folder in (p for p in paths if p.endswith("/")):
        root = checkout / folder
        if root.is_dir():
            out += [
                f
                for f in sorted(root.rglob("*"))
                if (f.is_file() or f.is_symlink())
                and f.relative_to(checkout).as_posix() not in pinned
                and "__pycache__" not in f.parts
            ]
    return out


def pin_harness(checkout: Path, repo: Path, main_commit: str, paths: list[str]) -> None:
    """Write main's version of every harness file into a checkout (again before each session:
    a PR's process may have rewritten them on disk), and remove files main does not have in a
    pinned folder."""
    pinned = pinned_blobs(repo, main_commit, tuple(paths))
    for stray in _strays(checkout, pinned, paths):
        stray.unlink()
    for rel, content in pinned.items():
        target = checkout / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)


def harness_drift(checkout: Path, repo: Path, main_commit: str, paths: list[str]) -> list[str]:
    """Pinned files a session's process rewrote, added or removed in its checkout."""
    pinned = pinned_blobs(repo, main_commit, tuple(paths))
    changed = [
        rel
        for rel, content in pinned.items()
        if not (checkout / rel).is_file() or (checkout / rel).read_bytes() != content
    ]
    return changed + [f.relative_to(checkout).as_posix() for f in _strays(checkout, pinned, paths)]


def build_candidate(
    ws: Workspace,
    spec: PRSpec,
    main_commit: str,
    tip: str | None,
    patch: Path | None,
    harness_paths: list[str],
) -> Candidate:
    """Merge one PR onto main in its own worktree; classify it ready / needs-rebase / harness-touched."""
    cand = Candidate(pr=spec.number, status="error", main_commit=main_commit, pr_commit=tip)
    wt = ws.add_worktree(f"pr-{spec.number}", main_commit)
    try:
        if tip is not None:
            merge = git(
                wt,
                "merge",
                "--no-ff",
                "--no-edit",
                "-m",
                f"sparkboard: merge PR #{spec.number}",
                "--end-of-options",
                tip,
                check=False,
            )
            if merge.returncode != 0:
                conflicts = git(
                    wt, "diff", "--name-only", "--diff-filter=U", check=False
                ).stdout.split()
                git(wt, "merge", "--abort", check=False)
                cand.status = "needs-rebase"
                cand.detail = (
                    "conflicts with main in " + ", ".join(conflicts)
                    if conflicts
                    else "does not merge onto main: "
                    + ((merge.stdout + merge.stderr).strip().splitlines() or ["merge failed"])[-1]
                )
                ws.remove_worktree(wt)
                return cand
        else:
            assert patch is not None
            check = git(wt, "apply", "--check", "--index", "--", str(patch), check=False)
            if check.returncode != 0:
                lines = [ln for ln in check.stderr.strip().splitlines() if ln.startswith("error:")]
                cand.status = "needs-rebase"
                cand.detail = "patch does not apply to main: " + "; ".join(lines[:3] or ["failed"])
                ws.remove_worktree(wt)
                return cand
            git(wt, "apply", "--index", "--", str(patch))
            git(
                wt,
                "commit",
                "--quiet",
                "--allow-empty",
                "-m",
                f"sparkboard: PR #{spec.number} patch",
            )
            cand.pr_commit = git(wt, "rev-parse", "HEAD").stdout.strip()
        cand.merged_commit = git(wt, "rev-parse", "HEAD").stdout.strip()
        touched = [
            f
            for f in _changed(wt, main_commit, cand.merged_commit)
            if is_harness_path(f, harness_paths)
        ]
        if touched:
            cand.status = "harness-touched"
            cand.detail = "edits the measuring harness: " + ", ".join(touched)
            ws.remove_worktree(wt)
            return cand
        pin_harness(wt, ws.repo, main_commit, harness_paths)
        cand.status = "ready"
        cand.checkout = wt
        return cand
    except GitError as e:
        cand.status = "error"
        cand.detail = str(e)
        ws.remove_worktree(wt)
        return cand
