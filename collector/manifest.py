"""Round manifests: TOML validated with pydantic, and building one from `gh pr list` output.

A manifest names the engine repo, the base ref, the policy, the profile and the PRs. Every
error names the field, the PR and the line of its [[pr]] table, and is raised before anything
is measured. Strings a PR author controls are kept verbatim; nothing here ever reaches a shell.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from collector.axes import is_known_model, known_models

LABELS = ("XL", "L", "M", "S", "XS", "none", "REJECT", "needs-rebase", "harness-touched", "pending")
ROUND_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$"
# What a round is for: "round" measures PRs; "aa" measures main against itself (every PR is main
# byte for byte), a calibration of the noise and accuracy gates, never a leaderboard.
ROUND_KINDS = ("round", "aa")
AA_LABEL = "a/a"  # the label of an A/A PR: marks the A/A rounds of manifests older than `kind`
# A git ref or commit as given: no whitespace or control characters, no leading '-', no '..'.
_REF = re.compile(r"^(?!-)(?!.*\.\.)[^\x00-\x20\x7f~^:?*\[\\]{1,200}$")


class ManifestError(Exception):
    """A manifest that cannot be used, described in one line."""


class PRSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    number: Annotated[int, Field(gt=0)]
    title: Annotated[str, Field(max_length=1000)]
    author: Annotated[str, Field(min_length=1, max_length=200)]
    labels: list[Annotated[str, Field(max_length=200)]] = []
    targets: list[str] = Field(min_length=1)
    ref: str | None = None
    patch: str | None = None
    branch: Annotated[str, Field(max_length=300)] | None = None
    expect: Literal[LABELS] | None = None  # type: ignore[valid-type]

    @field_validator("targets")
    @classmethod
    def _known_targets(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if not is_known_model(m)]
        if bad:
            raise ValueError(f"unknown model {bad[0]!r} (known: {', '.join(known_models())})")
        if len(set(v)) != len(v):
            raise ValueError("a target is listed twice")
        return v

    @field_validator("ref")
    @classmethod
    def _ref_shape(cls, v: str | None) -> str | None:
        if v is not None and not _REF.match(v):
            raise ValueError(f"{v!r} is not a usable git ref or commit")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> PRSpec:
        if (self.ref is None) == (self.patch is None):
            raise ValueError("give exactly one of 'ref' (a git ref or commit) or 'patch' (a file)")
        return self

    @property
    def source(self) -> str:
        return f"ref:{self.ref}" if self.ref is not None else f"patch:{self.patch}"


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    round: Annotated[str, Field(pattern=ROUND_ID)]
    engine_repo: Annotated[str, Field(min_length=1)]
    base_ref: str = "HEAD"
    policy: str | None = None
    # a profile of the policy ("cpu", "gpu", or one the manifest's policy file adds, such as a
    # served engine's): checked against the policy when the round starts
    profile: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,40}$")]
    kind: Literal[ROUND_KINDS] = "round"  # type: ignore[valid-type]
    pr: list[PRSpec] = Field(min_length=1)

    @field_validator("base_ref")
    @classmethod
    def _base_shape(cls, v: str) -> str:
        if not _REF.match(v):
            raise ValueError(f"{v!r} is not a usable git ref or commit")
        return v

    @model_validator(mode="after")
    def _unique_prs(self) -> Manifest:
        seen: set[int] = set()
        for p in self.pr:
            if p.number in seen:
                raise ValueError(f"PR #{p.number} is listed twice")
            seen.add(p.number)
        return self


class LoadedManifest(BaseModel):
    """A validated manifest with its paths resolved."""

    model_config = ConfigDict(frozen=True)

    manifest: Manifest
    path: Path
    text: str
    repo: Path | str  # a local path, or a URL to clone
    policy_path: Path | None
    patches: dict[int, Path]  # PR number -> absolute patch file


def _pr_lines(text: str) -> list[int]:
    """Line numbers (1-based) of each [[pr]] table header, in order."""
    return [
        i + 1
        for i, line in enumerate(text.splitlines())
        if re.match(r"^\s*\[\[\s*pr\s*\]\]\s*(#.*)?$", line)
    ]


def _describe(err: dict, data: dict, text: str, path: Path) -> str:
    loc = list(err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    where = f"manifest {path}"
    if loc and loc[0] == "pr" and len(loc) > 1 and isinstance(loc[1], int):
        idx = loc[1]
        lines = _pr_lines(text)
        prs = data.get("pr", [])
        number = prs[idx].get("number") if idx < len(prs) and isinstance(prs[idx], dict) else None
        who = f"PR #{number}" if isinstance(number, int) else f"[[pr]] #{idx + 1}"
        line = f", line {lines[idx]}" if idx < len(lines) else ""
        field = ".".join(str(x) for x in loc[2:]) or "(table)"
        if err["type"] == "missing":
            msg = "missing field"
        return f"{where}: {who}{line}: {field}: {msg}"
    field = ".".join(str(x) for x in loc) or "(top level)"
    if err["type"] == "missing":
        msg = "missing field"
    if "listed twice" in msg:
        field = "pr"
        m = re.search(r"#(\d+)", msg)
        lines = _pr_lines(text)
        if m:
            numbers = [p.get("number") for p in data.get("pr", []) if isinstance(p, dict)]
            hits = [
                lines[i] for i, n in enumerate(numbers) if n == int(m.group(1)) and i < len(lines)
            ]
            if hits:
                msg += f" (lines {', '.join(map(str, hits))})"
    return f"{where}: {field}: {msg}"


def git_toplevel(start: Path) -> Path | None:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", str(start), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def parse_manifest(text: str, path: Path) -> Manifest:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"manifest {path}: not valid TOML: {e}") from None
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        raise ManifestError(_describe(e.errors()[0], data, text, path)) from None


def load_manifest(path: str | Path) -> LoadedManifest:
    """Read, validate and resolve a manifest file (no git work beyond finding the repo root)."""
    path = Path(path).resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ManifestError(f"cannot read manifest {path}: {e.strerror}") from None
    m = parse_manifest(text, path)
    root = git_toplevel(path.parent) or path.parent
    repo: Path | str
    if re.match(r"^[a-z][a-z0-9+.-]*://", m.engine_repo) or m.engine_repo.startswith("git@"):
        repo = m.engine_repo
    else:
        repo = (root / m.engine_repo).resolve()
        if not repo.is_dir():
            raise ManifestError(f"manifest {path}: engine_repo: {repo} is not a directory")
    policy_path = None
    if m.policy:
        policy_path = (path.parent / m.policy).resolve()
        if not policy_path.is_file():
            raise ManifestError(f"manifest {path}: policy: no file {policy_path}")
    patches: dict[int, Path] = {}
    lines = _pr_lines(text)
    for i, p in enumerate(m.pr):
        if p.patch is None:
            continue
        pp = (path.parent / p.patch).resolve()
        if not pp.is_file():
            line = f", line {lines[i]}" if i < len(lines) else ""
            raise ManifestError(f"manifest {path}: PR #{p.number}{line}: patch: no file {pp}")
        patches[p.number] = pp
    return LoadedManifest(
        manifest=m, path=path, text=text, repo=repo, policy_path=policy_path, patches=patches
    )


def round_kind(manifest_toml: str | None, pr_labels: list[list[str]] | None = None) -> str:
    """The kind of a stored round ("round" or "aa") from its manifest text (rounds.manifest_toml).

    Read leniently: the text was validated when the round ran. A manifest without `kind` (one
    written before the field existed) is an A/A round when every PR of it carries the label
    "a/a" (as data/demo/aa-round.toml's do), else a plain round."""
    try:
        data = tomllib.loads(manifest_toml or "")
    except tomllib.TOMLDecodeError:
        data = {}
    kind = data.get("kind")
    if kind in ROUND_KINDS:
        return kind
    if kind is None and pr_labels and all(AA_LABEL in labels for labels in pr_labels):
        return "aa"
    return "round"


# --- from-gh ---------------------------------------------------------------------------------


def toml_string(s: str) -> str:
    """A TOML basic string holding s exactly (control characters escaped)."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04X}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\uFFFD")  # a lone surrogate cannot be written in TOML
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def manifest_to_toml(m: Manifest) -> str:
    lines = []
    for key in ("round", "engine_repo", "base_ref", "policy", "profile", "kind"):
        v = getattr(m, key)
        if key == "kind" and v == "round":
            continue  # the default: a plain round's manifest reads as before
        if v is not None:
            lines.append(f"{key} = {_toml_value(v)}")
    for p in m.pr:
        lines.append("")
        lines.append("[[pr]]")
        for key in (
            "number",
            "title",
            "author",
            "labels",
            "targets",
            "ref",
            "patch",
            "branch",
            "expect",
        ):
            v = getattr(p, key)
            if v is not None:
                lines.append(f"{key} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


def targets_from_body(body: str) -> list[str]:
    """Model names a PR body mentions, in the engine's spelling, longest match first."""
    found: list[str] = []
    for name in sorted(known_models(), key=len, reverse=True):
        pat = r"(?<![\w:.-])" + re.escape(name) + r"(?![\w:-]|\.\w)"
        if re.search(pat, body, flags=re.IGNORECASE) and not any(f.startswith(name) for f in found):
            found.append(name)
    return sorted(found, key=known_models().index)


def manifest_from_gh(
    gh_json: str,
    round_id: str,
    engine_repo: str,
    base_ref: str,
    profile: str,
    default_targets: list[str],
    policy: str | None = None,
) -> Manifest:
    """Build a manifest from `gh pr list --json number,title,author,labels,headRefOid,headRefName,body`."""
    try:
        items = json.loads(gh_json)
    except json.JSONDecodeError as e:
        raise ManifestError(f"gh output is not JSON: {e}") from None
    if not isinstance(items, list):
        raise ManifestError("gh output must be a JSON list (gh pr list --json ...)")
    prs = []
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            raise ManifestError(f"gh output item {i}: not an object")
        try:
            number = it["number"]
            author = it.get("author") or {}
            login = author.get("login") if isinstance(author, dict) else str(author)
            labels = [
                lb["name"] if isinstance(lb, dict) else str(lb) for lb in it.get("labels") or []
            ]
            body = it.get("body") or ""
            targets = targets_from_body(body) or list(default_targets)
            if not targets:
                raise ManifestError(f"PR #{number}: its body names no known model; pass --targets")
            prs.append(
                {
                    "number": number,
                    "title": it.get("title") or "",
                    "author": login or "unknown",
                    "labels": labels,
                    "targets": targets,
                    "ref": it["headRefOid"],
                    "branch": it.get("headRefName"),
                }
            )
        except KeyError as e:
            raise ManifestError(f"gh output item {i}: missing field {e.args[0]!r}") from None
    data = {
        "round": round_id,
        "engine_repo": engine_repo,
        "base_ref": base_ref,
        "profile": profile,
        "pr": prs,
    }
    if policy:
        data["policy"] = policy
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = list(err["loc"])
        if loc[:1] == ["pr"] and len(loc) > 1:
            num = prs[loc[1]]["number"]
            raise ManifestError(
                f"gh output: PR #{num}: {'.'.join(map(str, loc[2:]))}: {err['msg']}"
            ) from None
        raise ManifestError(f"gh output: {'.'.join(map(str, loc))}: {err['msg']}") from None
