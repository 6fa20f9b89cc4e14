"""llama.cpp's source as a git repository, from a llama-cpp-python release on PyPI.

Each llama-cpp-python source distribution vendors a real upstream llama.cpp tree
(`vendor/llama.cpp/`), releases 0.3.30 to 0.3.36 at different upstream commits: a round of
llama.cpp PRs needs one as its main (and the changes between two as real PRs). This module
fetches a release's sdist with pip (bounded by a timeout), unpacks only its llama.cpp tree,
without the folders a server build never reads (models, docs, examples, tests, media, CI: 57 MB
left of 0.3.36's), and commits it into a git repository with a fixed identity and date, so
the same release is the same commit on every box and a PR's patch applies to it.

The archive is a download: its members are extracted with tarfile's "data" filter (no absolute
paths, no `..`, no links out of the tree, no device files) and only under the vendored folder.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from collector.run.candidates import GitError, git

PACKAGE = "llama-cpp-python"
PIP_TIMEOUT_S = 600
# Top-level folders of llama.cpp's tree a CMake build of its server and tools does not need
TRIMMED = ("models", "docs", "examples", "tests", "media", ".github", ".devops")
RELEASE = re.compile(r"^\d+\.\d+\.\d+$")


class SourceError(Exception):
    """The release cannot be fetched or unpacked; the text says why."""


def check_release(release: str) -> str:
    if not RELEASE.match(release):
        raise SourceError(f"release {release!r} is not a version like 0.3.36")
    return release


def fetch_sdist(release: str, into: Path, timeout_s: float = PIP_TIMEOUT_S) -> Path:
    """The release's source distribution, downloaded by pip into `into` (no build, no deps)."""
    check_release(release)
    into.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    argv += ["--disable-pip-version-check", "-d", str(into), f"{PACKAGE}=={release}"]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise SourceError(
            f"pip download of {PACKAGE} {release} ran past {timeout_s:.0f} s"
        ) from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SourceError(f"pip could not download {PACKAGE} {release}: {last[:300]}")
    return sdist_path(into, release)


def sdist_path(folder: Path, release: str) -> Path:
    path = folder / f"{PACKAGE.replace('-', '_')}-{release}.tar.gz"
    if not path.is_file():
        raise SourceError(f"no {path.name} in {folder}")
    return path


def _inside(name: str, prefix: str) -> str | None:
    """The member's path inside the vendored tree, or None when it is outside it or trimmed."""
    parts = PurePosixPath(name).parts
    head = PurePosixPath(prefix).parts
    if tuple(parts[: len(head)]) != head or len(parts) == len(head):
        return None
    rest = parts[len(head) :]
    # a .git file there is the sdist's submodule link: the repository is made anew
    return None if rest[0] in TRIMMED or ".git" in rest else "/".join(rest)


def unpack_tree(sdist: Path, release: str, into: Path) -> int:
    """The vendored llama.cpp tree of `sdist` into `into` (which must not exist), trimmed; the
    number of files written."""
    check_release(release)
    if not hasattr(tarfile, "data_filter"):
        raise SourceError(
            "unpacking a download safely needs Python 3.11.4 or later (tarfile's data filter)"
        )
    if into.exists():
        raise SourceError(f"{into} exists: give a new folder")
    prefix = f"{PACKAGE.replace('-', '_')}-{release}/vendor/llama.cpp"
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = []
            for m in tar.getmembers():
                rel = _inside(m.name, prefix)
                if rel is not None:
                    m.name = rel
                    members.append(m)
            if not any(m.name == "CMakeLists.txt" for m in members):
                raise SourceError(f"{sdist.name} has no {prefix}/CMakeLists.txt")
            into.mkdir(parents=True)
            tar.extractall(into, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as e:
        shutil.rmtree(into, ignore_errors=True)  # nothing half unpacked stays
        raise SourceError(f"cannot unpack {sdist.name}: {e}") from None
    return sum(1 for m in members if m.isfile())


def make_repo(tree: Path, release: str) -> str:
    """`tree` as a git repository of one commit (fixed identity and date), tagged with the
    release; its commit."""
    try:
        git(tree, "init", "-q", "-b", "main")
        git(tree, "add", "-A", "-f")
        git(tree, "commit", "-q", "-m", f"llama.cpp as vendored by {PACKAGE} {release}")
        git(tree, "tag", f"{PACKAGE}-{release}")
        return git(tree, "rev-parse", "HEAD").stdout.strip()
    except GitError as e:
        raise SourceError(f"cannot make the repository: {e}") from None


def llama_cpp_repo(release: str, into: Path, sdist: Path | None = None) -> str:
    """A git repository of llama.cpp as `release` vendors it, at `into`; its commit. `sdist`:
    the archive already downloaded (else pip fetches it)."""
    check_release(release)
    if sdist is None:
        with tempfile.TemporaryDirectory(prefix="sparkboard-sdist-") as tmp:
            unpack_tree(fetch_sdist(release, Path(tmp)), release, into)
    else:
        unpack_tree(sdist, release, into)
    try:
        return make_repo(into, release)
    except SourceError:
        shutil.rmtree(into, ignore_errors=True)
        raise
