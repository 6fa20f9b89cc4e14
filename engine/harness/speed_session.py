"""A speed session's engine processes, from the timing parent (bench.py's commands run here).

The session's scratch folder (each engine's home and compiled-kernel cache, the corpus as token
ids, a served engine's dummy models as GGUF files), then `legs` times a new pair of engine
processes (main's beside the one measured, each in its own sandbox) that the command's body
measures turn by turn, then the canary again and the verification of the measured engine's kept
outputs against this checkout's model (verify.py).
A process settles at a speed of its own for its whole life, so the repetitions are dealt over the
legs (`shares`, `deal`) and the legs' results joined into one session's (`joined_legs`); where the
seconds go is recorded step by step, the legs summed (`Steps`).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from engine.backends import resolve_backend
from engine.errors import BaselineError, EngineError, EngineOutputError
from engine.harness.canary import Canary
from engine.harness.common import (
    DEFAULT_CORPUS,
    REPO_ROOT,
    Clock,
    config_of,
    corpus_prompt_ids,
    engine_commit,
    header,
    open_model,
    progress,
    require_positive,
)
from engine.harness.measure import (
    Bench,
    Side,
    idle_report,
    joined_memory,
    most,
    timing_report,
    warm_up,
    watch_engine,
)
from engine.harness.protocol import (
    Baseline,
    ContextSample,
    Measured,
    MemoryReport,
    VerificationReport,
    WidthSample,
)
from engine.harness.reaper import become_subreaper, kill_leftovers
from engine.harness.sandbox import Sandbox
from engine.harness.sandbox import describe as describe_sandbox
from engine.harness.server_engine import ServerEngine, server_kind
from engine.harness.server_verify import verify_on
from engine.harness.timing import EngineProcess, EngineSpec, whose_device
from engine.harness.turns import DeviceHeld, DeviceProbe
from engine.harness.verify import verify as verify_outputs
from engine.models import model_id


@dataclass(frozen=True)
class Engines:
    """The engines a command measures, from its session options."""

    checkout: Path
    baseline: Path | None
    sandbox: str
    scratch: Path | None
    cache: Path | None
    baseline_cache: Path | None
    server: str | None = None  # a server kind (server_engine.py): the checkouts are its builds
    server_threads: int = 1

    @classmethod
    def of(cls, o: dict) -> Engines:
        def path(k: str) -> Path | None:
            return Path(o[k]).resolve() if o.get(k) else None

        engines = cls(
            checkout=path("engine_checkout") or REPO_ROOT,
            baseline=path("baseline_checkout"),
            sandbox=o["sandbox"],
            scratch=path("scratch"),
            cache=path("engine_cache"),
            baseline_cache=path("baseline_cache"),
            server=o.get("server"),
            server_threads=int(o.get("server_threads") or 1),
        )
        if engines.server and (engines.baseline is None or o.get("engine_checkout") is None):
            raise EngineError(
                "--server needs --engine-checkout and --baseline-checkout (the two builds): "
                "main's server is the reference the other's outputs are held against"
            )
        require_positive(engines.server_threads, "--server-threads")
        return engines


def shares(n: int, legs: int) -> list[int]:
    """`n` repetitions dealt over `legs` pairs of engine processes, the first legs taking the
    remainder (a leg may get none)."""
    return [n // legs + (i < n % legs) for i in range(legs)]


def deal(n: int, legs: int, what: str) -> list[int]:
    """`shares`, every leg getting one at least."""
    require_positive(legs, "--legs")
    if legs > n:
        raise EngineError(f"--legs {legs} exceeds {what} {n}: every leg times each shape once")
    return shares(n, legs)


@contextlib.contextmanager
def scratch_folder(given: Path | None) -> Iterator[Path]:
    """The session's scratch folder: the one given, or a temporary one removed afterwards."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="sparkboard-session-") as tmp:
        yield Path(tmp)


def engine_spec(engines: Engines, backend: str, scratch: Path, baseline: bool) -> EngineSpec:
    """One engine's checkout, sandbox and writable folders (each its own, under `scratch`)."""
    name = "baseline" if baseline else "engine"
    cache = engines.baseline_cache if baseline else engines.cache
    checkout = engines.baseline if baseline else engines.checkout
    assert checkout is not None
    shutil.rmtree(scratch / f"{name}-home", ignore_errors=True)  # nothing of an earlier session
    return EngineSpec(
        checkout=checkout,
        sandbox=Sandbox(engines.sandbox, gpu=backend == "cupy"),
        home=scratch / f"{name}-home",
        kernel_cache=cache,
    )


