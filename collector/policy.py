"""The policy file: every number of the verdict rules, and what each profile measures."""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from collector.axes import SPEED_KINDS, is_axis, is_known_model
from collector.results import GATE_ORDER

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
PosInt = Annotated[int, Field(gt=0)]
# The tiers of a significant gain, weakest first (their gates are in policy.toml [verdict]).
TIER_NAMES = ("XS", "S", "M", "L", "XL")
# Every label a verdict can carry: a tier, no significant gain, a broken rule, or not judged yet.
LABELS = (*TIER_NAMES, "none", "REJECT", "needs-rebase", "harness-touched", "pending")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VerdictRules(_Strict):
    floor: Annotated[float, Field(gt=0.0, le=1.0)] = 0.98
    implausible_gain: Annotated[float, Field(gt=1.0)] = 20.0
    tiers: dict[str, Annotated[float, Field(gt=0.0)]]
    confidence: Annotated[float, Field(gt=0.5, lt=1.0)] = 0.95
    bootstrap_resamples: Annotated[int, Field(ge=100)] = 2000
    bootstrap_seed: int = 0
    noise_multiplier: Annotated[float, Field(ge=0.0)] = 1.0
    # How many standard errors of a PR's mean session the band spans, a session's standard
    # deviation being the round's estimate on the axis (stats.session_sds)
    sessions_z: Annotated[float, Field(ge=0.0)] = 4.0
    # Degrees of freedom the round's session sd counts for beside a PR's own sessions
    # (stats.moderated_sd)
    sessions_prior_dof: Annotated[float, Field(ge=0.0)] = 4.0
    blocking_labels: list[str] = []
    strikes_to_reject: Annotated[int, Field(ge=1)] = 2

    @model_validator(mode="after")
    def _tiers_ordered(self) -> VerdictRules:
        if tuple(self.tiers) != TIER_NAMES:
            raise ValueError(f"tiers must be {', '.join(TIER_NAMES)} in that order")
        gates = list(self.tiers.values())
        if gates != sorted(gates) or len(set(gates)) != len(gates):
            raise ValueError("tier gates must increase from XS to XL")
        return self

    def tier(self, delta: float) -> str:
        """The tier a gain reaches: 'none' under the first gate."""
        label = "none"
        for name, gate in self.tiers.items():
            if delta >= gate - 1e-12:
                label = name
        return label

    @property
    def gate(self) -> float:
        return self.tiers["XS"]

    def band(self, noise: float) -> float:
        """How far PR / main must leave 1 (above it for a gain, below 1 / band for a loss) when
        the axis's noise is `noise`: (1 + noise) ** noise_multiplier, a ratio, since timing
        noise is multiplicative; a neutral PR then almost never leaves it by chance."""
        return (1 + noise) ** self.noise_multiplier

    def round_noise(self, session_sd: float, sessions: int) -> float:
        """The noise whose band spans `sessions_z` standard errors of the mean of `sessions`
        sessions that each stray `session_sd` (log ratio): exp(z * sd / sqrt(n)) is the band,
        so a PR of main's speed leaves it by chance about as rarely as a normal variable leaves
        z standard deviations. 0 when the band is off (noise_multiplier 0) or nothing is known."""
        if self.noise_multiplier <= 0 or session_sd <= 0 or sessions < 1:
            return 0.0
        return math.exp(self.sessions_z * session_sd / (self.noise_multiplier * sessions**0.5)) - 1


class AccuracyBars(_Strict):
    top1_min: Fraction = 0.93
    kl_max: Annotated[float, Field(ge=0.0)] = 0.03
    ppl_ratio_max: Annotated[float, Field(ge=1.0)] = 1.02
    # a position where the PR's top token is within this many nats of main's top token, under
    # main's log-probs, agrees on top-1: a near-tie that another summation order flips (a
    # kernel's new tiling does) is no accuracy lost; 0 counts every flip (collector/judge/accuracy.py)
    top1_tie_nats: Annotated[float, Field(ge=0.0, le=5.0)] = 0.0


