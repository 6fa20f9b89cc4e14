"""The bench protocol: the JSON documents the harness commands write.

This module is the contract between the engine (which writes these documents) and the
collector (which reads them from a subprocess it does not trust). Every model forbids
unknown fields and non-finite numbers, so a malformed document fails validation instead of
slipping a NaN or an extra claim into a verdict.

Bump SCHEMA_VERSION on any incompatible change; the collector refuses other versions.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# 2: speed documents carry seed, timing and verification; 3: main's engine measured beside the
# candidate turn by turn (`baseline`), what each did while not its turn (`idle`), the box's
# canary and the sandbox. The collector reads stored documents of either.
SCHEMA_VERSION = 3

NonNegFloat = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
LogProb = Annotated[float, Field(le=1e-6, allow_inf_nan=False)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceInfo(Strict):
    """What the numbers were measured on."""

    backend: Literal["numpy", "cupy"]
    name: str = Field(min_length=1, max_length=200)  # "NVIDIA H200" or the CPU model
    driver: str | None = Field(default=None, max_length=100)  # CUDA driver version
    runtime: str | None = Field(default=None, max_length=100)  # CUDA runtime / NumPy version
    host: str = Field(default="", max_length=200)


class VramInfo(Strict):
    """GPU memory in bytes; absent on the NumPy backend."""

    total_bytes: int = Field(ge=0)
    free_after_load_bytes: int = Field(ge=0)
    peak_bytes: int = Field(ge=0)  # peak in use by this process during the run
    kv_cache_bytes: int = Field(ge=0)  # KV cache for the requested context


class Header(Strict):
    """Fields every document carries."""

    schema_version: Literal[2, 3] = SCHEMA_VERSION
    model: str = Field(min_length=1, max_length=100)  # model name as given, e.g. "llama-8b:q4_0"
    model_id: str = Field(min_length=1, max_length=200)  # file sha256 prefix or dummy spec
    engine_commit: str = Field(min_length=1, max_length=64)  # git HEAD of the engine, or "unknown"
    device: DeviceInfo
    started_at: str = Field(max_length=40)  # ISO 8601, UTC
    wall_s: NonNegFloat


class ContextSample(Strict):
    """One context of a sweep: every repetition's raw value."""

    ctx: int = Field(gt=0)
    decode_tokens: int = Field(gt=0)  # tokens generated per decode repetition
    decode_tok_s: list[PosFloat] = Field(min_length=1)
    prefill_tok_s: list[PosFloat] = Field(min_length=1)
    vram: VramInfo | None = None
    # the engine process's memory while this context was measured, read from outside it (bytes)
    host_peak: int | None = Field(default=None, ge=0)
    gpu_peak: int | None = Field(default=None, ge=0)


class TimingReport(Strict):
    """Every timed operation of a session: the timing parent's seconds (the number a verdict uses)
    and the engine process's own figure for it (host clock, or CUDA events on the GPU), which the
    collector holds against the parent's as a cross-check."""

    regions: list[tuple[PosFloat, NonNegFloat]] = Field(min_length=1)
    # one label per region, set by the parent: the operation and its shape ("prefill n=4096",
    # "decode ctx=4096 w=1"), for the cross-check per group; empty in documents made before it
    groups: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _groups_match(self) -> TimingReport:
        if self.groups and len(self.groups) != len(self.regions):
            raise ValueError(f"{len(self.groups)} group labels for {len(self.regions)} regions")
        return self


class VerificationReport(Strict):
    """The timed operations' outputs held against main's model (engine/harness/verify.py).

    Margins are `max log-prob - log-prob of the reported token` under main's model: 0 where main
    picks the same token."""

    reference: str = Field(max_length=200)  # what the outputs were held against
    decode_margins: list[NonNegFloat]  # one per generated token checked
    prefill_margins: list[NonNegFloat]  # one per prefill digest checked (its argmax)
    prefill_kl: list[NonNegFloat]  # KL(main || reported top-k) per prefill digest
    # A served engine's: main's own timed outputs of the same session held against main's server
    # the same way. A server batches and splits its work as it likes (a decode beside others, a
    # continuation as one prompt), and on the GPU those paths round apart enough to flip main's
    # own near-ties beyond the tie margin; this is how far the procedure disagrees with itself.
    baseline_decode_margins: list[NonNegFloat] = []
    baseline_prefill_margins: list[NonNegFloat] = []
    # A served engine's decode path: KL(main || the PR) per decode step of a few timed prompts
    # continued by both servers one sequence at a time, and several at once (server_verify.py)
    decode_kl: list[NonNegFloat] = []
    batched_decode_kl: list[NonNegFloat] = []


