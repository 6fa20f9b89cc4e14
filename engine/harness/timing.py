"""The timing parent's side of a measurement: the engine processes, the clock, the challenges.

The parent (`bench.py`) runs main's pinned harness and never imports an engine it measures. It
starts each engine in a child process (`serve.py`, in the checkout being measured) inside a
sandbox (sandbox.py), and times every operation with its own clock from sending the request to
reading the answer that commits to the result. A child can patch its own clock, its harness
objects or its event timers: none of that reaches the number a verdict uses. Prompts and first
tokens are drawn here, after the model has loaded, from a seed drawn per session: nothing can be
computed before it is asked.

Two engines can be measured side by side (main's and the PR's): each runs only during its own
requests and is stopped the rest of the time (turns.py), so the one whose turn it is not can
neither compete with the other nor work outside its timed regions unseen.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from engine.errors import BaselineError, EngineError, EngineForged, EngineOutputError
from engine.harness.sandbox import Sandbox, exit_status, library_paths
from engine.harness.turns import (
    LOAD_CORES_ENV,
    DeviceHeld,
    DeviceProbe,
    ProcessTree,
    TurnTaker,
    loading_cores,
)
from engine.harness.wire import WireError, pack_ids, recv, send, unpack_ids

QUIT_WAIT_S = 30.0  # for an engine process that is dying to say how it ended
# for one asked to quit: every answer is in by then, and an engine that lingers (keeping the
# GPU busy or hot) gets no longer than this before it is killed
QUIT_GRACE_S = 5.0
# A GPU context is gone this long after its process is: work still running past it is not that
# process's (not yet measured on a GPU: tests/engine/test_device_held.py's GPU test prints it)
FREED_WITHIN_S = 5.0
# An engine that has not loaded (its hello, a server's /health) this long after it started is
# stuck: the 8B's load with its kernels compiled cold takes ~70 s on the H200. The parent's
# environment (the collector's, never a PR's) may shorten it: the GPU test of a load held up by
# a kernel left running does.
LOAD_TIMEOUT_S = float(os.environ.get("SPARKBOARD_LOAD_TIMEOUT_S", "300"))
SPRINKLE = 32  # a prompt gets one random id per this many positions


class Challenges:
    """Unpredictable choices from one seed: blake2b in counter mode (without the seed, one answer
    says nothing about the next, unlike a Mersenne Twister's outputs)."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = secrets.randbits(63) if seed is None else seed
        self._n = 0

    def below(self, n: int) -> int:
        self._n += 1
        digest = hashlib.blake2b(f"{self.seed}:{self._n}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") % n

    def prompt(self, material: np.ndarray, length: int, vocab: int) -> np.ndarray:
        """`length` ids of the corpus from a random place, with random ids at the first and the
        last position and at one position in every SPRINKLE: neither a prefix cache nor a table
        of answers computed ahead for every place in the corpus can match it."""
        start = self.below(len(material))
        ids = material[(np.arange(length) + start) % len(material)].copy()
        for pos in {0, length - 1, *(self.below(length) for _ in range(length // SPRINKLE))}:
            ids[pos] = self.below(vocab)
        return ids


@dataclass
class Region:
    """One timed operation: the parent's seconds, the engine process's own figure, and its group
    (the operation and its shape, e.g. "decode ctx=4096 w=1": the clock cross-check is judged
    per group too, so a clock changed around one operation only shows in its group)."""

    parent_s: float
    inproc_s: float
    group: str = ""


@dataclass
class Sample:
    """What a timed operation produced, for verify.py to hold against main's model.

    prompt: the sequence's prompt; argmax/topk: the prefill's digest (None when the prompt was
    prefilled untimed); first + ids: the decode's fed token and what it generated."""

    prompt: np.ndarray
    argmax: int | None = None
    topk: list[tuple[int, float]] | None = None
    first: int | None = None
    ids: np.ndarray | None = None


@dataclass
class Timeline:
    regions: list[Region] = field(default_factory=list)


def starting(limit: int | None):  # noqa: ANN201 (a preexec_fn, or None)
    """What an engine's process does before it becomes the engine (Popen's preexec_fn; None
    when nothing): its data segment capped at `limit` bytes (RLIMIT_DATA), and its cores the
    ones it is to load on (turns.loading_cores; `TurnTaker.hold` moves it onto the parent's)."""
    cores = loading_cores()
    if limit is None and cores is None:
        return None

    def apply() -> None:
        if limit is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        if cores is not None:
            os.sched_setaffinity(0, cores)

    return apply


def _in_s(reply: dict) -> float:
    v = reply.get("in_s")
    if not isinstance(v, int | float) or not np.isfinite(v) or v < 0:
        raise EngineOutputError("the engine process sent no usable in-process time")
    return float(v)


# The checkout this timing parent runs from (main's): engine/harness/timing.py -> its root
PARENT_CHECKOUT = Path(__file__).resolve().parents[2]


class EngineDied(Exception):
    """The engine process ended before answering (raised only when asked to, see below)."""


@dataclass(frozen=True)
class EngineSpec:
    """Where and how one engine runs: its checkout, its sandbox, the folders it may write (its
    home; its compiled-kernel cache, CuPy's CUPY_CACHE_DIR, where one is given), and the cap on
    its data segment (RLIMIT_DATA, bytes: the long-context check's budget on the CPU)."""

    checkout: Path
    sandbox: Sandbox
    home: Path
    kernel_cache: Path | None = None
    data_limit: int | None = None

    def command(self, argv: list[str]) -> tuple[list[str], dict[str, str] | None]:
        drop = ("PYTHONPATH", "PYTHONHOME", LOAD_CORES_ENV)  # the last: the parent's to apply
        env = {k: v for k, v in os.environ.items() if k not in drop}
        writable = [self.home]
        if self.kernel_cache is not None:
            env["CUPY_CACHE_DIR"] = str(self.kernel_cache)
            writable.append(self.kernel_cache)
        return self.sandbox.wrap(
            argv,
            checkout=self.checkout,
            writable=writable,
            env=env,
            # not the timing parent's own checkout: an engine reads its checkout and no other
            python_path=library_paths(exclude=[PARENT_CHECKOUT]),
        )


class TakesTurns:
    """What an engine of a session is to the timing parent, whatever serves it (an engine
    process over pipes, or a server over a socket: server_engine.py): its processes stopped but
    during its own turns (`turns`), its timed regions, and each sequence's length as the
    requests say. A subclass starts its processes and sets `turns`."""

    spec: EngineSpec
    baseline: bool
    name: str
    turns: TurnTaker
    err: IO[bytes]  # what its processes write, read back when it ends

    def __init__(self) -> None:
        self.timeline = Timeline()
        self.lengths: dict[int, int] = {}  # each sequence's cached tokens, as the requests say
        self.vocab = 0

    @property
    def pid(self) -> int:
        """The engine's own process (inside its sandbox: the command bwrap started)."""
        return self.turns.tree.engine_pid() or self.turns.tree.root

    @property
    def ledger(self):  # noqa: ANN201 - turns.Ledger
        return self.turns.ledger

    def _last_words(self) -> str:
        """The last line its processes wrote (`err`: their output, copied to ours once)."""
        if self.err.closed:
            return ""
        self.err.seek(0)
        text = self.err.read().decode("utf-8", errors="replace")
        self.err.close()
        sys.stderr.write(text[-4000:])
        sys.stderr.flush()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return f": {lines[-1][:300]}" if lines else ""

    def failure(self, why: str) -> Exception:
        """The error for an answer that cannot be used: main's is never the PR's fault."""
        return (BaselineError if self.baseline else EngineOutputError)(f"{self.name} {why}")

    def hold(self) -> None:
        """Loaded: stopped until its first turn, every thread on the session's cores."""
        left = self.turns.hold()
        if left:
            raise self.failure(f"kept {left} thread(s) off the session's cores once loaded")

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Its turn: continued at the start, every process stopped at the end (turns.py); the
        requests inside it run back to back."""
        self.turns.begin()
        try:
            yield
        finally:
            if self.turns.active:
                self.turns.end()

    def group_of(self, message: dict) -> str:
        """The operation and its shape, from the request and the sequences' lengths before it:
        "prefill n=4096" (" x8": eight prompts in one region; " at=L" when the sequence already
        held L tokens), "decode ctx=4096 w=1" (ctx: the shortest sequence's length; w: the
        sequences decoded together)."""
        op = message.get("op")
        if op == "prefill":
            seqs = message["seqs"]
            start = self.lengths.get(seqs[0], 0)
            many = f" x{len(seqs)}" if len(seqs) > 1 else ""
            return f"prefill n={message['n']}{many}" + (f" at={start}" if start else "")
        if op == "decode":
            ctx = min((self.lengths.get(s, 0) for s in message["seqs"]), default=0)
            return f"decode ctx={ctx} w={len(message['seqs'])}"
        return str(op)

    def _track(self, message: dict) -> None:
        """Each sequence's length after an operation the engine has answered."""
        op = message.get("op")
        if op == "reset":
            self.lengths = dict.fromkeys(range(message["n_seqs"]), 0)
        elif op == "truncate":
            self.lengths[message["seq"]] = message["len"]
        elif op == "prefill":
            for s in message["seqs"]:
                self.lengths[s] = self.lengths.get(s, 0) + message["n"]
        elif op == "decode":
            for s in message["seqs"]:
                self.lengths[s] = self.lengths.get(s, 0) + message["steps"]


def whose_device(held: DeviceHeld, engines: list[TakesTurns], probe: DeviceProbe) -> Exception:
    """The GPU is held (turns.DeviceHeld): whose work is it? Every engine is stopped (or still
    loading, before the first turn), and a stopped process queues nothing new, so the work
    runs in a context one of them made, or in another process of the box. Each engine is
    killed in turn, the one under test first (main's is trusted), and the device probed once
    its processes are gone: a context dies with its process, and its kernels with it. The error
    that ends the session: the PR's `EngineForged`, main's `BaselineError`, the box's
    `EngineError` (measured again)."""
    for engine in reversed(engines):  # main's engine first in the list, the measured one last
        gone = engine.turns.tree.kill(within_s=FREED_WITHIN_S)
        after = probe.wait_idle(FREED_WITHIN_S)
        if gone and after < FREED_WITHIN_S:
            why = (
                f"{engine.name} left work running on the GPU: {held}, and it was idle "
                f"{after:.2f} s after the engine's processes were killed (it worked while it "
                "was not its turn)"
            )
            return BaselineError(why) if engine.baseline else EngineForged(why)
    return EngineError(
        f"{held}, and still after every engine's processes were killed: another process on "
        "the box uses it"
    )


class EngineProcess(TakesTurns):
    """One engine under test in its own (sandboxed) process, driven over two pipes, stopped but
    during its own requests. Start it, then `connect()` (several engines load side by side).

    `raise_on_death`: an engine that dies raises EngineDied (the long-context check reports it)
    instead of ending this process the same way. `probe`: the GPU's idle probe."""

    def __init__(
        self,
        spec: EngineSpec,
        model: str,
        backend: str,
        raise_on_death: bool = False,
        probe: DeviceProbe | None = None,
        baseline: bool = False,
    ) -> None:
        super().__init__()
        self.spec, self.raise_on_death, self.baseline = spec, raise_on_death, baseline
        self.name = "main's engine process" if baseline else "the engine process"
        ctl_r, ctl_w = os.pipe()
        rep_r, rep_w = os.pipe()
        argv = [sys.executable, "-m", "engine.harness.serve", "--model", model]
        argv += ["--backend", backend, "--ctl-fd", str(ctl_r), "--rep-fd", str(rep_w)]
        argv, env = spec.command(argv)
        # its stderr goes to a file, copied to ours when it ends (the session's log), whose last
        # line says why it died
        self.err = tempfile.TemporaryFile()  # noqa: SIM115
        limit = spec.data_limit
        self.proc = subprocess.Popen(
            argv,
            cwd=spec.checkout,
            env=env,
            pass_fds=(ctl_r, rep_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.err,
            preexec_fn=starting(limit),
        )
        os.close(ctl_r)
        os.close(rep_w)
        self.ctl, self.rep = ctl_w, rep_r
        self.turns = TurnTaker(ProcessTree(self.proc.pid, not spec.sandbox.sealed), probe)

    def connect(self) -> None:
        """Wait for the engine's hello (its model loaded; LOAD_TIMEOUT_S at most), then stop it
        until its first turn."""
        loaded, _, _ = select.select([self.rep], [], [], LOAD_TIMEOUT_S)
        if not loaded:
            err = BaselineError if self.baseline else EngineOutputError
            raise err(f"{self.name} did not load within {LOAD_TIMEOUT_S:.0f} s")
        hello = self._recv()
        self.vocab = int(hello.get("vocab", 0))
        if self.vocab <= 0:
            err = BaselineError if self.baseline else EngineOutputError
            raise err(f"{self.name} reported no vocabulary size")
        self.hold()

    def _died(self) -> None:
        """The engine process is gone: leave the way it left (a signal stays a signal)."""
        self.turns.release()
        try:
            code = exit_status(self.spec.sandbox, self.proc.wait(timeout=QUIT_WAIT_S))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            err = BaselineError if self.baseline else EngineOutputError
            raise err(f"{self.name} stopped answering") from None
        how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if self.baseline:  # main's failure is never the PR's: no signal passed on
            raise BaselineError(f"{self.name} {how}" + self._last_words())
        if self.raise_on_death:
            raise EngineDied(f"{self.name} {how}" + self._last_words())
        words = self._last_words()
        if code < 0:
            print(f"error: {self.name} was killed by signal {-code}", file=sys.stderr)
            sys.stderr.flush()
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        raise EngineOutputError(f"{self.name} exited with code {code}{words}")

    def _recv(self) -> dict:
        try:
            reply = recv(self.rep)
        except WireError:
            self._died()
            raise  # unreachable: _died raises or kills this process
        if reply.get("ok") is not True:
            err = BaselineError if self.baseline else EngineOutputError
            raise err(f"{self.name} broke the protocol")
        return reply

    def _send(self, message: dict) -> None:
        try:
            send(self.ctl, message)
        except WireError:
            self._died()

    def _rest(self, replies: int) -> list[dict]:
        """The answers after the first (a prefill's digests), each asked for with `more` once
        the first is read, so the engine does no work while the parent reads its clock."""
        out = []
        for _ in range(replies - 1):
            self._send({"op": "more"})
            out.append(self._recv())
        return out

    def call(self, message: dict, replies: int = 1) -> list[dict]:
        """An untimed operation (reset, truncate, ...), in its turn (a turn of its own when
        none is under way)."""
        if not self.turns.active:
            with self.turn():
                return self.call(message, replies)
        self.turns.asking()
        self._send(message)
        out = [self._recv(), *self._rest(replies)]
        self.turns.answered()
        self._track(message)
        return out

    def timed(self, message: dict, replies: int = 1) -> tuple[list[dict], float]:
        """A timed operation, in its turn: the parent's seconds from the request to the first
        (committing) answer; the rest of the answers (digests) are read untimed."""
        if not self.turns.active:
            with self.turn():
                return self.timed(message, replies)
        group = self.group_of(message)
        self.turns.asking()
        t0 = time.perf_counter()
        self._send(message)
        first = self._recv()
        seconds = max(time.perf_counter() - t0, 1e-9)
        rest = self._rest(replies)
        self.turns.answered()
        self.timeline.regions.append(Region(seconds, _in_s(first), group))
        self._track(message)
        return [first, *rest], seconds

    # --- the operations ---------------------------------------------------------------------

    def reset(self, n_seqs: int, max_len: int) -> None:
        self.call({"op": "reset", "n_seqs": n_seqs, "max_len": max_len})

    def truncate(self, seq: int, length: int) -> None:
        self.call({"op": "truncate", "seq": seq, "len": length})

    def prefill(
        self, seqs: list[int], prompts: list[np.ndarray], timed: bool = True
    ) -> tuple[list[Sample], float]:
        """Each prompt prefilled into its sequence, in order, in one request (several short
        prompts make one region long enough to time); their samples and the seconds."""
        n = len(prompts[0])
        if any(len(p) != n for p in prompts) or len(seqs) != len(prompts):
            raise ValueError("prefill takes one prompt of the same length per sequence")
        ids = np.concatenate(prompts)
        message = {"op": "prefill", "seqs": seqs, "ids": pack_ids(ids), "n": n}
        if timed:
            (reply, digest), seconds = self.timed(message, replies=2)
        else:
            (reply, digest), seconds = self.call(message, replies=2), 0.0
        argmax, topk = reply.get("argmax"), digest.get("topk")
        if not isinstance(argmax, list) or len(argmax) != len(seqs):
            raise EngineOutputError(f"prefill answered argmax {str(argmax)[:80]!r}")
        if not isinstance(topk, list) or len(topk) != len(seqs):
            raise EngineOutputError("prefill sent no usable digest of its logits")
        samples = []
        for prompt, a, row in zip(prompts, argmax, topk, strict=True):
            if not isinstance(a, int) or not 0 <= a < self.vocab:
                raise EngineOutputError(f"prefill answered argmax {a!r}")
            if not isinstance(row, list) or not row or len(row) > 64:
                raise EngineOutputError("prefill sent no usable digest of its logits")
            pairs = [(int(i), float(lp)) for i, lp in row]
            samples.append(Sample(prompt=prompt, argmax=a, topk=pairs))
        return samples, seconds

    def decode(
        self, seqs: list[int], first: np.ndarray, steps: int, timed: bool = True
    ) -> tuple[np.ndarray, float]:
        message = {"op": "decode", "seqs": seqs, "first": [int(t) for t in first], "steps": steps}
        if timed:
            (reply,), seconds = self.timed(message)
        else:
            (reply,), seconds = self.call(message), 0.0
        ids = unpack_ids(reply.get("ids"), steps * len(seqs)).reshape(steps, len(seqs))
        bad = (ids < 0) | (ids >= self.vocab)
        if bad.any():
            raise EngineOutputError(
                f"decode produced {int(bad.sum())} ids outside the vocabulary of {steps * len(seqs)}"
            )
        return ids, seconds

    def vram(self, kv_tokens: int) -> dict | None:
        return self.call({"op": "vram", "kv_tokens": kv_tokens})[0].get("vram")

    def close(self) -> None:
        """Ask the engine process to quit, and make sure it has (one that already ended has
        said why: its error is the one raised)."""
        grace = QUIT_GRACE_S
        try:
            if self.proc.poll() is None and not self.err.closed:
                self.turns.release()
                try:
                    send(self.ctl, {"op": "quit"})
                except WireError:
                    self._died()
                if select.select([self.rep], [], [], QUIT_GRACE_S)[0]:
                    self._recv()
                else:  # still loading, or stuck: it had its grace
                    grace = 0.0
        finally:
            for fd in (self.ctl, self.rep):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.turns.release()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._last_words()  # its log joins ours