class AccuracyRules(AccuracyBars):
    topk: PosInt = 16
    models: dict[str, AccuracyBars] = {}
    # model -> an independent implementation's score dump (a path in the engine repository, read
    # at main's commit); the PR's distance to it may exceed main's by at most these allowances
    reference: dict[str, str] = {}
    reference_kl_excess: Annotated[float, Field(ge=0.0)] = 0.001
    reference_top1_drop: Fraction = 0.01

    def bars(self, model: str) -> AccuracyBars:
        default = self.model_dump(include=set(AccuracyBars.model_fields))
        return self.models.get(model, AccuracyBars(**default))


class PrefillPathRules(_Strict):
    top1_margin: Fraction = 0.10
    kl_factor: Annotated[float, Field(ge=1.0)] = 3.0
    kl_margin: Annotated[float, Field(ge=0.0)] = 0.05


class FailureRules(_Strict):
    infra_retries: Annotated[int, Field(ge=0)] = 2
    retry_wait_s: Annotated[float, Field(ge=0.0)] = 2.0
    min_free_disk_mb: Annotated[int, Field(ge=0)] = 200
    max_document_mb: PosInt = 64
    infra_patterns: list[str] = []
    # A PR's later sessions in a round are skipped once one of its sessions ends so: its verdict
    # is a REJECT at once whatever they would show, and their device time is saved. Empty (the
    # default, and every round stored before the key): every session runs.
    stop_after: list[Literal["crash", "malformed", "implausible", "forged", "diverged"]] = []


MIN_REGIONS = 2  # timed regions the clock rules need to judge a document or a group