class MemoryReport(Strict):
    """Memory of the engine process, read from outside it by the timing parent (bytes)."""

    host_after_load: int = Field(ge=0)  # resident set after the model loaded
    host_peak: int = Field(ge=0)  # the most resident at any reading
    gpu_after_load: int | None = Field(default=None, ge=0)  # the process's device memory
    gpu_peak: int | None = Field(default=None, ge=0)


class IdleReport(Strict):
    """What one engine's processes did outside its timed work, one reading per turn, read by
    the timing parent from outside them (engine/harness/turns.py; seconds)."""

    # CPU its processes used between an answer and the parent's next request, in its turn
    between_s: list[NonNegFloat] = Field(default_factory=list)
    after_answer_s: list[NonNegFloat]  # CPU after its turn's last answer, until all stopped
    # how long it was watched, running with nothing asked, at the end of each turn (wall)
    window_s: list[NonNegFloat] = Field(default_factory=list)
    while_stopped_s: list[NonNegFloat]  # CPU they used while it was stopped
    stop_s: list[NonNegFloat]  # how long stopping every one of its processes took
    device_busy_s: list[NonNegFloat] = Field(default_factory=list)  # GPU busy after it stopped
    # per turn, inside its requests: the CPU its processes used and the wall time, and the cores
    # the session gave them (absent in documents written before 2026-12-06)
    request_cpu_s: list[NonNegFloat] = Field(default_factory=list)
    request_wall_s: list[NonNegFloat] = Field(default_factory=list)
    cores: int | None = Field(default=None, ge=1, le=1 << 16)


class CanaryReport(Strict):
    """A fixed workload the timing parent timed with no engine running, right before the
    session's engines started and right after they ended: the box's own speed then."""

    workload: str = Field(max_length=200)  # what was timed, e.g. "device copy of 256 MiB"
    before_s: PosFloat
    after_s: PosFloat


class Measured(Strict):
    """What every speed document adds to its samples: how the numbers were made trustworthy."""

    seed: int = Field(
        ge=0
    )  # the session's challenge seed (prompts and first tokens derive from it)
    timing: TimingReport
    verification: VerificationReport | None = (
        None  # None: run with --no-verify (not by the collector)
    )
    memory: MemoryReport | None = None
    # seconds from the command's start at which each phase ended, in order: engine_loaded (the
    # engine process started and loaded the model), warmed (untimed warm-up), measured (the
    # timed work), engine_stopped, verified; where a session's device time goes. Absent in
    # older documents.
    phases: dict[str, float] | None = None
    idle: IdleReport | None = None  # the measured engine's turns (documents since version 3)
    canary: CanaryReport | None = None
    sandbox: str | None = Field(default=None, max_length=100)  # "bubblewrap 0.8.0", or "none"
    # pairs of engine processes the session started one after another, its repetitions dealt
    # over them (`bench --legs`); its regions, turns and kept outputs are every leg's in order
    legs: int = Field(default=1, ge=1, le=64)


class Baseline(Strict):
    """Main's engine, measured beside the candidate in the same session, turn by turn (A B B A
    …): the same operations on fresh challenges of its own, its timings and memory read by the
    same parent. Its outputs are main's own (not verified)."""

    commit: str = Field(min_length=1, max_length=64)  # git HEAD of its checkout, or "unknown"
    contexts: list[ContextSample] = Field(default_factory=list)
    widths: list[WidthSample] = Field(default_factory=list)
    timing: TimingReport
    memory: MemoryReport | None = None
    idle: IdleReport