def corpus_ids(scratch: Path) -> Callable[[str, int], list[int]]:
    """The corpus as the model's token ids, tokenized once per scratch folder (the tokenizer
    reads a whole GGUF vocabulary: most of a short session's start); the cache lives beside the
    engines' homes, where no engine can write."""

    def ids(model: str, vocab: int) -> list[int]:
        key = hashlib.sha256(f"{model}\0{vocab}".encode() + DEFAULT_CORPUS.read_bytes()).hexdigest()
        path = scratch / f"corpus-{key[:20]}.npy"
        if path.is_file():
            return np.load(path).tolist()
        out = corpus_prompt_ids(model, vocab)
        np.save(path, np.asarray(out, dtype=np.int64))
        return out

    return ids


class Steps:
    """Where a session's seconds go, legs summed: each step's time from the end of the step
    before it, written to the clock as phases (Measured.phases: seconds from the start at which
    each step would have ended had every leg's steps run back to back). A step may end out of
    that order (a server's outputs are verified before the engines stop: server_verify.py)."""

    ORDER = ("engine_loaded", "warmed", "measured", "engine_stopped", "verified")

    def __init__(self, clock: Clock) -> None:
        self.clock, self.spent, self._last = clock, dict.fromkeys(self.ORDER, 0.0), 0.0
        self._seen: set[str] = set()

    def done(self, step: str) -> None:
        now = self.clock.wall_s()
        self.spent[step] += now - self._last
        self._last = now
        self._seen.add(step)
        total = 0.0
        self.clock.phases.clear()  # written in ORDER, whatever order the steps ended in
        for name in self.ORDER:
            total += self.spent[name]
            if name in self._seen:
                self.clock.phases[name] = round(total, 3)


@dataclass
class Role:
    """One engine's part of a session (main's, or the one measured) over every leg: what its
    processes were timed at and did, and the outputs kept to verify."""

    engines: list[EngineProcess]
    memory: list[MemoryReport]
    checks: list = field(default_factory=list)  # groups of Samples (the measured engine's)


def _joined_contexts(parts: list[ContextSample]) -> ContextSample:
    first = parts[0]
    return ContextSample(
        ctx=first.ctx,
        decode_tokens=first.decode_tokens,
        decode_tok_s=[v for c in parts for v in c.decode_tok_s],
        prefill_tok_s=[v for c in parts for v in c.prefill_tok_s],
        vram=first.vram,
        host_peak=most([c.host_peak for c in parts]),
        gpu_peak=most([c.gpu_peak for c in parts]),
    )


def joined_legs(parts: list[dict]) -> dict:
    """One engine's results of every leg as one session's: each context's and each width's
    repetitions in leg order (a width some legs left out, a guard's, from the legs that ran it)."""
    out: dict = {}
    if "contexts" in parts[0]:
        out["contexts"] = [
            _joined_contexts([p["contexts"][i] for p in parts])
            for i in range(len(parts[0]["contexts"]))
        ]
    if "widths" in parts[0]:
        by_width: dict[int, list[WidthSample]] = {}
        for p in parts:
            for w in p["widths"]:
                by_width.setdefault(w.width, []).append(w)
        out["widths"] = [
            WidthSample(width=w, prompt_len=ws[0].prompt_len, runs=[r for x in ws for r in x.runs])
            for w, ws in by_width.items()
        ]
    return out