class ForgeryRules(BaseModel):
    """The numbers of collector/judge/forgery.py's checks (its docstring says what each rule does)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # the engine's own time may be this much shorter than the parent's in the median region ...
    timing_rel_gap: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.25
    # ... and this many seconds (pipe hops and a loaded box: measured 0.06 ms median, 0.1 ms p90)
    timing_abs_gap_s: Annotated[float, Field(ge=0.0)] = 0.0002
    # an engine figure longer than the parent's by this much in the median region: a fast clock
    timing_rel_over: Annotated[float, Field(ge=0.0)] = 0.05
    # a group of timed regions (one operation at one shape) this large is judged on its own too;
    # smaller ones only within the whole document
    timing_min_group: Annotated[int, Field(ge=MIN_REGIONS)] = 5
    # a generated token within this many nats of main's best counts as main's pick (ties)
    tie_nats: Annotated[float, Field(ge=0.0)] = 1e-3
    # one-sided z of the agreement's confidence bound (2.33: 99%): small samples decide nothing
    z: Annotated[float, Field(gt=0.0)] = 2.33
    # A served engine's outputs where main's own miss the model's bar against main's server (the
    # server's paths round apart): the PR's disagreement may reach this many times main's own,
    # each at the end of its interval. Measured 2026-12-06 on an H100 (data/demo/llama/README.md,
    # "On the GPU"): runtime no-ops read 0.94-1.87 times main's own beyond-tie flips in the same
    # session (the flips cluster: a sample's tokens after its first flip are a context main never
    # generated), so a binomial bound alone would call an honest PR's unlucky session diverged.
    own_factor: Annotated[float, Field(ge=1.0)] = 2.0
    # Turns (engine/harness/turns.py): CPU seconds an engine's processes may use between and
    # after its answers (or the GPU stay busy after its turns), beyond main's engine beside it,
    # in a whole session, at least ...
    idle_cpu_s: Annotated[float, Field(gt=0.0)] = 0.01
    # ... and at most this share of the time it was watched idle (a core kept busy: ~1)
    idle_share: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    # one stop of every process this long or longer: something kept starting processes
    idle_stop_s: Annotated[float, Field(gt=0.0)] = 1.5
    # The CPU its processes use inside its requests may exceed those requests' wall time times
    # the cores the session gave them by this share (and idle_cpu_s): the wall-clock interval of
    # each request holds its CPU readings, so an engine on one core reads at most 1x
    core_slack: Annotated[float, Field(ge=0.0, le=1.0)] = 0.02
    # The GPU after a turn: a reading up to this is the device-idle probe's own (its first launch
    # after another process's context, a little more now and then) ...
    device_turn_s: Annotated[float, Field(gt=0.0)] = 0.005
    # ... and this many of each engine's largest readings are left out of its sum (another
    # process's kernels in a turn); main's engine busy beyond device_turn_s after more of its
    # turns than this: the device was shared
    device_spare_turns: Annotated[int, Field(ge=0, le=3)] = 1


class HarnessRules(_Strict):
    bench: list[str] = Field(min_length=1)
    score: list[str] = Field(min_length=1)
    server_score: list[str] = ["{python}", "-m", "engine.harness.server_score"]
    paths: list[str]
    corpus: str = "data/corpus.txt"


ENGINE_KINDS = ("builtin", "llama.cpp")
# The gates each engine kind is judged by (results.GATE_ORDER's kinds): a served engine is not
# judged by the builtin engine's own harness checks (the batched prefill check, the long-context
# check) nor against llama.cpp as an independent reference; only a built engine has a build.
NOT_APPLICABLE = {
    "builtin": ("build",),
    "llama.cpp": ("reference", "prefill-path"),
}
ENGINE_GATES = {k: tuple(g for g in GATE_ORDER if g not in NOT_APPLICABLE[k]) for k in ENGINE_KINDS}
# What a served engine's build must make: the server it is timed through, the tool it is scored
# with (engine/harness/server_engine.py, server_score.py)
SERVER_TARGETS = ("llama-server", "llama-perplexity")


class BuildRecipe(_Strict):
    """How a checkout of a built engine is built (collector/run/build.py): CMake's options, the
    targets, parallel compiles (0: every core the collector may use) and the deadline."""

    options: list[str] = []
    targets: list[str] = Field(min_length=1)
    jobs: Annotated[int, Field(ge=0)] = 0
    timeout_s: PosInt = 3600


class Profile(_Strict):
    backend: Literal["numpy", "cupy", "auto"]
    # The engine a round's checkouts hold: "builtin", this repo's (Python: nothing to build), or
    # "llama.cpp", built from each checkout with `build` and timed through its own server, scored
    # with its own perplexity tool against main's build. The gates that need the builtin
    # engine's own harness commands (the batched prefill check, the long-context check) do not
    # apply to a served engine (`applies`).
    engine: Literal["builtin", "llama.cpp"] = "builtin"
    build: BuildRecipe | None = None
    # a served engine's compute threads (each server has them to itself during its turns)
    server_threads: PosInt = 1
    # a served engine's accuracy: the perplexity tool's window and the windows of score_text
    kld_ctx: Annotated[int, Field(ge=16)] = 128
    kld_chunks: PosInt = 8
    models: list[str] = Field(min_length=1)
    contexts: list[PosInt] = Field(min_length=1)
    guard_ctx: PosInt
    # A guard sweep then decodes these widths of sequences together in the same engine process
    # (`concurrent_tokens` each, `guard_width_runs` runs), its outputs verified against main's
    # model with the rest: a batched decode broken only for a model the PR does not target is
    # `diverged`. Empty: guards decode one sequence at a time only.
    guard_widths: list[PosInt] = [2]
    guard_width_runs: PosInt = 2
    tokens: PosInt
    reps: PosInt
    # seconds each engine spends on an operation per repetition (the harness's --min-time): a
    # short operation is run again and again, its fastest run kept
    min_time: Annotated[float, Field(gt=0.0, le=10.0)] = 0.1
    # untimed repetitions per context of a sweep (the harness's --warmup; unset: its default)
    warmup: Annotated[int, Field(ge=0)] | None = None
    # untimed runs per width of a concurrent session, in each leg (unset: the harness's default,
    # one, whose untimed run also captures the width's graph)
    concurrent_warmup: Annotated[int, Field(ge=0)] | None = None
    widths: list[PosInt] = Field(min_length=1)
    # A target's concurrent decode measured in its sweep session, after the contexts, in the same
    # pairs of engine processes (the sweep's `warmup`, `concurrent_runs` runs), instead of in a
    # session of its own: one start of the engines (and of the reference model that verifies
    # them) serves both (policy.toml's gpu profile: what a session's start costs there)
    concurrent_in_sweep: bool = False
    concurrent_tokens: PosInt
    concurrent_runs: PosInt
    prompt_len: PosInt
    prefill_prefixes: list[PosInt] = Field(min_length=1)
    prefill_positions: PosInt
    # paired sessions per PR (main's engine timed beside the PR's in each): a verdict on speed
    # must hold in each, and the spread between them is the axis's noise
    pr_sessions: PosInt = 2
    # Pairs of engine processes per speed session, one after another (the harness's --legs), the
    # repetitions (reps, concurrent_runs, guard_width_runs) dealt over them: a process settles at
    # a speed of its own that more repetitions in it never average out (policy.toml's gpu profile)
    legs: PosInt = 1
    # Timed sessions more for each PR whose verdict rests on speed alone (a tier, or a REJECT for
    # a loss), run after the planned ones: a burst of load that hit a PR's planned sessions does
    # not decide its verdict (collector/README.md, "Verdict rules"). 0: no confirmation.
    confirm_sessions: Annotated[int, Field(ge=0)] = 1
    score_text: str = "data/corpus.txt"
    env: dict[str, str] = {}  # extra environment for the harness subprocesses
    # Every session's processes (the timing parent and both engines beside it) on one core, the
    # last this collector may use: the two engines take turns on the same core's caches, and
    # nothing moves them between cores mid-turn (policy.toml's cpu profile has the measurement)
    one_core: bool = False
    # With one_core: the engines of a speed session load on this many cores of the collector's
    # own first (never its last eight, a host's shards' session cores: runner.load_cores), side
    # by side, and the timing parent moves every thread of each onto the session's core before
    # the first turn (turns.TurnTaker.hold). 0: they load on the session's core, taking turns.
    load_cores: Annotated[int, Field(ge=0, le=64)] = 0
    # The least noise an axis is credited with, whatever the spread between a PR's few sessions
    # happens to be: what a pair of processes of identical code shows on this class of box,
    # calibrated from A/A rounds (policy.toml says which).
    min_noise: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    # Axes that need a floor other than min_noise (a short prefill on the GPU is a few
    # milliseconds of host-bound launches; the long-context check's single prefill), each named
    # as an axis ('prefill@128') or a kind of axis ('concurrent': every width); an axis's own
    # entry wins over its kind's.
    min_noise_axes: dict[str, Annotated[float, Field(ge=0.0, lt=1.0)]] = {}
    # Prompt tokens one timed prefill region holds at least: a shorter context is timed several
    # fresh prompts to a region (the harness's --prefill-tokens; 0: one prompt per region).
    prefill_tokens: Annotated[int, Field(ge=0)] = 0
    # A fixed workload the timing parent times right before and after each speed session (the
    # canary): a session whose canary moved by more than this (a ratio - 1) ran on a box that
    # changed under it, and is measured again, never judged.
    canary_limit: Annotated[float, Field(gt=0.0)] = 0.5
    # A model's own context window: contexts that do not fit (with the decoded tokens) are not
    # measured on it, and its guard context falls back to the largest one that does.
    max_context: dict[str, PosInt] = {}
    # The long-context memory check (engine/harness/longctx.py), per target model: a context to
    # prefill and the memory budget (MiB) the engine process is held to while it does.
    long_context: dict[str, PosInt] = {}
    memory_budget_mib: dict[str, PosInt] = {}
    # tokens decoded after the long prefill, verified against main's model: enough that a decode
    # wrong at long context shows (3 right of 4 cleared the bars; rounds before the key decoded 4)
    long_context_tokens: PosInt = 16
    # long prefills each engine's process times in the check (a fresh prompt each, the fastest
    # counting; the harness's --runs): load on the box only ever slows a run down
    long_context_runs: PosInt = 1
    # processes of each engine in the check's session (the harness's --legs): 2 runs main, PR,
    # PR, main (or its mirror), so a drift of the box's speed, and whatever favours a session's
    # first or second process, falls on both engines alike
    long_context_legs: Annotated[int, Field(ge=1, le=8)] = 1
    # Memory axes (lower is better): a PR using more than (1 + memory_growth) x main's memory, beyond
    # main's own range, is a REJECT.
    memory_growth: Annotated[float, Field(ge=0.0)] = 0.25
    timeouts: dict[
        Literal["sweep", "concurrent", "score", "prefill-check", "guard", "longctx"], PosInt
    ]

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        unknown = [m for m in self.models if not is_known_model(m)]
        if unknown:
            raise ValueError(f"unknown model(s): {', '.join(unknown)}")
        if self.guard_ctx not in self.contexts:
            raise ValueError(f"guard_ctx {self.guard_ctx} must be one of contexts {self.contexts}")
        if len(set(self.guard_widths)) != len(self.guard_widths):
            raise ValueError(f"guard_widths {self.guard_widths}: a width appears twice")
        bad_axes = [a for a in self.min_noise_axes if not (is_axis(a) or a in SPEED_KINDS)]
        if bad_axes:
            raise ValueError(
                f"min_noise_axes: not an axis name or a kind of axis ({', '.join(SPEED_KINDS)}): "
                f"{', '.join(bad_axes)}"
            )
        strange = [m for m in self.max_context if m not in self.models]
        if strange:
            raise ValueError(f"max_context names model(s) not in models: {', '.join(strange)}")
        small = [m for m in self.models if not self.contexts_for(m)]
        if small:
            raise ValueError(f"no context fits the window of: {', '.join(small)}")
        unbudgeted = sorted(set(self.long_context) ^ set(self.memory_budget_mib))
        if unbudgeted:
            raise ValueError(
                f"long_context and memory_budget_mib must name the same models: {unbudgeted}"
            )
        if self.legs > min(self.reps, self.concurrent_runs):
            raise ValueError(
                f"legs {self.legs} exceeds reps {self.reps} or concurrent_runs "
                f"{self.concurrent_runs}: every pair of processes times each shape once at least"
            )
        if self.concurrent_in_sweep and self.concurrent_warmup not in (None, self.warmup):
            raise ValueError(
                f"concurrent_warmup {self.concurrent_warmup} with concurrent_in_sweep: the sweep's "
                f"warmup ({self.warmup}) is the concurrent decode's too; leave it unset"
            )
        if self.engine == "builtin" and self.build is not None:
            raise ValueError("build: the builtin engine is not built; only a served engine is")
        if self.engine != "builtin":
            lacking = [
                t for t in SERVER_TARGETS if t not in (self.build.targets if self.build else [])
            ]
            if lacking:
                raise ValueError(
                    f"engine {self.engine}: build.targets must name {', '.join(lacking)}"
                )
        if self.long_context and not self.applies("long-context"):
            raise ValueError(f"long_context: not measured for engine {self.engine}")
        need = {"sweep", "score", "guard"} | (
            {"prefill-check"} if self.applies("prefill-path") else set()
        )
        need |= set() if self.concurrent_in_sweep else {"concurrent"}
        missing = (need | ({"longctx"} if self.long_context else set())) - set(self.timeouts)
        if missing:
            raise ValueError(f"timeouts missing for: {', '.join(sorted(missing))}")
        return self

    def applies(self, gate: str) -> bool:
        """Whether a gate (a kind of results.GATE_ORDER) judges this profile's engine, and its
        sessions are planned (ENGINE_GATES)."""
        return gate in ENGINE_GATES[self.engine]

    def noise_floor(self, axis: str) -> float:
        """The least noise `axis` is credited with, whatever a round's sessions show: its own
        floor, else its kind's, else min_noise."""
        kind = axis.partition("@")[0]
        return self.min_noise_axes.get(axis, self.min_noise_axes.get(kind, self.min_noise))

    def has_own_floor(self, axis: str) -> bool:
        """Whether `axis` (or its kind) has a floor of its own in min_noise_axes."""
        return axis in self.min_noise_axes or axis.partition("@")[0] in self.min_noise_axes

    def contexts_for(self, model: str) -> tuple[int, ...]:
        """The contexts a sweep of `model` measures: those that fit its window."""
        window = self.max_context.get(model)
        return tuple(c for c in self.contexts if window is None or c + self.tokens <= window)

    def guard_ctx_for(self, model: str) -> int:
        fits = self.contexts_for(model)
        return self.guard_ctx if self.guard_ctx in fits else max(fits)


