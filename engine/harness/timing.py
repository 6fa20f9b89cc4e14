"""The timing parent's side of a measurement: the engine process, the clock, the challenges.

The parent (`bench.py`) runs main's pinned harness and never imports the engine under test. It
starts the engine in a child process (`serve.py`, in the checkout being measured), and times
every operation with its own clock from sending the request to reading the answer that commits
to the result. The child can patch its own clock, its harness objects or its event timers: none
of that reaches the number a verdict uses. Prompts and first tokens are drawn here, after the
model has loaded, from a seed drawn per session: nothing can be computed before it is asked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.errors import EngineOutputError
from engine.harness.wire import WireError, pack_ids, recv, send, unpack_ids

QUIT_WAIT_S = 30.0  # for an engine process that is dying to say how it ended
# for one asked to quit: every answer is in by then, and an engine that lingers (keeping the
# GPU busy or hot until main's next session) gets no longer than this before it is killed
QUIT_GRACE_S = 5.0
SPRINKLE = 32  # a prompt gets one random id per this many positions
# The engine's own compiled-kernel cache (CuPy's), where the collector gives it one: this
# process keeps reading the cache in its CUPY_CACHE_DIR (main's) when it verifies the outputs
ENGINE_KERNEL_CACHE = "SPARKBOARD_ENGINE_KERNEL_CACHE"


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


def _library_paths() -> list[str]:
    """This process's PYTHONPATH without its own checkout: the engine process imports the
    measured checkout's engine, never this one's, but finds the same libraries."""
    own = Path(__file__).resolve().parents[2]
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [p for p in paths if Path(p).resolve() != own]


def _limit_data(limit: int):  # noqa: ANN202 (a preexec_fn)
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    return apply


def _in_s(reply: dict) -> float:
    v = reply.get("in_s")
    if not isinstance(v, int | float) or not np.isfinite(v) or v < 0:
        raise EngineOutputError("the engine process sent no usable in-process time")
    return float(v)


class EngineDied(Exception):
    """The engine process ended before answering (raised only when asked to, see below)."""


def engine_env(checkout: Path) -> dict[str, str]:
    """The engine process's environment: this one's, with the measured checkout first on its
    path and, where the collector gave the engine a compiled-kernel cache of its own, that
    cache (this process keeps reading its own CUPY_CACHE_DIR, main's, when it verifies)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join([str(checkout), *_library_paths()])
    if os.environ.get(ENGINE_KERNEL_CACHE):
        env["CUPY_CACHE_DIR"] = os.environ[ENGINE_KERNEL_CACHE]
    return env


class EngineProcess:
    """The engine under test in its own process, driven over two pipes.

    `data_limit` caps the process's data segment (RLIMIT_DATA, bytes: heap and anonymous
    mappings, which NumPy's arrays live in), set before it starts so it cannot raise it.
    `raise_on_death`: an engine that dies raises EngineDied (the long-context check reports it)
    instead of ending this process the same way."""

    def __init__(
        self,
        checkout: Path,
        model: str,
        backend: str,
        data_limit: int | None = None,
        raise_on_death: bool = False,
    ) -> None:
        self.raise_on_death = raise_on_death
        ctl_r, ctl_w = os.pipe()
        rep_r, rep_w = os.pipe()
        env = engine_env(checkout)
        argv = [sys.executable, "-m", "engine.harness.serve", "--model", model]
        argv += ["--backend", backend, "--ctl-fd", str(ctl_r), "--rep-fd", str(rep_w)]
        # its stderr goes to a file, copied to ours when it ends (the session's log), whose last
        # line says why it died
        self.err = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv,
            cwd=checkout,
            env=env,
            pass_fds=(ctl_r, rep_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.err,
            preexec_fn=None if data_limit is None else _limit_data(data_limit),
        )
        os.close(ctl_r)
        os.close(rep_w)
        self.ctl, self.rep = ctl_w, rep_r
        self.timeline = Timeline()
        self.lengths: dict[int, int] = {}  # each sequence's cached tokens, as the requests say
        hello = self._recv()
        self.vocab = int(hello.get("vocab", 0))
        if self.vocab <= 0:
            raise EngineOutputError("the engine process reported no vocabulary size")

    def _last_words(self) -> str:
        """The last line the engine process wrote on stderr (its stderr is copied to ours)."""
        if self.err.closed:
            return ""
        self.err.seek(0)
        text = self.err.read().decode("utf-8", errors="replace")
        self.err.close()
        sys.stderr.write(text[-4000:])
        sys.stderr.flush()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return f": {lines[-1][:300]}" if lines else ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _died(self) -> None:
        """The engine process is gone: leave the way it left (a signal stays a signal)."""
        try:
            code = self.proc.wait(timeout=QUIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise EngineOutputError("the engine process stopped answering") from None
        if self.raise_on_death:
            how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise EngineDied(f"the engine process {how}" + self._last_words())
        words = self._last_words()
        if code < 0:
            print(f"error: the engine process was killed by signal {-code}", file=sys.stderr)
            sys.stderr.flush()
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        raise EngineOutputError(f"the engine process exited with code {code}{words}")

    def _recv(self) -> dict:
        try:
            reply = recv(self.rep)
        except WireError:
            self._died()
            raise  # unreachable: _died raises or kills this process
        if reply.get("ok") is not True:
            raise EngineOutputError("the engine process broke the protocol")
        return reply

    def call(self, message: dict) -> dict:
        """An untimed operation (reset, truncate, ...)."""
        try:
            send(self.ctl, message)
        except WireError:
            self._died()
        reply = self._recv()
        self._track(message)
        return reply

    def timed(self, message: dict) -> tuple[dict, float]:
        """A timed operation: the parent's seconds from the request to the committing answer."""
        group = self.group_of(message)
        t0 = time.perf_counter()
        try:
            send(self.ctl, message)
        except WireError:
            self._died()
        reply = self._recv()
        seconds = max(time.perf_counter() - t0, 1e-9)
        self.timeline.regions.append(Region(seconds, _in_s(reply), group))
        self._track(message)
        return reply, seconds

    def group_of(self, message: dict) -> str:
        """The operation and its shape, from the request and the sequences' lengths before it:
        "prefill n=4096" (" at=L" when the sequence already held L tokens), "decode ctx=4096 w=1"
        (ctx: the shortest sequence's length; w: the sequences decoded together)."""
        op = message.get("op")
        if op == "prefill":
            start = self.lengths.get(message["seq"], 0)
            return f"prefill n={message['n']}" + (f" at={start}" if start else "")
        if op == "decode":
            ctx = min((self.lengths.get(s, 0) for s in message["seqs"]), default=0)
            return f"decode ctx={ctx} w={len(message['seqs'])}"
        return str(op)

    def _track(self, message: dict) -> None:
        """Each sequence's length after an operation the engine process has answered."""
        op = message.get("op")
        if op == "reset":
            self.lengths = dict.fromkeys(range(message["n_seqs"]), 0)
        elif op == "truncate":
            self.lengths[message["seq"]] = message["len"]
        elif op == "prefill":
            self.lengths[message["seq"]] = self.lengths.get(message["seq"], 0) + message["n"]
        elif op == "decode":
            for s in message["seqs"]:
                self.lengths[s] = self.lengths.get(s, 0) + message["steps"]

    # --- the operations ---------------------------------------------------------------------

    def reset(self, n_seqs: int, max_len: int) -> None:
        self.call({"op": "reset", "n_seqs": n_seqs, "max_len": max_len})

    def truncate(self, seq: int, length: int) -> None:
        self.call({"op": "truncate", "seq": seq, "len": length})

    def prefill(self, seq: int, ids: np.ndarray, timed: bool = True) -> tuple[Sample, float]:
        message = {"op": "prefill", "seq": seq, "ids": pack_ids(ids), "n": len(ids)}
        reply, seconds = self.timed(message) if timed else (self.call(message), 0.0)
        digest = self._recv()
        argmax = reply.get("argmax")
        if not isinstance(argmax, int) or not 0 <= argmax < self.vocab:
            raise EngineOutputError(f"prefill answered argmax {argmax!r}")
        topk = digest.get("topk")
        if not isinstance(topk, list) or not topk or len(topk) > 64:
            raise EngineOutputError("prefill sent no usable digest of its logits")
        pairs = [(int(i), float(lp)) for i, lp in topk]
        return Sample(prompt=ids, argmax=argmax, topk=pairs), seconds

    def decode(
        self, seqs: list[int], first: np.ndarray, steps: int, timed: bool = True
    ) -> tuple[np.ndarray, float]:
        message = {"op": "decode", "seqs": seqs, "first": [int(t) for t in first], "steps": steps}
        reply, seconds = self.timed(message) if timed else (self.call(message), 0.0)
        ids = unpack_ids(reply.get("ids"), steps * len(seqs)).reshape(steps, len(seqs))
        bad = (ids < 0) | (ids >= self.vocab)
        if bad.any():
            raise EngineOutputError(
                f"decode produced {int(bad.sum())} ids outside the vocabulary of {steps * len(seqs)}"
            )
        return ids, seconds

    def vram(self, kv_tokens: int) -> dict | None:
        return self.call({"op": "vram", "kv_tokens": kv_tokens}).get("vram")

    def close(self) -> None:
        """Ask the engine process to quit, and make sure it has (one that already ended has
        said why: its error is the one raised)."""
        try:
            if self.proc.poll() is None and not self.err.closed:
                self.call({"op": "quit"})
        finally:
            for fd in (self.ctl, self.rep):
                with contextlib.suppress(OSError):
                    os.close(fd)
            try:
                self.proc.wait(timeout=QUIT_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._last_words()  # its log joins ours
