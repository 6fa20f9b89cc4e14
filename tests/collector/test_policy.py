"""The policy file: every number of the rules is there, and a bad policy is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.manifest import parse_manifest
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
    assert gpu.guard_ctx == 4096 and gpu.concurrent_runs == gpu.reps == gpu.legs == 4
    # SmolLM2's window is 8192 tokens: the long contexts are not asked of it
    assert gpu.contexts_for("smollm2-135m") == (128, 512, 4096)
    assert gpu.contexts_for("llama-8b:q4_0") == (128, 512, 4096, 16384, 32768)
    assert gpu.guard_ctx_for("smollm2-135m") == 4096
    assert resolve(p, "cpu").profile.backend == "numpy"


def _bad(tmp_path: Path, old: str, new: str) -> str:
    text = default_policy_path().read_text()
    assert old in text
    f = tmp_path / "p.toml"
    f.write_text(text.replace(old, new, 1))
    with pytest.raises(PolicyError) as e:
        load_policy(f)
    return str(e.value)


def test_guard_context_falls_back_to_the_largest_that_fits(tmp_path: Path) -> None:
    text = (
        default_policy_path()
        .read_text()
        .replace("min_noise = 0.03", "min_noise = 0.03\nmax_context = { tiny = 100 }", 1)
    )
    f = tmp_path / "p.toml"
    f.write_text(text)
    cpu = resolve(load_policy(f), "cpu").profile
    assert cpu.contexts_for("tiny") == (32,) and cpu.guard_ctx_for("tiny") == 32
    assert cpu.contexts_for("tiny:q8_0") == (32, 128) and cpu.guard_ctx_for("tiny:q8_0") == 128


def test_bad_policies_are_clear_errors(tmp_path: Path) -> None:
    assert "tier gates must increase" in _bad(tmp_path, "S = 0.035", "S = 0.5")
    assert "guard_ctx 128 must be one of contexts" in _bad(
        tmp_path, "contexts = [32, 128]", "contexts = [32, 64]"
    )
    assert "unknown model" in _bad(tmp_path, 'models = ["tiny", "tiny:q8_0"]', 'models = ["gpt-9"]')
    assert "floor" in _bad(tmp_path, "floor = 0.98", "floor = 1.5")
    assert "no context fits the window of: tiny" in _bad(
        tmp_path, "min_noise = 0.03", "min_noise = 0.03\nmax_context = { tiny = 30 }"
    )
    assert (
        "min_noise_axes: not an axis name or a kind of axis (decode, prefill, concurrent): prefill128"
        in _bad(tmp_path, "min_noise_axes = { concurrent", "min_noise_axes = { prefill128")
    )
    assert "max_context names model(s) not in models: qwen3-8b" in _bad(
        tmp_path, "min_noise = 0.03", 'min_noise = 0.04\nmax_context = { "qwen3-8b" = 40 }'
    )
    assert "legs 6 exceeds reps 9 or concurrent_runs 5" in _bad(
        tmp_path, "pr_sessions = 2 ", "legs = 6\npr_sessions = 2 "
    )
    with pytest.raises(PolicyError, match="profile 'tpu' not in the policy"):
        resolve(load_policy(), "tpu")
    with pytest.raises(PolicyError, match="cannot read policy"):
        load_policy(tmp_path / "missing.toml")


def test_a_policy_extends_the_default_and_states_only_what_it_changes(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('extends = "default"\n[profiles.cpu]\ntokens = 4\n[verdict]\nfloor = 0.97\n')
    p, default = load_policy(f), load_policy()
    assert p.profiles["cpu"].tokens == 4 and p.verdict.floor == 0.97
    assert (
        p.profiles["cpu"].contexts == default.profiles["cpu"].contexts
    )  # the rest is the default's
    assert p.verdict.tiers == default.verdict.tiers and p.profiles["gpu"] == default.profiles["gpu"]
    # a relative base, and a loop refused
    g = tmp_path / "q.toml"
    g.write_text('extends = "p.toml"\n[profiles.cpu]\nreps = 5\n')
    q = load_policy(g)
    assert (q.profiles["cpu"].tokens, q.profiles["cpu"].reps, q.verdict.floor) == (4, 5, 0.97)
    f.write_text('extends = "q.toml"\n')
    with pytest.raises(PolicyError, match="extends itself"):
        load_policy(g)
    f.write_text("extends = 3\n")
    with pytest.raises(PolicyError, match="extends: a policy path"):
        load_policy(f)


def test_band_is_the_one_formula_of_how_far_a_ratio_must_leave_one() -> None:
    rules = load_policy().verdict
    assert rules.noise_multiplier == 1.5
    assert rules.band(0.15) == pytest.approx(1.15**1.5)
    assert rules.band(0.0) == 1.0
    gpu = resolve(load_policy(), "gpu").profile
    assert gpu.noise_floor("prefill@128") > gpu.noise_floor("decode@128") == gpu.min_noise


def test_a_kind_of_axis_has_a_floor_and_an_axis_its_own() -> None:
    """min_noise_axes names an axis or a kind: the cpu profile credits concurrent decode (every
    width) more noise than decode and prefill, and an axis's own entry wins over its kind's."""
    cpu = resolve(load_policy(), "cpu").profile
    assert cpu.noise_floor("decode@128") == cpu.noise_floor("prefill@32") == cpu.min_noise
    assert cpu.noise_floor("concurrent@2") == cpu.noise_floor("concurrent@16") > cpu.min_noise
    assert cpu.has_own_floor("concurrent@4") and not cpu.has_own_floor("decode@32")
    both = cpu.model_copy(update={"min_noise_axes": {"prefill": 0.1, "prefill@8000": 0.3}})
    assert both.noise_floor("prefill@8000") == 0.3 and both.noise_floor("prefill@32") == 0.1


def test_an_engine_kind_says_how_it_is_built_and_which_gates_judge_it(tmp_path: Path) -> None:
    """A served engine's profile must build its server and its tool; only it has a build gate,
    and the builtin engine's own harness checks do not judge it."""
    f = tmp_path / "p.toml"

    def profile(extra: str) -> str:
        f.write_text('extends = "default"\n[profiles.cpu]\n' + extra)
        try:
            resolve(load_policy(f), "cpu")
        except PolicyError as e:
            return str(e)
        return ""

    built = '\n[profiles.cpu.build]\ntargets = ["llama-server", "llama-perplexity"]\n'
    ok = 'engine = "llama.cpp"\nlong_context = {}\nmemory_budget_mib = {}' + built
    assert profile(ok) == ""
    p = resolve(load_policy(f), "cpu").profile
    assert p.applies("build") and p.applies("accuracy") and p.applies("memory")
    assert not p.applies("prefill-path") and p.applies("long-context")
    builtin = resolve(load_policy(), "cpu").profile
    assert not builtin.applies("build") and builtin.applies("prefill-path")
    assert "build.targets must name llama-perplexity" in profile(
        ok.replace(', "llama-perplexity"', "")
    )
    assert "build.targets must name llama-server, llama-perplexity" in profile(
        'engine = "llama.cpp"\nlong_context = {}\nmemory_budget_mib = {}'
    )
    assert profile('engine = "llama.cpp"' + built) == ""  # the cpu profile's long context
    assert "the builtin engine is not built" in profile(built)


