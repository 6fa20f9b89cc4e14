"""Manifest validation: every bad manifest is a clear error naming the field and the PR."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.manifest import (
    ManifestError,
    load_manifest,
    manifest_from_gh,
    manifest_to_toml,
    parse_manifest,
    round_kind,
    toml_string,
)

GOOD = """
round = "r1"
engine_repo = "."
base_ref = "main"
profile = "cpu"

[[pr]]
number = 7
title = "faster decode"
author = "alice"
labels = ["perf"]
targets = ["tiny"]
ref = "feature"
expect = "M"

[[pr]]
number = 8
title = "a patch"
author = "bob"
targets = ["tiny:q8_0"]
patch = "p.patch"
"""


def err(text: str) -> str:
    with pytest.raises(ManifestError) as e:
        parse_manifest(text, Path("m.toml"))
    return str(e.value)


def test_good_manifest_parses() -> None:
    m = parse_manifest(GOOD, Path("m.toml"))
    assert [p.number for p in m.pr] == [7, 8]
    assert m.pr[0].source == "ref:feature" and m.pr[1].source == "patch:p.patch"
    assert m.pr[0].expect == "M"


def test_missing_field_names_field_pr_and_line() -> None:
    msg = err(GOOD.replace('author = "bob"\n', ""))
    assert "PR #8" in msg and "author" in msg and "missing" in msg and "line 16" in msg


def test_missing_top_level_field() -> None:
    assert "profile: missing field" in err(GOOD.replace('profile = "cpu"\n', ""))


def test_unknown_model() -> None:
    msg = err(GOOD.replace('targets = ["tiny"]', 'targets = ["gpt-5"]'))
    assert "PR #7" in msg and "targets" in msg and "unknown model 'gpt-5'" in msg


def test_same_pr_twice() -> None:
    msg = err(GOOD.replace("number = 8", "number = 7"))
    assert "PR #7 is listed twice" in msg and "lines 7, 16" in msg


def test_ref_and_patch_both_or_neither() -> None:
    assert "exactly one of 'ref'" in err(
        GOOD.replace('ref = "feature"', 'ref = "feature"\npatch = "x"')
    )
    assert "exactly one of 'ref'" in err(GOOD.replace('ref = "feature"\n', ""))


def test_hostile_ref_shapes_refused() -> None:
    for bad in ["--upload-pack=evil", "a b", "x..y", "a\\nb"]:
        assert "not a usable git ref" in err(
            GOOD.replace('ref = "feature"', f"ref = {toml_string(bad)}")
        )


def test_unknown_field_and_bad_expect() -> None:
    assert "extra" in err(GOOD.replace('expect = "M"', 'expect = "M"\ncolour = "red"')).lower()
    assert "PR #7" in err(GOOD.replace('expect = "M"', 'expect = "HUGE"'))


def test_bad_round_id_and_toml() -> None:
    assert "round" in err(GOOD.replace('round = "r1"', 'round = "../etc"'))
    assert "not valid TOML" in err("round = ")


def test_missing_patch_file(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(
        GOOD.replace('engine_repo = "."', f"engine_repo = {toml_string(str(tmp_path))}")
    )
    with pytest.raises(ManifestError, match=r"PR #8, line 16: patch: no file"):
        load_manifest(tmp_path / "m.toml")


def test_toml_string_round_trips_hostile_text() -> None:
    nasty = 'a"b\\c\n\t\x00\x7f é 🎉 `x` | <script> @admin'
    assert tomllib.loads(f"s = {toml_string(nasty)}")["s"] == nasty


def test_from_gh_builds_a_manifest() -> None:
    gh = [
        {
            "number": 12,
            "title": 'perf: "fast" `decode` | <b>@maintainer</b>',
            "author": {"login": "mallory"},
            "labels": [{"name": "hold"}, {"name": "perf"}],
            "headRefOid": "a" * 40,
            "headRefName": "feat/x; rm -rf /",
            "body": "Speeds up llama-8b:q4_0 decode, also helps tiny.",
        },
        {
            "number": 13,
            "title": "no model named",
            "author": {"login": "bob"},
            "labels": [],
            "headRefOid": "b" * 40,
            "headRefName": "b",
            "body": "",
        },
    ]
    m = manifest_from_gh(json.dumps(gh), "r9", ".", "main", "gpu", ["llama-1b"])
    assert m.pr[0].targets == ["tiny", "llama-8b:q4_0"]
    assert m.pr[0].labels == ["hold", "perf"] and m.pr[0].author == "mallory"
    assert m.pr[1].targets == ["llama-1b"]
    again = parse_manifest(manifest_to_toml(m), Path("x.toml"))
    assert again == m
    with pytest.raises(ManifestError, match="PR #13: its body names no known model"):
        manifest_from_gh(json.dumps(gh), "r9", ".", "main", "gpu", [])


def test_from_gh_cli(tmp_path: Path) -> None:
    gh = [
        {
            "number": 1,
            "title": "t",
            "author": {"login": "a"},
            "labels": [],
            "headRefOid": "c" * 40,
            "headRefName": "x",
            "body": "tiny",
        }
    ]
    f = tmp_path / "gh.json"
    f.write_text(json.dumps(gh))
    r = CliRunner().invoke(
        main, ["manifest", "from-gh", str(f), "--round", "r1", "--profile", "cpu"]
    )
    assert r.exit_code == 0, r.output
    assert tomllib.loads(r.output)["pr"][0]["ref"] == "c" * 40


def test_kind_defaults_to_round_and_takes_aa() -> None:
    assert parse_manifest(GOOD, Path("m.toml")).kind == "round"
    aa = parse_manifest(GOOD.replace('profile = "cpu"', 'profile = "cpu"\nkind = "aa"'), Path("m"))
    assert aa.kind == "aa"
    assert 'kind = "aa"' in manifest_to_toml(aa)
    assert parse_manifest(manifest_to_toml(aa), Path("x.toml")) == aa
    assert "kind" not in manifest_to_toml(parse_manifest(GOOD, Path("m.toml")))


def test_bad_kind_names_the_field() -> None:
    msg = err(GOOD.replace('profile = "cpu"', 'profile = "cpu"\nkind = "calibration"'))
    assert msg.startswith("manifest m.toml: kind:") and "'round'" in msg and "'aa'" in msg


def test_round_kind_of_stored_manifests() -> None:
    assert round_kind(GOOD) == "round"
    assert round_kind(GOOD.replace('profile = "cpu"', 'profile = "cpu"\nkind = "aa"')) == "aa"
    assert round_kind("not = [toml") == "round" and round_kind(None) == "round"
    # Written before `kind` existed: A/A when every PR carries the a/a label.
    assert round_kind(GOOD, [["a/a"], ["x", "a/a"]]) == "aa"
    assert round_kind(GOOD, [["a/a"], ["perf"]]) == "round"
    # An explicit kind wins over labels.
    assert (
        round_kind(GOOD.replace('profile = "cpu"', 'kind = "round"\nprofile = "cpu"'), [["a/a"]])
        == "round"
    )


def test_demo_aa_manifest_is_an_aa_round() -> None:
    root = Path(__file__).resolve().parents[2]
    assert load_manifest(root / "data" / "demo" / "aa-round.toml").manifest.kind == "aa"
    assert load_manifest(root / "data" / "demo" / "demo.toml").manifest.kind == "round"