@dataclass
class Legs:
    """What every leg of a session shares: its engines' specs, what it has learnt so far (each
    role's processes, memory and kept outputs, the time each step took) and how it starts an
    engine."""

    model: str
    backend: str
    specs: list[EngineSpec]
    scratch: Path
    steps: Steps
    probe: DeviceProbe | None
    roles: list[Role] = field(default_factory=list)
    engines: Engines | None = None
    room: tuple[int, int] = (1, 1)  # a server's slots and tokens per slot, for the command's shapes
    verify: bool = False  # servers: the measured one's outputs held against main's, each leg
    reports: list[VerificationReport] = field(default_factory=list)

    def start(self, spec: EngineSpec, baseline: bool) -> EngineProcess | ServerEngine:
        """One engine: a process of the checkout's engine, or the server of its build."""
        e = self.engines
        if e is None or e.server is None:
            return EngineProcess(
                spec, self.model, self.backend, probe=self.probe, baseline=baseline
            )
        slots, slot_ctx = self.room
        return ServerEngine(
            spec, self.model, server_kind(e.server), slots, slot_ctx, e.server_threads,
            probe=self.probe, baseline=baseline, models=self.scratch / "models",
        )  # fmt: skip

    def connect(self, p: EngineProcess | ServerEngine) -> None:
        if isinstance(p, ServerEngine):
            p.connect(config_of(self.model).vocab_size)  # the parent reads the model file
        else:
            p.connect()

    def run(self, b: Bench, body: Callable[[Bench, int], list[dict]], leg: int) -> list[dict]:
        """Start the engines anew (main's beside the measured one; both load at once), warm them
        up, run `body(b, leg)` against them turn by turn, and stop them; per side its results."""
        gpu, last = self.backend == "cupy", len(self.specs) - 1
        procs: list = []
        b.sides = []
        try:
            for i, spec in enumerate(self.specs):
                procs.append(self.start(spec, baseline=i < last))
            try:
                for p in procs:
                    self.connect(p)
            except EngineOutputError:
                # a load stuck behind a kernel left running (one engine's own, or the other's
                # holding the device): every engine stopped, a device still busy is held, and
                # whose it is decides (the PR's engine's load can hold main's up too)
                if self.probe is not None:
                    for p in procs:
                        p.turns.tree.stop()
                    self.probe.drain("an engine did not load")
                raise
            if self.probe is not None:  # every engine loaded and stopped: the device is drained
                self.probe.drain("the engines loaded")
            self.steps.done("engine_loaded")
            if len({p.vocab for p in procs}) != 1:
                raise EngineOutputError(
                    "main's engine and the engine under test disagree on the vocabulary"
                )
            # the measured engine's samples are verified; a server's main's too, against its
            # own server (the judge's measure of how far the procedure disagrees with itself)
            b.sides = [
                Side(p, watch_engine(p, gpu), verified=i == last or isinstance(p, ServerEngine))
                for i, p in enumerate(procs)
            ]
            if leg == 0:
                b.material = np.asarray(corpus_ids(self.scratch)(self.model, procs[0].vocab))
            warm_up(b)
            self.steps.done("warmed")
            for side in b.sides:
                side.watch.mark()  # each context's peak counts from here
            results = body(b, leg)
            self.steps.done("measured")
            if self.verify and isinstance(procs[0], ServerEngine):
                checks, own = list(b.sides[-1].checks.groups), list(b.sides[0].checks.groups)
                progress(
                    f"verifying {len(checks)} timed operations (and main's own {len(own)}) "
                    "against main's server"
                )
                reference = f"main's server ({procs[0].kind.name})"
                self.reports.append(verify_on(procs[0], checks, reference, own, procs[-1]))
                self.steps.done("verified")
        except DeviceHeld as held:
            assert self.probe is not None  # only a probe finds the device held
            raise whose_device(held, procs, self.probe) from None
        except EngineOutputError as e:
            raise shared_failure(e, procs) from None
        finally:
            for role, side in zip(self.roles, b.sides, strict=False):
                role.memory.append(side.watch.stop())
                role.checks += side.checks.groups
            for role, p in zip(self.roles, procs, strict=False):
                role.engines.append(p)
                p.close()
            kill_leftovers()
        self.steps.done("engine_stopped")
        return results


def shared_failure(e: EngineOutputError, procs: list) -> Exception:
    """The error that ends a session whose measured engine answered unusably: its own
    (`e`, the PR's fault), or, where main's server answers the same requests unusably too, a
    `BaselineError` (a bug main's build has and the fresh challenge reached: measured again,
    never the PR's). Engine processes keep state between operations that main's has not, so
    only servers (each request whole) are asked again."""
    if len(procs) < 2:  # no main beside it (or the measured one never started)
        return e
    main, measured = procs[0], procs[-1]
    if not (isinstance(measured, ServerEngine) and isinstance(main, ServerEngine)):
        return e
    if measured.asked is None or main.died:
        return e
    shared = main.fails_too(measured.asked)
    if shared is None:
        return e
    return BaselineError(f"{shared}; the same requests failed the PR's too ({e}): a shared bug")