class SweepResult(Header):
    kind: Literal["sweep"] = "sweep"
    tokens: int = Field(gt=0)
    reps: int = Field(gt=0)
    contexts: list[ContextSample] = Field(min_length=1)
    # `--widths`: sequences decoded together after the contexts, in the same engine processes,
    # `width_tokens` each (a guard's batched decode, or a target's concurrent decode where the
    # profile measures it in the sweep); their outputs are verified with the contexts' (in
    # `measured`), as a concurrent session's are. Empty in a plain sweep and in older documents.
    widths: list[WidthSample] = []
    width_tokens: int | None = Field(default=None, gt=0)
    measured: Measured
    baseline: Baseline | None = None  # main's engine beside it (since version 3)

    @model_validator(mode="after")
    def _reps_match(self) -> SweepResult:
        beside = self.baseline.contexts if self.baseline else []
        for c in [*self.contexts, *beside]:
            if len(c.decode_tok_s) != self.reps or len(c.prefill_tok_s) != self.reps:
                raise ValueError(f"ctx {c.ctx}: expected {self.reps} repetitions")
        if self.baseline is not None and (
            [c.ctx for c in beside] != [c.ctx for c in self.contexts]
            or [w.width for w in self.baseline.widths] != [w.width for w in self.widths]
        ):
            raise ValueError("the baseline must measure the same contexts and widths")
        if bool(self.widths) != (self.width_tokens is not None):
            raise ValueError("widths and width_tokens come together")
        for w in self.widths:
            for r in w.runs:
                if r.tokens_expected != w.width * (self.width_tokens or 0):
                    raise ValueError(f"width {w.width}: tokens_expected != width x width_tokens")
                if r.tokens_decoded > r.tokens_expected:
                    raise ValueError(f"width {w.width}: decoded more tokens than expected")
        return self


class WidthRun(Strict):
    """One run of N sequences decoded together."""

    tokens_expected: int = Field(gt=0)  # width * tokens
    tokens_decoded: int = Field(ge=0)  # fewer than expected: the run is incomplete
    seconds: PosFloat
    tok_s: NonNegFloat  # aggregate: tokens_decoded / seconds

    @property
    def complete(self) -> bool:
        return self.tokens_decoded == self.tokens_expected


class WidthSample(Strict):
    width: int = Field(gt=0)
    prompt_len: int = Field(gt=0)  # each sequence's prompt length before decoding
    runs: list[WidthRun] = Field(min_length=1)


class ConcurrentResult(Header):
    kind: Literal["concurrent"] = "concurrent"
    tokens: int = Field(gt=0)  # tokens decoded per sequence
    widths: list[WidthSample] = Field(min_length=1)
    vram: VramInfo | None = None
    measured: Measured
    baseline: Baseline | None = None  # main's engine beside it (since version 3)

    @model_validator(mode="after")
    def _same_widths(self) -> ConcurrentResult:
        if self.baseline is not None and [w.width for w in self.baseline.widths] != [
            w.width for w in self.widths
        ]:
            raise ValueError("the baseline must measure the same widths")
        return self


class ScoredPosition(Strict):
    """Position i predicts token i+1 from tokens 0..i."""

    argmax: int = Field(ge=0)
    target_logprob: LogProb
    topk: list[tuple[int, LogProb]] = Field(min_length=1)


class ScoreResult(Header):
    kind: Literal["score"] = "score"
    topk: int = Field(gt=0)
    tokens: list[int] = Field(min_length=2)
    positions: list[ScoredPosition]

    @model_validator(mode="after")
    def _one_per_prediction(self) -> ScoreResult:
        if len(self.positions) != len(self.tokens) - 1:
            raise ValueError(
                f"{len(self.tokens)} tokens need {len(self.tokens) - 1} positions, "
                f"got {len(self.positions)}"
            )
        return self


