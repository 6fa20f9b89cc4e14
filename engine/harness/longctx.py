"""The long-context memory check, run by the timing parent (`bench.py longctx`).

sparkinfer #1154 gained +35% decode by keeping a second copy of some weights resident; at the
model's full context that copy left too little memory for batched prefill, and every long prompt
fell back to a path 60x slower. A speed table at short contexts cannot see it. This check holds
the engine process to a memory budget that the timing parent enforces from outside — on the CPU
the process's data segment (RLIMIT_DATA, set before it starts: NumPy's arrays live there), on
the GPU by holding all device memory but the budget itself before the engine starts — and asks
for `runs` prefills of `ctx` tokens (each a fresh prompt, the fastest counting) and `tokens`
decode steps after the last, timed and verified like any other measurement. Main's engine runs
the same check in the same session, alone under the same budget, right before or after (the
order drawn at random): one run of an 8,000-token prefill strays by a quarter on a 2-core box,
and main's own sessions elsewhere in the round read faster than every PR's (2026-12-05), so the
PR's speed is held against main's from the same minutes; with `--legs 2` each engine runs it in
two processes, main PR PR main or its mirror (`bench.leg_order`, `LongContextRun.of_legs`), so
neither engine has the session's first or last minutes to itself. Main must complete; the collector
judges the PR against main (a failure where main completes, or a prefill far slower than main's
beside it, is a REJECT).

A served engine (`--server`: llama.cpp's `llama-server`) runs the check the same way: its
server alone, one slot of the whole context, the budget on its data segment (the model file's
pages are mapped, not counted; its KV cache and buffers are), a server that dies under it
failing the check; its outputs are then held against main's build's server (bench.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.errors import EngineOutputError
from engine.harness.common import Clock, config_of
from engine.harness.measure import (
    Bench,
    Side,
    idle_report,
    joined_memory,
    timing_report,
    warm_up,
    watch_engine,
)
from engine.harness.protocol import (
    CanaryReport,
    IdleReport,
    LongContextMain,
    LongContextResult,
    Measured,
    TimingReport,
    VerificationReport,
)
from engine.harness.reaper import kill_leftovers
from engine.harness.server_engine import ServerEngine
from engine.harness.timing import Challenges, EngineDied, EngineProcess, EngineSpec, Sample

DEVICE_HEADROOM = 0  # bytes of device memory left free beyond the budget
# Memory the engine may hold outside its own process (memory.py: helper processes, memfd and
# tmpfs files) during the check: the budget is the engine process's, and memory kept beside it
# is not a way around it. An honest engine holds none (measured: 0 on the CPU and the H200).
OUTSIDE_ALLOWANCE = 16 * 2**20


class DeviceBallast:
    """All free device memory but `budget`, held by this process while the engine runs."""

    def __init__(self, budget: int) -> None:
        import cupy

        free, _total = cupy.cuda.runtime.memGetInfo()
        self.block = cupy.empty(max(0, free - budget - DEVICE_HEADROOM), dtype=cupy.uint8)

    def release(self) -> None:
        import cupy

        del self.block
        cupy.get_default_memory_pool().free_all_blocks()


@dataclass
class LongContextRun:
    model: str
    backend: str
    ctx: int
    tokens: int
    budget: int
    runs: int = 1  # long prefills timed in the process, each a fresh prompt: the fastest counts
    baseline: bool = False  # main's engine's run: whatever goes wrong in it is main's
    completed: bool = False
    failure: str | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    groups: list[list[Sample]] = field(default_factory=list)
    timing: TimingReport | None = None
    idle: IdleReport | None = None
    seed: int = 0
    memory: object = None
    verification: VerificationReport | None = None
    outside_failure: str | None = None  # it completed, holding too much outside its process
    clock: Clock | None = None  # the command's: it records the phases, as far as the run got
    canary: CanaryReport | None = None
    sandbox: str | None = None
    main: LongContextMain | None = None  # main's run in the same session
    legs: int = 1  # processes of this engine in the session, alternating with main's (bench.py)
    engines: list = field(default_factory=list)  # the process (or server) it measured, per leg

    def mark(self, phase: str) -> None:
        if self.clock is not None:
            self.clock.mark(phase)

    def run(
        self,
        spec: EngineSpec,
        corpus: Callable[[str, int], list[int]],
        serve: Callable[[EngineSpec, bool], ServerEngine] | None = None,
    ) -> None:
        """The check in one engine started from `spec` (an engine process, or the server
        `serve` starts from it), its budget held from outside; `corpus`: the corpus as the
        model's token ids."""
        ballast = DeviceBallast(self.budget) if self.backend == "cupy" else None
        if ballast is None:
            spec = dataclasses.replace(spec, data_limit=self.budget)
        engine: EngineProcess | ServerEngine | None = None
        try:
            if serve is None:
                engine = EngineProcess(
                    spec, self.model, self.backend, raise_on_death=True, baseline=self.baseline
                )
                engine.connect()
            else:
                engine = serve(spec, self.baseline)
                engine.connect(config_of(self.model).vocab_size)
            self.mark("engine_loaded")
            self._measure(engine, corpus)
        except (EngineDied, EngineOutputError) as e:
            # a server that died under the budget (loading, or later) failed the check; any
            # other answer it could not have meant is the session's failure, as a process's
            if isinstance(e, EngineOutputError) and not (
                isinstance(engine, ServerEngine) and engine.died
            ):
                raise
            self.failure = (
                f"{e} while prefilling {self.ctx} tokens and decoding {self.tokens} within "
                f"{self.budget / 2**20:.0f} MiB"
            )
        finally:
            if ballast is not None:
                ballast.release()
            kill_leftovers()

    def _measure(
        self, engine: EngineProcess | ServerEngine, corpus: Callable[[str, int], list[int]]
    ) -> None:
        self.engines = [engine]
        watch = watch_engine(engine, gpu=self.backend == "cupy")
        challenges = Challenges()
        self.seed = challenges.seed
        try:
            material = np.asarray(corpus(self.model, engine.vocab))
            b = Bench([Side(engine, watch)], challenges, material, 0.0)
            warm_up(b)
            self.mark("warmed")
            fastest: Sample | None = None
            for _ in range(self.runs):  # load on the box only ever slows a run down
                engine.reset(1, self.ctx + self.tokens + 1)
                (sample,), seconds = engine.prefill([0], [b.prompt(self.ctx)])
                if self.prefill_s is None or seconds < self.prefill_s:
                    fastest, self.prefill_s = sample, seconds
            assert fastest is not None
            first = b.first_tokens(1)
            ids, self.decode_s = engine.decode([0], first, self.tokens)
            # the fastest prefill is the one reported; the decode after the last one holds
            # that one's prompt to main's model too
            self.groups = [
                [fastest],
                [Sample(prompt=sample.prompt, first=int(first[0]), ids=ids[:, 0])],
            ]
            self.completed = True
            self.mark("measured")
        finally:
            self.memory = watch.stop()
            if self.completed and watch.outside_peak > OUTSIDE_ALLOWANCE:
                # judged in document(): the timed work is still verified like any other
                self.outside_failure = (
                    f"it held {watch.outside_peak / 2**20:,.1f} MiB outside its own process "
                    "(helper processes, memfd or tmpfs files; "
                    f"{OUTSIDE_ALLOWANCE / 2**20:.0f} MiB allowed) while prefilling {self.ctx} "
                    f"tokens and decoding {self.tokens} within {self.budget / 2**20:.0f} MiB"
                )
            if engine.timeline.regions:
                self.timing = timing_report(engine)
            self.idle = idle_report(engine)
            with contextlib.suppress(EngineDied, EngineOutputError):
                engine.close()
            self.mark("engine_stopped")

    @classmethod
    def of_legs(cls, legs: list[LongContextRun]) -> LongContextRun:
        """One engine's legs of a session (each its own process, timed in the order main, PR,
        PR, main or its mirror) as one run: its fastest prefill and decode, every leg's outputs
        to verify and every leg's timing and idle readings, the larger memory readings; the
        first failure stands (a leg that fails ends the engine's legs)."""
        assert legs
        one = dataclasses.replace(legs[0])
        if len(legs) == 1:
            return one
        one.completed = all(r.completed for r in legs)
        one.failure = next((r.failure for r in legs if r.failure), None)
        one.outside_failure = next((r.outside_failure for r in legs if r.outside_failure), None)
        done = [r for r in legs if r.completed]
        one.prefill_s = min((r.prefill_s for r in done if r.prefill_s), default=None)
        one.decode_s = min((r.decode_s for r in done if r.decode_s), default=None)
        one.groups = [g for r in legs for g in r.groups]
        one.engines = [e for r in legs for e in r.engines]
        timed = [e for e in one.engines if e.timeline.regions]
        one.timing = timing_report(*timed) if timed else None
        one.idle = idle_report(*one.engines) if one.engines else None
        one.memory = joined_memory([r.memory for r in legs if r.memory is not None])
        return one

    def as_main(self, commit: str, first: bool) -> LongContextMain:
        """Main's completed run as the speed the measured engine's is held against."""
        assert self.completed and self.prefill_s and self.decode_s
        return LongContextMain(
            commit=commit,
            first=first,
            prefill_tok_s=self.ctx / self.prefill_s,
            decode_tok_s=self.tokens / self.decode_s,
            memory=self.memory,  # type: ignore[arg-type]
        )

    def document(self, head: dict) -> LongContextResult:
        measured = None
        if self.timing is not None:
            measured = Measured(
                seed=self.seed,
                timing=self.timing,
                verification=self.verification,
                memory=self.memory,  # type: ignore[arg-type]
                phases=(self.clock.phases or None) if self.clock else None,
                idle=self.idle,
                canary=self.canary,
                sandbox=self.sandbox,
            )
        completed = self.completed and self.outside_failure is None
        return LongContextResult(
            **head,
            ctx=self.ctx,
            tokens=self.tokens,
            budget_bytes=self.budget,
            completed=completed,
            failure=self.failure or self.outside_failure,
            prefill_tok_s=self.ctx / self.prefill_s if completed and self.prefill_s else None,
            decode_tok_s=self.tokens / self.decode_s if completed and self.decode_s else None,
            measured=measured,
            runs=self.runs,
            legs=self.legs,
            main=self.main,
        )