def run_session(
    model: str,
    backend: str,
    engines: Engines,
    do_verify: bool,
    b: Bench,
    body: Callable[[Bench, int], list[dict]],
    clock: Clock,
    legs: int = 1,
    room: tuple[int, int] = (1, 1),
) -> tuple[tuple[dict, Baseline | None], Measured, dict]:
    """Time the canary; then, `legs` times, start the engines and run `body(b, leg)` against them
    (`Legs.run`); time the canary again, then verify the measured engine's outputs of every leg
    with this checkout's model. Each leg is a new pair of processes: a process settles at a
    speed of its own (where its buffers land; ~1% apart on the H200, engine/PERF.md), which more
    repetitions in it never average out, more processes do.
    Returns (its results, main's as a Baseline), what makes them trustworthy, and the header."""
    resolved = resolve_backend(backend)
    become_subreaper()  # what an engine process leaves running is ours to kill
    canary = Canary(resolved)
    probe = DeviceProbe() if resolved == "cupy" else None
    steps = Steps(clock)
    results: list[list[dict]] = []  # per leg, per side
    with scratch_folder(engines.scratch) as scratch:
        specs = [engine_spec(engines, resolved, scratch, baseline=True)] if engines.baseline else []
        specs.append(engine_spec(engines, resolved, scratch, baseline=False))
        pairs = Legs(model, resolved, specs, scratch, steps, probe, [Role([], []) for _ in specs])
        pairs.engines, pairs.room, pairs.verify = engines, room, do_verify and bool(engines.server)
        for leg in range(legs):
            if legs > 1:
                progress(f"leg {leg + 1} of {legs}: the engines start anew")
            results.append(pairs.run(b, body, leg))
    canary_report = canary.after()
    mine = pairs.roles[-1]
    report = None
    if do_verify and engines.server:  # verified leg by leg, beside main's server
        report = joined_reports(pairs.reports)
    elif do_verify:
        progress(f"verifying {len(mine.checks)} timed operations against this checkout's model")
        reference = f"main's engine at {engine_commit()[:12]}"
        report = verify_outputs(open_model(model, resolved), mine.checks, reference)
        steps.done("verified")
    progress(
        "phases (s, legs summed): " + ", ".join(f"{k} {v:.1f}" for k, v in clock.phases.items())
    )
    per_side = [joined_legs([leg[i] for leg in results]) for i in range(len(pairs.roles))]
    measured = Measured(
        seed=b.challenges.seed,
        timing=timing_report(*mine.engines),
        verification=report,
        memory=joined_memory(mine.memory),
        phases=clock.phases,
        idle=idle_report(*mine.engines),
        canary=canary_report,
        sandbox=describe_sandbox(engines.sandbox),
        legs=legs,
    )
    me = SimpleNamespace(backend=resolved, model_id=model_id(model))
    return (per_side[-1], main_beside(pairs.roles, per_side)), measured, header(model, me, clock)


def joined_reports(reports: list[VerificationReport]) -> VerificationReport:
    """Each leg's verification (a server's, against main's server of the same leg) as one: every
    list of the report, leg after leg (a list field added to the report is joined too)."""
    lists = [name for name in VerificationReport.model_fields if name != "reference"]
    return VerificationReport(
        reference=reports[0].reference,
        **{name: [x for r in reports for x in getattr(r, name)] for name in lists},
    )


def main_beside(roles: list[Role], per_side: list[dict]) -> Baseline | None:
    """Main's engine as the document's Baseline, when it was timed beside the measured one."""
    if len(roles) != 2:
        return None
    main = roles[0]
    first = main.engines[0]
    return Baseline(
        # a server's checkout is its build, no git work tree: the collector knows its commit
        commit="unknown" if isinstance(first, ServerEngine) else engine_commit(first.spec.checkout),
        timing=timing_report(*main.engines),
        memory=joined_memory(main.memory),
        idle=idle_report(*main.engines),
        **per_side[0],
    )
