"""Main against itself on the real engine (NumPy backend, model tiny): every axis `none`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.manifest import toml_string
from collector.policy import load_policy, resolve

ROOT = Path(__file__).resolve().parents[2]


def small_policy() -> str:
    """The default policy with a smaller cpu profile: one model, one context, one width.

    It extends the default, so the cpu profile's calibrated noise floor (min_noise) and its
    harness environment stay as they are: a 2-core box's A/A spread is several percent on a
    good day, and an A/A test without that floor fails on it (a +6.6% concurrent@2 did)."""
    return """extends = "default"

[profiles.cpu]
models = ["tiny"]
contexts = [32]
guard_ctx = 32
tokens = 8
reps = 3
widths = [2]
concurrent_tokens = 4
concurrent_runs = 3
prompt_len = 8
prefill_prefixes = [16]
prefill_positions = 8
min_main_sessions = 2
main_every = 2
score_text = "README.md"
"""


def test_the_small_policy_keeps_the_calibrated_floor(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text(small_policy())
    small = resolve(load_policy(tmp_path / "policy.toml"), "cpu").profile
    default = resolve(load_policy(), "cpu").profile
    assert small.min_noise == default.min_noise > 0
    assert small.env == default.env
    assert small.models == ["tiny"] and small.widths == [2]


@pytest.mark.slow
def test_main_against_itself_on_the_engine(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text(small_policy())
    manifest = tmp_path / "aa.toml"
    manifest.write_text(
        f'round = "aa-engine"\nengine_repo = {toml_string(str(ROOT))}\nbase_ref = "HEAD"\n'
        'policy = "policy.toml"\nprofile = "cpu"\n\n[[pr]]\nnumber = 1\ntitle = "main"\n'
        'author = "sparkboard"\ntargets = ["tiny"]\nref = "HEAD"\n'
    )
    db = tmp_path / "aa.duckdb"
    res = CliRunner().invoke(main, ["collect", str(manifest), "--db", str(db), "--quiet"])
    assert res.exit_code == 0, res.output
    out = json.loads(CliRunner().invoke(main, ["show", "--db", str(db), "--json"]).output)
    assert out[0]["label"] == "none", out[0]["reason"]
    assert {c["tier"] for c in out[0]["comparisons"]} == {"none"}
    assert not any(c["below_floor"] or c["implausible"] for c in out[0]["comparisons"])
    assert {g["gate"]: g["status"] for g in out[0]["gates"]}["accuracy:tiny"] == "pass"
