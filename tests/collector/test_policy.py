"""The policy file: every number of the rules is there, and a bad policy is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.policy import PolicyError, default_policy_path, load_policy, resolve


def test_default_policy_holds_designs_numbers() -> None:
    p = load_policy()
    assert p.verdict.floor == 0.98 and p.verdict.implausible_gain == 20.0
    assert p.verdict.tiers == {"XS": 0.02, "S": 0.035, "M": 0.06, "L": 0.10, "XL": 0.18}
    assert (p.accuracy.top1_min, p.accuracy.kl_max, p.accuracy.ppl_ratio_max) == (0.93, 0.03, 1.02)
    assert (p.prefill_path.top1_margin, p.prefill_path.kl_factor, p.prefill_path.kl_margin) == (
        0.10,
        3.0,
        0.05,
    )
    assert "hold" in p.verdict.blocking_labels
    gpu = resolve(p, "gpu").profile
    assert gpu.contexts == [128, 512, 4096, 16384, 32768] and gpu.widths == [2, 4, 8, 16, 32]
    assert gpu.guard_ctx == 32768 and gpu.concurrent_runs == 3
    assert resolve(p, "cpu").profile.backend == "numpy"


def _bad(tmp_path: Path, old: str, new: str) -> str:
    text = default_policy_path().read_text()
    assert old in text
    f = tmp_path / "p.toml"
    f.write_text(text.replace(old, new, 1))
    with pytest.raises(PolicyError) as e:
        load_policy(f)
    return str(e.value)


def test_bad_policies_are_clear_errors(tmp_path: Path) -> None:
    assert "tier gates must increase" in _bad(tmp_path, "S = 0.035", "S = 0.5")
    assert "guard_ctx 128 must be one of contexts" in _bad(
        tmp_path, "contexts = [32, 128]", "contexts = [32, 64]"
    )
    assert "unknown model" in _bad(tmp_path, 'models = ["tiny", "tiny:q8_0"]', 'models = ["gpt-9"]')
    assert "floor" in _bad(tmp_path, "floor = 0.98", "floor = 1.5")
    with pytest.raises(PolicyError, match="profile 'tpu' not in the policy"):
        resolve(load_policy(), "tpu")
    with pytest.raises(PolicyError, match="cannot read policy"):
        load_policy(tmp_path / "missing.toml")