class PrefixCheck(Strict):
    """Batched prefill against the token-by-token loop, at one prefix length."""

    prefix: int = Field(gt=0)
    positions: int = Field(gt=0)
    top1: Annotated[float, Field(ge=0.0, le=1.0)]  # argmax agreement over the positions
    kl_mean: NonNegFloat  # KL(loop || batched), mean over the positions, nats
    kl_max: NonNegFloat


class PrefillCheckResult(Header):
    kind: Literal["prefill-check"] = "prefill-check"
    prefixes: list[PrefixCheck] = Field(min_length=1)


class LongContextMain(Strict):
    """Main's engine through the same long-context check in the same session, alone under the
    same budget, right before or after the measured one (`first`): the speed the measured
    engine's is held against. It completed (a main that cannot ends the session as main's
    failure); its outputs are main's own (not verified)."""

    commit: str = Field(min_length=1, max_length=64)  # git HEAD of its checkout, or "unknown"
    first: bool  # it ran before the measured engine
    prefill_tok_s: PosFloat  # the fastest of its runs
    decode_tok_s: PosFloat
    memory: MemoryReport | None = None


class LongContextResult(Header):
    """The long-context memory check: prefill `ctx` tokens and decode `tokens` more with the engine
    process held to `budget_bytes` (its data segment on the CPU; on the GPU, the device memory the
    timing parent leaves free). Whether it completed is the result; speeds when it did."""

    kind: Literal["longctx"] = "longctx"
    ctx: int = Field(gt=0)
    tokens: int = Field(gt=0)
    budget_bytes: int = Field(gt=0)
    completed: bool
    failure: str | None = Field(default=None, max_length=400)  # why not, in plain words
    prefill_tok_s: PosFloat | None = None  # the fastest of its runs
    decode_tok_s: PosFloat | None = None
    measured: Measured | None = None
    runs: int = Field(default=1, ge=1, le=64)  # long prefills each engine's process timed
    # processes of each engine in the session (main, PR, PR, main, ... or its mirror): the
    # figures are the fastest over them
    legs: int = Field(default=1, ge=1, le=8)
    main: LongContextMain | None = None  # main's run, in the same session


class KldResult(Header):
    """A served engine's accuracy (server_score.py kld): each build's own perplexity tool over
    the same windows of a text, the PR's log-probs held against main's position by position."""

    kind: Literal["kld"] = "kld"
    ctx: int = Field(gt=0)
    chunks: int = Field(gt=0)
    tokens: int = Field(gt=0)  # scored positions
    kl_mean: NonNegFloat  # KL(main || PR), nats
    kl_p99: NonNegFloat
    kl_max: NonNegFloat
    same_top: Annotated[float, Field(ge=0.0, le=1.0)]
    # where the top tokens differ, main's log-prob of its top minus of the PR's (nats, ascending;
    # absent in documents written before 2026-12-06, whose top-1 is `same_top` alone)
    top_gaps: list[NonNegFloat] | None = None
    ppl_main: PosFloat
    ppl_pr: PosFloat
    ppl_ratio: PosFloat

    @model_validator(mode="after")
    def _gaps_are_the_disagreements(self) -> KldResult:
        if self.top_gaps is not None and len(self.top_gaps) != round(
            (1.0 - self.same_top) * self.tokens
        ):
            raise ValueError("top_gaps must hold one gap for each position whose top differs")
        return self


BenchDocument = (
    SweepResult
    | ConcurrentResult
    | ScoreResult
    | PrefillCheckResult
    | LongContextResult
    | KldResult
)

DOCUMENT_TYPES: dict[str, type[Header]] = {
    "sweep": SweepResult,
    "concurrent": ConcurrentResult,
    "score": ScoreResult,
    "prefill-check": PrefillCheckResult,
    "longctx": LongContextResult,
    "kld": KldResult,
}


def parse_document(raw: str | bytes, expected_kind: str) -> BenchDocument:
    """Parse one harness document strictly; raises pydantic.ValidationError or ValueError."""
    try:
        cls = DOCUMENT_TYPES[expected_kind]
    except KeyError:
        raise ValueError(f"unknown document kind {expected_kind!r}") from None
    return cls.model_validate_json(raw)  # type: ignore[return-value]
