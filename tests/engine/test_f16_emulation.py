"""engine.tools.emulation: the CUDA backend's float16 roundings on the NumPy runner."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from engine.errors import EngineError
from engine.models import load_weights
from engine.numpy_backend import NumpyRunner
from engine.tools.emulation import (
    Float16Emulation,
    beyond_tie_misses,
    kl_mean,
    main,
    teacher_forced_logits,
)


@pytest.fixture(scope="module")
def tiny():
    return load_weights("tiny:f32", np)


def ids(seed: int, n: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 49152, n)


def test_no_rounding_is_the_reference(tiny) -> None:
    prompt = ids(1)
    ref = teacher_forced_logits(NumpyRunner(tiny), prompt, 32)
    got = teacher_forced_logits(Float16Emulation(tiny, []), prompt, 32)
    assert np.array_equal(ref, got)


@pytest.mark.parametrize("rounding", ["gemm", "weights", "kv"])
def test_each_rounding_moves_the_logits_a_little(tiny, rounding) -> None:
    prompt = ids(2)
    ref = teacher_forced_logits(NumpyRunner(tiny), prompt, 32)
    got = teacher_forced_logits(Float16Emulation(tiny, [rounding]), prompt, 32)
    moved = np.abs(ref - got).max()
    assert 0 < moved < 0.1  # float16 has 11 significant bits; tiny's logits span about +-10


def test_gemm_rounding_is_prefill_only(tiny) -> None:
    prompt = ids(3, 8)
    ref, emu = NumpyRunner(tiny), Float16Emulation(tiny, ["gemm", "weights"])
    for r in (ref, emu):
        r.reset(1, 16)
    # decode alone from an empty cache: no prefill ran, so nothing was rounded
    for i in range(prompt.size):
        assert np.array_equal(
            ref.decode([0], prompt[i : i + 1]), emu.decode([0], prompt[i : i + 1])
        )


def test_the_kv_cache_holds_float16_values(tiny) -> None:
    emu = Float16Emulation(tiny, ["kv"])
    emu.reset(1, 16)
    emu.prefill(0, ids(4, 6))
    cached = emu._k[0][0, :, :6]
    assert np.array_equal(cached, cached.astype(np.float16).astype(np.float32))
    assert np.any(cached != 0)


def test_scores_of_a_comparison() -> None:
    ref = np.array([[0.0, 1.0, 0.995], [2.0, 0.0, 1.0]])
    got = np.array([[0.0, 0.9, 1.0], [0.0, 0.0, 3.0]])  # row 0: a tie; row 1: a miss by 1.0
    assert beyond_tie_misses(ref, got) == 1
    assert kl_mean(ref, ref) == pytest.approx(0.0, abs=1e-15)
    assert kl_mean(ref, got) > 0


def test_unknown_rounding_is_refused(tiny) -> None:
    with pytest.raises(EngineError, match="unknown rounding.*bf16"):
        Float16Emulation(tiny, ["bf16"])


def test_cli_prints_a_summary_per_run() -> None:
    res = CliRunner().invoke(
        main,
        ["--model", "tiny", "--trials", "2", "--prompt-len", "24", "--decode", "4", "--seed", "5"],
    )
    assert res.exit_code == 0, res.output
    assert res.stderr.count("trial ") == 2
    last = res.stdout.strip()
    assert last.startswith("tiny random x2 [gemm,weights,kv]: largest change prefill")
    assert "trials below top-1 0.99:" in last


def test_cli_refuses_bad_input() -> None:
    res = CliRunner().invoke(main, ["--model", "tiny", "--round", "gemm,fp8"])
    assert res.exit_code == 2 and "unknown rounding(s) fp8" in res.output
    res = CliRunner().invoke(
        main, ["--model", "tiny", "--prompts", "corpus", "--prompt-len", "5000"]
    )
    assert res.exit_code == 2 and "fewer than 5016" in res.output