def test_the_llama_demo_policy_is_a_built_served_profile() -> None:
    """data/demo/llama/policy.toml (its round needs llama.cpp's tree: make llama-demo)."""
    path = Path(__file__).resolve().parents[2] / "data" / "demo" / "llama" / "policy.toml"
    p = resolve(load_policy(path), "llama-cpu")
    assert p.profile.engine == "llama.cpp" and p.profile.build is not None
    assert p.profile.build.targets == ["llama-server", "llama-perplexity"]
    assert p.accuracy.bars("smollm2-135m").kl_max == 0.006 and p.forgery.tie_nats == 0.2


def test_the_llama_cuda_policy_serves_and_scores_on_the_gpu_and_builds_cuda() -> None:
    """data/demo/llama/cuda-policy.toml: the CPU round's policy with a profile for the CUDA
    backend; its backend (cupy) is what puts the servers and the perplexity tool on the GPU, and
    its bars are the CPU round's (read from main's build's tools, not the builtin engine's)."""
    from collector.run.commands import build_request
    from collector.schedule import Task

    folder = Path(__file__).resolve().parents[2] / "data" / "demo" / "llama"
    cuda = resolve(load_policy(folder / "cuda-policy.toml"), "llama-cuda")
    cpu = resolve(load_policy(folder / "policy.toml"), "llama-cpu")
    prof = cuda.profile
    assert prof.engine == "llama.cpp" and prof.backend == "cupy" and prof.build is not None
    assert {"-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90"} <= set(prof.build.options)
    assert prof.build.targets == ["llama-server", "llama-perplexity", "llama-bench"]
    assert cuda.accuracy.bars("smollm2-135m") == cpu.accuracy.bars("smollm2-135m")
    assert cuda.forgery.tie_nats == cpu.forgery.tie_nats == 0.2
    score = Task("r/pr1/score", "pr", 1, 0, "score", "smollm2-135m")
    for policy, device in ((cuda, "gpu"), (cpu, "cpu")):
        argv = build_request(score, policy).argv
        assert argv[argv.index("--device") + 1] == device


@pytest.mark.parametrize(
    ("manifest", "touches"),
    [("round.toml", ("ggml/src/ggml-cpu/", "src/")), ("cuda-h100.toml", ("ggml/src/ggml-cuda/",))],
)
def test_the_llama_demo_manifests_name_every_pr_verdict_and_patch(
    manifest: str, touches: tuple[str, ...]
) -> None:
    """data/demo/llama's rounds load without llama.cpp's tree (which only a round needs), each
    PR with the verdict it should get and its patch, every patch a change to the sources only
    (the CPU round: llama.cpp's library or its ggml CPU backend; the CUDA round: its CUDA
    backend)."""
    path = Path(__file__).resolve().parents[2] / "data/demo/llama" / manifest
    prs = parse_manifest(path.read_text(), path).pr
    assert all(p.expect for p in prs) and all(p.patch for p in prs)
    assert {p.expect for p in prs} == {"none", "REJECT"}
    for p in prs:
        lines = (path.parent / str(p.patch)).read_text().splitlines()
        touched = [ln[6:] for ln in lines if ln.startswith("+++ b/")]
        assert touched and all(t.startswith(touches) for t in touched), p.number
