"""An engine served over HTTP (llama.cpp's `llama-server` first), as the timing parent sees it.

The server runs from a checkout's build (its `bin/`), in the same sandbox as any engine process
(sandbox.py): no network, its own PID namespace, everything read-only but its home and one
folder it shares with the parent, where it listens on a Unix socket (http_unix.py). The parent
speaks to it as it speaks to an engine process over pipes (timing.py), operation for operation,
so the speed measurements (measure.py) and the turns (turns.py) are the same:

* a sequence is a server slot (`--parallel` slots, a request pinned to one by `id_slot`, prompt
  caching on, so a slot keeps what it was fed); the parent keeps each sequence's tokens and
  sends them whole, and the server reuses the slot's cache for the prefix it already holds;
* prefill: the sequence's tokens with one token predicted, its top-k log-probs the digest;
  several prompts to a region are several requests back to back;
* decode: the sequence's tokens plus the fed first token, `steps` tokens predicted greedily
  (temperature 0, end-of-generation ignored); sequences decoded together are requests in
  flight at once, which the server batches;
* the server's own `timings` (prompt_ms + predicted_ms) are the engine's figure for the
  clock cross-check, as an engine process's `in_s`.

Every answer is the PR's words: ids outside the vocabulary, a count other than asked, a missing
or negative timing make an `EngineOutputError` (main's: a `BaselineError`). The requests of an
answer that cannot be used are kept (`asked`), for main's server to be asked them too
(`fails_too`: a failure both builds share is main's, speed_session.shared_failure).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import BaselineError
from engine.harness.http_unix import NotTheServer, ServerReplyError, UnixConnection
from engine.harness.sandbox import Sandbox, exit_status
from engine.harness.timing import (
    LOAD_TIMEOUT_S,
    QUIT_GRACE_S,
    EngineSpec,
    Region,
    Sample,
    TakesTurns,
    starting,
)
from engine.harness.turns import DeviceProbe, ProcessTree, TurnTaker
from engine.models import model_file, served_model_file

DEATH_GRACE_S = 2.0  # a dropped connection: how long its server (and sandbox) may take to end
REQUEST_TIMEOUT_S = 600.0  # one request's answer (a 32k prefill on a slow box is minutes)
DIGEST_TOPK = 16  # as an engine process's prefill digest (serve.py)
LOGPROB_FLOOR = -1e4  # a log-prob of minus infinity (a token the server ruled out)
INSIDE_BUILD = "/build/out"  # where a build lies inside its sandbox, as when it was built
INSIDE_SHARED = "/run/sparkboard"  # the folder a sandbox shares with the parent, inside


@dataclass(frozen=True)
class ServerKind:
    """How one kind of server is started from its build: the binary and its fixed flags (the
    same for main and the PR: a PR changes the server's code, never how it is measured)."""

    name: str
    binary: str  # relative to the build folder

    def argv(
        self, model: str, socket: str, slots: int, slot_ctx: int, threads: int, gpu: bool
    ) -> list[str]:
        binary = f"{INSIDE_BUILD}/{self.binary}"
        return [
            binary,
            "--model", model,
            *offload(gpu),
            "--host", socket,  # a path ending in .sock: llama-server listens on a Unix socket
            "--parallel", str(slots),
            "--ctx-size", str(slots * slot_ctx),
            "--no-kv-unified",  # each slot its own slot_ctx
            "--threads", str(threads),
            "--threads-batch", str(threads),
            "--threads-http", str(slots + 1),  # a thread per request in flight
            "--poll", "0",  # threads wait asleep, not spinning, between graphs: a stopped turn is idle
            "--cache-ram", "0",  # no prompt cache beyond the slots' own
            "--no-webui",
            "--no-warmup",  # the harness warms both engines up together
            "--log-disable",
        ]  # fmt: skip


KINDS = {"llama.cpp": ServerKind("llama.cpp", "bin/llama-server")}


def offload(gpu: bool) -> list[str]:
    """llama.cpp's flag for where a model's layers compute: every one on the GPU where the
    sandbox binds it (the profile's backend is cupy), none elsewhere, so a CUDA build served
    without a GPU, or a CPU build, computes on the CPU alike (the server and its tools)."""
    return ["--n-gpu-layers", "999" if gpu else "0"]


def server_kind(name: str) -> ServerKind:
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(
            f"unknown server kind {name!r}: expected one of {', '.join(KINDS)}"
        ) from None


def in_build(
    sandbox: Sandbox,
    build: Path,
    argv: list[str],
    home: Path,
    shared: Path,
    readable: list[Path],
) -> tuple[list[str], dict[str, str] | None]:
    """(argv, environment) of a build's program sealed: the build at INSIDE_BUILD (the path it
    was built at), `shared` at INSIDE_SHARED (the one folder it writes besides its `home`, which
    the parent reads), `readable` read-only; no LLAMA_ variable (they would set its flags).
    Unsealed, `argv` as it is, its paths the box's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    if not sandbox.sealed:
        return argv, env
    box = dataclasses.replace(sandbox, readable=(*sandbox.readable, *map(str, readable)))
    return box.wrap(
        argv,
        checkout=build,
        writable=[home, shared],
        env=env,
        at={build: INSIDE_BUILD, shared: INSIDE_SHARED},
    )


def _number(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) and x >= 0 else None


def aligned_top_logprobs(
    tokens: list[int], rows: object, vocab: int
) -> list[list[tuple[int, float]] | None]:
    """Each token's top (id, log-prob) pairs from llama-server's `completion_probabilities`
    rows, None where it withheld them. It sends a token's only once the text it has made so far
    is whole UTF-8: a token that ends inside a character (a byte token) has none, and the one
    that completes the character has its own. So the rows are matched to the tokens from the
    last one back, each to the latest token with its id. A probability of 0 is a log-prob of
    minus infinity, which its JSON writes as null: the floor. ValueError: rows it cannot have
    meant."""
    if not isinstance(rows, list) or len(rows) > len(tokens):
        raise ValueError("sent no usable top log-probs")
    out: list[list[tuple[int, float]] | None] = [None] * len(tokens)
    at = len(tokens) - 1
    for row in reversed(rows):
        ident = row.get("id") if isinstance(row, dict) else None
        if type(ident) is not int:
            raise ValueError("sent no usable top log-probs")
        while at >= 0 and tokens[at] != ident:
            at -= 1
        if at < 0:
            raise ValueError("sent top log-probs for a token it did not generate")
        try:
            pairs = [
                (r["id"], LOGPROB_FLOOR if r["logprob"] is None else r["logprob"])
                for r in row["top_logprobs"]
            ]
        except (TypeError, KeyError):
            raise ValueError("sent no usable top log-probs") from None
        ok = all(type(i) is int and 0 <= i < vocab for i, _ in pairs) and all(
            isinstance(lp, int | float) and lp <= 0 and math.isfinite(lp) for _, lp in pairs
        )
        if not pairs or not ok:
            raise ValueError("sent no usable top log-probs")
        out[at] = [(int(i), float(lp)) for i, lp in pairs]
        at -= 1
    return out


class ServerEngine(TakesTurns):
    """One served engine in its sandbox, driven over its socket, stopped but during its own
    turns. `slots` sequences of up to `slot_ctx` tokens each; `threads` compute threads;
    `models`: the parent's folder a dummy model's GGUF file is written to."""

    def __init__(
        self,
        spec: EngineSpec,
        model: str,
        kind: ServerKind,
        slots: int,
        slot_ctx: int,
        threads: int,
        probe: DeviceProbe | None = None,
        baseline: bool = False,
        models: Path | None = None,
    ) -> None:
        super().__init__()
        self.spec, self.baseline, self.kind = spec, baseline, kind
        self.slots, self.slot_ctx = slots, slot_ctx
        self.name = "main's server" if baseline else "the server"
        if not (spec.checkout / kind.binary).is_file():
            raise self.failure(f"has no {kind.binary} in its build {spec.checkout}")
        # a short path of the parent's own (a socket's path has ~100 bytes at most)
        self.folder = Path(tempfile.mkdtemp(prefix="sb-sock-"))
        self.socket = self.folder / "server.sock"
        # a dummy model is written as a GGUF file into `models` (the parent's, read-only to
        # both servers); without that folder its name is passed on, for the server to refuse
        path = served_model_file(model, models) if models is not None else model_file(model)
        argv = kind.argv(
            str(path or model),
            f"{INSIDE_SHARED}/server.sock",
            slots,
            slot_ctx,
            threads,
            gpu=spec.sandbox.gpu,
        )
        if not spec.sandbox.sealed:  # unsealed, the paths are the box's own
            argv = [str(spec.checkout / kind.binary), *argv[1:]]
            argv[argv.index("--host") + 1] = str(self.socket)
        readable = [] if path is None else [path.parent]  # the model's folder
        argv, env = in_build(spec.sandbox, spec.checkout, argv, spec.home, self.folder, readable)
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 - its log, copied to ours at the end
        limit = spec.data_limit  # the long-context check's budget, as an engine process's
        self.proc = subprocess.Popen(
            argv,
            cwd=spec.checkout,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.err,
            stderr=self.err,
            preexec_fn=starting(limit),
        )
        self.turns = TurnTaker(ProcessTree(self.proc.pid, not spec.sandbox.sealed), probe)
        self.tokens: dict[int, list[int]] = {}  # each sequence's tokens, as sent and generated
        self.conns: list[UnixConnection] = []
        # the requests of the operation under way, (bodies, in flight together): when the
        # server's answer is unusable, main's server is asked them too (fails_too)
        self.asked: tuple[list[tuple[int, dict]], bool] | None = None

    # --- start and stop ---------------------------------------------------------------------

    def connect(self, vocab: int) -> None:
        """Wait until the server answers /health (its model loaded), then stop it until its
        first turn. `vocab`: the model's, read by the parent from the model file."""
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            if self.died:
                raise self.failure(f"exited while loading{self._last_words()}")
            if self.socket.exists():
                health = UnixConnection(self.socket, 5.0, self.is_mine)
                try:
                    health.call("GET", "/health")
                    break
                except NotTheServer as e:
                    raise self.failure(f"put another process's socket in its place: {e}") from None
                except (ServerReplyError, OSError):
                    pass  # 503 while it loads
                finally:
                    health.close()
            if time.monotonic() > deadline:
                raise self.failure(f"did not answer /health within {LOAD_TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        self.vocab = vocab
        self.conns = [
            UnixConnection(self.socket, REQUEST_TIMEOUT_S, self.is_mine) for _ in range(self.slots)
        ]
        self.hold()

    @property
    def died(self) -> bool:
        return self.proc.poll() is not None

    def is_mine(self, pid: int) -> bool:
        """Whether `pid` is one of the server's processes (a connection's other end)."""
        return pid in self.turns.tree.pids()

    def _broken(self, e: ServerReplyError) -> Exception:
        """An answer that cannot be used: the server died, or it said something unusable."""
        with contextlib.suppress(subprocess.TimeoutExpired):  # a sandbox ends after the server
            self.proc.wait(timeout=DEATH_GRACE_S)
        if self.died:
            code = exit_status(self.spec.sandbox, self.proc.returncode)
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            return self.failure(how + self._last_words())
        return self.failure(f"answered unusably: {e}")

    def close(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after the grace) and remove its folder."""
        try:
            self.turns.release()
            for c in self.conns:
                c.close()
            if self.proc.poll() is None:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=QUIT_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._last_words()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    # --- requests -----------------------------------------------------------------------------

    def _body(self, seq: int, ids: list[int], n_predict: int, n_probs: int = 0) -> dict:
        return {
            "prompt": ids,
            "n_predict": n_predict,
            "id_slot": seq,
            "cache_prompt": True,  # a slot keeps its sequence (fresh challenges share nothing)
            "samplers": ["temperature"],
            "temperature": 0.0,  # greedy
            "ignore_eos": True,
            "return_tokens": True,
            "n_probs": n_probs,
            "stream": False,
        }

    def _answers(self, bodies: list[tuple[int, dict]], together: bool) -> list[dict]:
        """The answers to one request per (sequence, body): in flight at once (`together`) or
        one after another."""
        out: list[dict] = []
        try:
            if together:
                for seq, body in bodies:
                    self.conns[seq].send_json("POST", "/completion", body)
                out = [self.conns[seq].read_json("POST /completion") for seq, _ in bodies]
            else:
                out = [self.conns[seq].call("POST", "/completion", body) for seq, body in bodies]
        except ServerReplyError as e:
            raise self._broken(e) from None
        return out

    def _tokens(self, answer: dict, n: int) -> list[int]:
        ids = answer.get("tokens")
        if not isinstance(ids, list) or len(ids) != n or not all(type(t) is int for t in ids):
            raise self.failure(f"answered tokens {str(ids)[:80]!r}, expected {n} ids")
        if any(not 0 <= t < self.vocab for t in ids):
            raise self.failure(f"produced ids outside the vocabulary of {self.vocab}")
        return ids

    def _own_s(self, answer: dict) -> float:
        t = answer.get("timings")
        if not isinstance(t, dict):
            raise self.failure("sent no timings")
        parts = [_number(t.get("prompt_ms")), _number(t.get("predicted_ms"))]
        if any(p is None for p in parts):
            raise self.failure(f"sent unusable timings {str(t)[:120]!r}")
        return sum(p for p in parts if p is not None) / 1e3

    def top_logprobs(self, answer: dict, n: int) -> list[list[tuple[int, float]] | None]:
        """The top log-probs at each of the answer's `n` predicted tokens, None where the server
        withheld them (aligned_top_logprobs)."""
        try:
            return aligned_top_logprobs(
                self._tokens(answer, n), answer.get("completion_probabilities", []), self.vocab
            )
        except ValueError as e:
            raise self.failure(str(e)) from None

    def _exchange(
        self, message: dict, bodies: list[tuple[int, dict]], together: bool, timed: bool
    ) -> tuple[list[dict], float]:
        """One operation in its turn (a turn of its own when none is under way): the answers,
        and (timed) the parent's seconds from the first request to the last answer, its region
        recorded with the server's own figure."""
        if not self.turns.active:
            with self.turn():
                return self._exchange(message, bodies, together, timed)
        group = self.group_of(message)
        self.asked = (bodies, together)
        if not timed:  # on new connections: the server may have closed one idle past its
            for seq, _ in bodies:  # keep-alive while it was stopped (llama-server's: 5 s)
                self.conns[seq].close()
        self.turns.asking()
        t0 = time.perf_counter()
        answers = self._answers(bodies, together)
        seconds = max(time.perf_counter() - t0, 1e-9)
        self.turns.answered()
        if timed:
            own = [self._own_s(a) for a in answers]
            self.timeline.regions.append(Region(seconds, max(own) if together else sum(own), group))
        self._track(message)
        return answers, seconds if timed else 0.0

    # --- the operations (as EngineProcess's) --------------------------------------------------

    def reset(self, n_seqs: int, max_len: int) -> None:
        if n_seqs > self.slots or max_len > self.slot_ctx:
            raise ValueError(
                f"{n_seqs} sequences of {max_len} tokens: the server was started with "
                f"{self.slots} slots of {self.slot_ctx}"
            )
        self.tokens = {s: [] for s in range(n_seqs)}
        self._track({"op": "reset", "n_seqs": n_seqs})

    def truncate(self, seq: int, length: int) -> None:
        self.tokens[seq] = self.tokens[seq][:length]
        self._track({"op": "truncate", "seq": seq, "len": length})

    def prefill(
        self, seqs: list[int], prompts: list[np.ndarray], timed: bool = True
    ) -> tuple[list[Sample], float]:
        n = len(prompts[0])
        if any(len(p) != n for p in prompts) or len(seqs) != len(prompts):
            raise ValueError("prefill takes one prompt of the same length per sequence")
        bodies = []
        for s, p in zip(seqs, prompts, strict=True):
            self.tokens[s] = self.tokens.get(s, []) + [int(t) for t in p]
            bodies.append((s, self._body(s, self.tokens[s], 1, DIGEST_TOPK)))
        message = {"op": "prefill", "seqs": seqs, "n": n}
        answers, seconds = self._exchange(message, bodies, together=False, timed=timed)
        samples = []
        for p, a in zip(prompts, answers, strict=True):
            (top,) = self.top_logprobs(a, 1)  # its one token checked with it
            samples.append(Sample(prompt=p, argmax=a["tokens"][0], topk=top))  # top None: withheld
        return samples, seconds

    def decode(
        self, seqs: list[int], first: np.ndarray, steps: int, timed: bool = True
    ) -> tuple[np.ndarray, float]:
        bodies = []
        for s, f in zip(seqs, first, strict=True):
            self.tokens[s] = self.tokens[s] + [int(f)]
            bodies.append((s, self._body(s, self.tokens[s], steps)))
        message = {"op": "decode", "seqs": seqs, "steps": steps}
        answers, seconds = self._exchange(message, bodies, together=len(seqs) > 1, timed=timed)
        out = np.zeros((steps, len(seqs)), dtype=np.int64)
        for j, (s, a) in enumerate(zip(seqs, answers, strict=True)):
            made = self._tokens(a, steps)
            out[:, j] = made
            # the fed token and all but the last made one are in the slot's cache
            self.tokens[s] = self.tokens[s] + made[:-1]
        return out, seconds

    def vram(self, kv_tokens: int) -> dict | None:
        return None  # memory is read from outside (memory.py); a server reports none of its own

    def fails_too(self, asked: tuple[list[tuple[int, dict]], bool]) -> str | None:
        """Main's server asked, in a turn of its own and untimed, the requests the PR's server
        answered unusably: why its own answers are unusable too (a failure the two builds share,
        so main's, never the PR's: a bug of main's that a fresh challenge happened to reach), or
        None (the PR's failure is its own)."""
        assert self.baseline, "only main's server is the reference of a failure"
        bodies, together = asked
        try:
            answers, _ = self._exchange({"op": "replay"}, bodies, together, timed=False)
            for (_, body), answer in zip(bodies, answers, strict=True):
                if body["n_probs"]:  # its tokens checked with them
                    self.top_logprobs(answer, body["n_predict"])
                else:
                    self._tokens(answer, body["n_predict"])
        except BaselineError as e:
            return str(e)
        return None

    def continuation(self, seq: int, ids: list[int], steps: int, n_probs: int) -> dict:
        """Untimed: `steps` greedy tokens after `ids` with each one's top log-probs (main's
        server as the reference of verification: server_verify.py)."""
        (answer,) = self.continuations([ids], steps, n_probs, first=seq)
        return answer

    def continuations(
        self, prompts: list[list[int]], steps: int, n_probs: int, first: int = 0
    ) -> list[dict]:
        """Untimed: each prompt continued as `continuation` does, all in flight together, a slot
        each from `first` on (the server then decodes them in one batch a step)."""
        bodies = []
        for seq, ids in enumerate(prompts, start=first):
            self.tokens[seq] = list(ids)
            bodies.append((seq, self._body(seq, list(ids), steps, n_probs)))
        message = {"op": "reference"}
        answers, _ = self._exchange(message, bodies, len(bodies) > 1, timed=False)
        for answer in answers:
            self._tokens(answer, steps)
        return answers
