"""build — a built engine's checkout (llama.cpp) must build: a PR whose build the compiler or
CMake refused is a REJECT, its page showing the compiler's own first error lines (collected by
collector/run/build.py; a build the box failed is built again, never judged)."""

from __future__ import annotations

from collector.results import Gate

KIND = "build"
BUILD_FAILED = "build-failed"  # the candidate's status (its detail: the compiler's lines)


def build_gate(candidate: dict) -> Gate:
    """The failed build gate of a candidate whose build failed; its reason is the verdict's."""
    lines = (candidate["detail"] or "").splitlines() or ["the build failed"]
    return Gate(KIND, "fail", "The build failed: " + " | ".join(lines))
