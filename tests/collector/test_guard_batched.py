"""The guards' batched decode and the long-context decode: what a guard session and a long-context
check ask the harness (collector/run/commands.py), and a PR whose multi-sequence decode is wrong only
for a model it does not target (the red team's "quantized models skip the last layer, only in
batched decode") REJECTed through its guard session."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fake_repo import FakeRepo, pr
from pydantic import ValidationError

from collector.judge.forgery import diverged_evidence, upper_bound
from collector.policy import Profile, ResolvedPolicy, load_policy, resolve
from collector.run.collect import collect
from collector.run.commands import build_request
from collector.run.outcome import judge
from collector.run.runner import Place, Run, _command
from collector.samples import samples_of
from collector.schedule import Task, plan_round
from collector.store import open_store
from engine.harness.protocol import SweepResult

ROOT = Path(__file__).resolve().parents[2]
CPU = resolve(load_policy(), "cpu")
GPU = resolve(load_policy(), "gpu")


def task(kind: str, model: str = "tiny:q8_0") -> Task:
    return Task(f"r/pr1/{kind}", "pr", 1, 0, kind, model)


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_a_guard_session_also_decodes_its_widths_together() -> None:
    req = build_request(task("guard"), CPU)
    prof = CPU.profile
    assert req.kind == "sweep" and req.contexts == (prof.guard_ctx,)
    assert option(req.argv, "--widths") == "2" and req.widths == (2,)
    assert option(req.argv, "--width-tokens") == str(prof.concurrent_tokens)
    assert option(req.argv, "--width-runs") == str(prof.guard_width_runs) == "2"
    assert option(req.argv, "--prompt-len") == str(prof.prompt_len)
    gpu = build_request(task("guard", "smollm2-135m"), GPU)
    assert option(gpu.argv, "--widths") == "2"
    assert option(gpu.argv, "--width-tokens") == str(GPU.profile.concurrent_tokens)
    assert option(gpu.argv, "--prompt-len") == "128"
    # a target's sweep measures its widths in its concurrent sessions
    target = build_request(task("sweep", "tiny"), CPU)
    assert "--widths" not in target.argv and target.widths == ()
    # guard_widths = []: the guard sweep of before
    off = CPU.model_copy(update={"profile": prof.model_copy(update={"guard_widths": []})})
    plain = build_request(task("guard"), off)
    assert "--widths" not in plain.argv and "--width-tokens" not in plain.argv


def test_speed_sessions_ask_for_the_profiles_legs() -> None:
    """A profile's legs (pairs of engine processes per session) reach every speed session's
    command line; with one leg the option is left out (a harness from before it runs the same)."""
    assert all("--legs" not in build_request(task(k), CPU).argv for k in ("sweep", "guard"))
    two = CPU.model_copy(update={"profile": CPU.profile.model_copy(update={"legs": 2})})
    for kind in ("sweep", "guard", "concurrent"):
        assert option(build_request(task(kind), two).argv, "--legs") == "2"
    for kind in ("score", "prefill-check"):
        assert "--legs" not in build_request(task(kind), two).argv
    # the gpu profile: four legs, no untimed run per width (each side keeps its fastest of two)
    gpu = build_request(task("concurrent", "llama-1b:f16"), GPU).argv
    assert option(gpu, "--legs") == "4" and option(gpu, "--warmup") == "0"
    assert "--warmup" not in build_request(task("concurrent"), CPU).argv


def test_where_the_profile_says_a_targets_sweep_measures_its_concurrent_decode() -> None:
    """concurrent_in_sweep (the gpu profile): a target's sweep decodes the profile's widths after
    its contexts in the same pairs of processes, no concurrent session is planned, and the
    sweep's widths are the target's concurrent axes (a guard's stay verified, not compared)."""
    prof = GPU.profile
    assert prof.concurrent_in_sweep and not CPU.profile.concurrent_in_sweep
    req = build_request(task("sweep", "llama-8b:q4_0"), GPU)
    assert req.widths == tuple(prof.widths) and req.runs == prof.concurrent_runs
    assert option(req.argv, "--widths") == ",".join(map(str, prof.widths))
    assert option(req.argv, "--width-runs") == str(prof.concurrent_runs)
    assert option(req.argv, "--width-tokens") == str(prof.concurrent_tokens)
    assert option(req.argv, "--legs") == str(prof.legs)
    guard = build_request(task("guard", "smollm2-135m"), GPU)
    assert guard.widths == tuple(prof.guard_widths) and guard.runs == prof.guard_width_runs

    def kinds(policy: ResolvedPolicy) -> set[str]:
        slots = plan_round("r", [(1, [policy.profile.models[0]])], policy.profile)
        return {t.kind for s in slots for t in s.tasks}

    assert "concurrent" not in kinds(GPU) and "sweep" in kinds(GPU)
    assert {"sweep", "concurrent"} <= kinds(CPU)
    # the sweep's one --warmup serves its widths: a different concurrent_warmup is refused
    raw = prof.model_dump()
    with pytest.raises(ValidationError, match="concurrent_warmup"):
        Profile.model_validate({**raw, "warmup": 0, "concurrent_warmup": 1})
    timeouts = {k: v for k, v in raw["timeouts"].items() if k != "concurrent"}
    assert Profile.model_validate({**raw, "timeouts": timeouts}).concurrent_in_sweep
    with pytest.raises(ValidationError, match="timeouts missing for: concurrent"):
        Profile.model_validate({**raw, "timeouts": timeouts, "concurrent_in_sweep": False})


def test_a_targets_sweep_widths_are_its_concurrent_axes_and_a_guards_are_not() -> None:
    doc = _guard_doc(0.0)
    target = {ax for _, ax, _, _ in samples_of(doc)}
    assert "concurrent@2" in target and "decode@128" in target
    assert not any(ax.startswith("concurrent") for _, ax, _, _ in samples_of(doc, guard=True))
    # a width with fewer complete runs than asked for: the target's session is incomplete
    lost = {"tokens_expected": 16, "tokens_decoded": 9, "seconds": 0.01, "tok_s": 900.0}
    raw = doc.model_dump()
    idle = {"after_answer_s": [], "while_stopped_s": [], "stop_s": []}
    raw["baseline"] = {
        "commit": "main", "contexts": raw["contexts"], "widths": raw["widths"],
        "timing": raw["measured"]["timing"], "idle": idle,
    }  # fmt: skip
    raw["measured"]["idle"] = idle
    raw["widths"] = [{**raw["widths"][0], "runs": [raw["widths"][0]["runs"][0], lost]}]
    short = SweepResult.model_validate(raw)
    req = build_request(task("sweep"), CPU)
    req = dataclasses.replace(req, contexts=(128,), widths=(2,), runs=2, reps=3)
    run = Run(datetime.now(UTC), exit_code=0, document=short)
    got = judge(task("sweep"), req, run, CPU)
    assert (got.status, got.fault) == ("incomplete", "pr") and "c2: 1/2" in got.detail, got.detail
    # the same runs in a guard's sweep are not its axes: nothing is lost
    guard_req = dataclasses.replace(req, kind="sweep")
    assert judge(task("guard"), guard_req, run, CPU).status == "ok"


def test_the_long_context_check_decodes_long_context_tokens() -> None:
    for policy, model in ((CPU, "tiny"), (GPU, "llama-1b:f16")):
        argv = build_request(task("longctx", model), policy).argv
        assert option(argv, "--tokens") == "16" == str(policy.profile.long_context_tokens)
    # why 16: a decode wrong on 1 token in 4 cleared tiny's bar (0.958); on 4 in 16 it does not
    bar = CPU.accuracy.bars("tiny").top1_min
    assert upper_bound(3, 4, CPU.forgery.z) > bar
    assert upper_bound(12, 16, CPU.forgery.z) < bar


def test_profile_keys_are_checked() -> None:
    raw = CPU.profile.model_dump()
    with pytest.raises(ValidationError, match="appears twice"):
        Profile.model_validate({**raw, "guard_widths": [2, 2]})
    with pytest.raises(ValidationError):
        Profile.model_validate({**raw, "guard_widths": [0]})
    # a profile stored before the keys: a guard's widths and 16 long-context tokens
    old = {k: v for k, v in raw.items() if k not in ("guard_widths", "guard_width_runs")}
    old.pop("long_context_tokens")
    p = Profile.model_validate(old)
    assert (p.guard_widths, p.guard_width_runs, p.long_context_tokens) == ([2], 2, 16)


def _guard_doc(batched_margin: float) -> SweepResult:
    """A guard sweep whose single-sequence outputs are main's and whose batched ones have
    `batched_margin` (the verification report holds both, as the harness writes it)."""
    run = {"tokens_expected": 16, "tokens_decoded": 16, "seconds": 0.01, "tok_s": 1600.0}
    return SweepResult.model_validate(
        {
            "schema_version": 2, "model": "tiny:q8_0", "model_id": "x",
            "engine_commit": "unknown", "device": {"backend": "numpy", "name": "cpu"},
            "started_at": "2026-12-01T00:00:00Z", "wall_s": 1.0, "kind": "sweep",
            "tokens": 16, "reps": 3,
            "contexts": [
                {"ctx": 128, "decode_tokens": 16, "decode_tok_s": [1.0] * 3,
                 "prefill_tok_s": [1.0] * 3}
            ],
            "widths": [{"width": 2, "prompt_len": 16, "runs": [run, run]}],
            "width_tokens": 8,
            "measured": {
                "seed": 1,
                "timing": {"regions": [[0.01, 0.0099]] * 20},
                "verification": {
                    "reference": "main", "decode_margins": [0.0] * 144 + [batched_margin] * 96,
                    "prefill_margins": [0.0] * 9, "prefill_kl": [0.0] * 9,
                },
            },
        }
    )  # fmt: skip


def test_a_guard_sweeps_batched_outputs_are_held_to_main_like_a_concurrent_sessions() -> None:
    assert diverged_evidence(_guard_doc(0.0), "tiny:q8_0", CPU) is None
    why = diverged_evidence(_guard_doc(3.0), "tiny:q8_0", CPU)
    assert why and "generated tokens agree with main's model on 144 of 240" in why


def test_a_batched_decode_wrong_only_for_the_guard_is_a_reject(
    fake_repo: FakeRepo, tmp_path: Path
) -> None:
    r = fake_repo
    r.branch("honest", 'SPEED = {"tiny/decode": 1.12}')
    r.branch("skips", 'SPEED = {"tiny/decode": 1.12}\nWRONG_BATCHED = {"tiny:q8_0"}')
    m = r.manifest("guard-batched", [pr(1, "honest", expect="L"), pr(2, "skips", expect="REJECT")])
    db = tmp_path / "g.duckdb"
    assert collect(m, db, progress=False) == 0
    with open_store(db, read_only=True) as s:
        verdicts = dict(s.query("SELECT pr, label FROM verdicts WHERE round_id = 'guard-batched'"))
        reason = s.query("SELECT reason FROM verdicts WHERE pr = 2")[0][0]
        sessions = s.query(
            "SELECT side, pr, kind, model, status FROM sessions WHERE kind = 'guard' "
            "ORDER BY side, pr, slot"
        )
        widths = s.query(
            "SELECT DISTINCT document::JSON->>'$.widths[0].width' FROM sessions "
            "WHERE kind = 'guard' AND status = 'ok'"
        )
    assert verdicts == {1: "L", 2: "REJECT"}
    assert "computed something else" in reason and "tiny:q8_0" in reason
    # the PR's guard session of tiny:q8_0 is where it was caught; main's and the honest PR's pass
    assert ("pr", 2, "guard", "tiny:q8_0", "diverged") in sessions
    assert all(st == "ok" for side, n, _k, _m, st in sessions if side == "main" or n == 1)
    assert widths == [("2",)]  # every guard session decoded 2 sequences together


def test_the_long_context_check_is_given_mains_engine_beside_the_prs(tmp_path: Path) -> None:
    """Main's engine runs the long-context check beside the PR's (main's harness is given both
    checkouts): llama.cpp's, each build's server alone under the budget, the PR's outputs then
    held against main's server; the builtin engine's, each process alone under it, the PR's
    outputs held against main's model in the parent."""
    llama = ROOT / "data" / "demo" / "llama" / "policy.toml"
    policy = resolve(load_policy(llama), "llama-cpu")
    req = build_request(task("longctx", "smollm2-135m"), policy)
    assert option(req.argv, "--server") == "llama.cpp" and req.beside_main and req.timed
    assert option(req.argv, "--ctx") == "2048"
    assert option(req.argv, "--memory-budget") == str(256 * 2**20)
    # main's server and the PR's alternate, a server per leg (main PR PR main or its mirror)
    assert option(req.argv, "--legs") == "2" and option(req.argv, "--runs") is None
    place = Place(tmp_path / "main", tmp_path / "work", "none", None, tmp_path / "harness")
    argv, _, cwd = _command(req, tmp_path / "pr", place, tmp_path / "out.json", "pr", 1)
    assert option(argv, "--baseline-checkout") == str(tmp_path / "main") and cwd == place.harness
    # the builtin engine's check runs main's engine beside the PR's too, each process timing
    # the profile's long prefills
    builtin = build_request(task("longctx", "tiny"), CPU)
    assert builtin.beside_main and option(builtin.argv, "--server") is None
    assert option(builtin.argv, "--runs") == "2" == str(CPU.profile.long_context_runs)
    argv, _, _ = _command(builtin, tmp_path / "pr", place, tmp_path / "out.json", "pr", 1)
    assert option(argv, "--baseline-checkout") == str(tmp_path / "main")