class Policy(_Strict):
    verdict: VerdictRules
    accuracy: AccuracyRules
    prefill_path: PrefillPathRules
    failures: FailureRules
    harness: HarnessRules
    forgery: ForgeryRules = ForgeryRules()  # collector/judge/forgery.py's rules
    profiles: dict[str, Profile]


class ResolvedPolicy(_Strict):
    """The policy as a round uses it: one profile picked."""

    profile_name: str
    verdict: VerdictRules
    accuracy: AccuracyRules
    prefill_path: PrefillPathRules
    failures: FailureRules
    harness: HarnessRules
    forgery: ForgeryRules = ForgeryRules()  # collector/judge/forgery.py's rules
    profile: Profile


class PolicyError(Exception):
    pass


def default_policy_path() -> Path:
    return Path(str(resources.files("collector").joinpath("policy.toml")))


def _merged(base: dict, override: dict) -> dict:
    """`override` on top of `base`, table by table; any other value (lists too) replaces, and so
    does an empty table (`long_context = {}`: none)."""
    out = dict(base)
    for k, v in override.items():
        merge = isinstance(v, dict) and v and isinstance(out.get(k), dict)
        out[k] = _merged(out[k], v) if merge else v
    return out


def _read(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A policy file's tables; `extends = "default"` (or a path relative to the file) starts
    from another policy, so a round's policy can state only what it changes."""
    if path.resolve() in seen:
        raise PolicyError(f"policy {path}: extends itself (through {', '.join(map(str, seen))})")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise PolicyError(f"cannot read policy {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"policy {path}: {e}") from None
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise PolicyError(f'policy {path}: extends: a policy path or "default"')
    base_path = default_policy_path() if base == "default" else path.parent / base
    return _merged(_read(base_path, (*seen, path.resolve())), data)


def load_policy(path: str | Path | None = None) -> Policy:
    path = Path(path) if path else default_policy_path()
    data = _read(path)
    try:
        return Policy.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(top level)"
        raise PolicyError(f"policy {path}: {where}: {first['msg']}") from None


def resolve(policy: Policy, profile: str) -> ResolvedPolicy:
    if profile not in policy.profiles:
        raise PolicyError(f"profile {profile!r} not in the policy ({', '.join(policy.profiles)})")
    return ResolvedPolicy(
        profile_name=profile,
        verdict=policy.verdict,
        accuracy=policy.accuracy,
        prefill_path=policy.prefill_path,
        failures=policy.failures,
        harness=policy.harness,
        forgery=policy.forgery,
        profile=policy.profiles[profile],
    )
