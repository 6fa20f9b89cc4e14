"""The engine process of a measurement: it loads the model and runs what the timing parent asks.

    python -m engine.harness.serve --model M --backend B --ctl-fd R --rep-fd W

Started by `engine.harness.bench` (the timing parent), never by hand. This is the only process
of a measurement that imports the engine under test (a PR's code): it chooses nothing and
measures nothing that a verdict uses. The parent picks every prompt and every first token
after the model has loaded, times each operation with its own clock from the request to the
answer, and checks the answers against main's model afterwards (`verify.py`).

Operations (wire.py messages; every answer carries "ok"):
  reset {n_seqs, max_len}     truncate {seq, len}     vram {kv_tokens}     quit
  prefill {seqs, ids, n} -> {argmax: [...], in_s}; more -> {topk: [[[id, logprob], ...], ...]}
                         (ids: one prompt of n tokens per sequence, end to end, each prefilled
                         into its sequence in turn: several short prompts make one timed region)
  decode {seqs, first, steps} -> {ids (steps x seqs), in_s}
`in_s` is this process's own figure for the operation (CUDA events on the GPU, the host clock on
the CPU), which the parent holds against its clock as a cross-check. The answer that stops the
parent's clock commits to the result (prefill: the argmax, decode: the ids); the prefill digest
is computed once the parent, its clock read, asks for `more`: never timed, and never begun while
the parent, on the core it may share with this process, is still to read its clock (a 1B's
digests are milliseconds of CPU: data/demo/gpu/README.md, "Short prefills' regions").
"""

from __future__ import annotations

import time

import click
import numpy as np

from engine.cli_common import run_group
from engine.errors import EngineOutputError
from engine.harness.common import log_softmax_rows, open_model, top_k
from engine.harness.wire import WireError, pack_ids, recv, send, unpack_ids
from engine.runner import Runner

DIGEST_TOPK = 16


class HostTimer:
    """The process's own figure on the CPU: the host clock around a synchronized operation."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def start(self) -> None:
        self.runner.synchronize()
        self.t0 = time.perf_counter()

    def stop(self) -> float:
        self.runner.synchronize()
        return time.perf_counter() - self.t0


class EventTimer(HostTimer):
    """On the GPU: CUDA events recorded on the stream around the operation."""

    def start(self) -> None:
        import cupy

        self.runner.synchronize()
        self.begin, self.end = cupy.cuda.Event(), cupy.cuda.Event()
        self.begin.record()

    def stop(self) -> float:
        import cupy

        self.runner.synchronize()
        self.end.record()
        self.end.synchronize()
        return float(cupy.cuda.get_elapsed_time(self.begin, self.end)) / 1e3


def _ids_of(out: object, steps: int, width: int) -> np.ndarray:
    arr = np.asarray(out)
    if arr.shape != (steps, width):
        raise EngineOutputError(f"decode returned shape {arr.shape}, expected {(steps, width)}")
    integral = np.issubdtype(arr.dtype, np.integer) or (
        np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr))
    )
    if not integral:
        raise EngineOutputError("decode returned non-integer token ids")
    return arr.astype(np.int64)


class Server:
    def __init__(self, runner: Runner, ctl: int, rep: int) -> None:
        self.runner, self.ctl, self.rep = runner, ctl, rep
        self.timer = EventTimer(runner) if runner.backend == "cupy" else HostTimer(runner)

    def serve(self) -> None:
        cfg = self.runner.config
        send(self.rep, {"ok": True, "vocab": cfg.vocab_size, "max_context": cfg.max_context})
        while True:
            msg = recv(self.ctl)
            op = msg.get("op")
            if op == "quit":
                send(self.rep, {"ok": True})
                return
            handler = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
            if handler is None:
                raise WireError(f"unknown operation {op!r}")
            handler(msg)

    def await_more(self) -> None:
        """Wait for the parent's word that it has read the answer (and its clock)."""
        op = recv(self.ctl).get("op")
        if op != "more":
            raise WireError(f"expected the parent's 'more', got {op!r}")

    def op_reset(self, msg: dict) -> None:
        self.runner.reset(int(msg["n_seqs"]), int(msg["max_len"]))
        send(self.rep, {"ok": True})

    def op_truncate(self, msg: dict) -> None:
        self.runner.truncate(int(msg["seq"]), int(msg["len"]))
        send(self.rep, {"ok": True})

    def op_vram(self, msg: dict) -> None:
        report = self.runner.vram(kv_tokens=int(msg["kv_tokens"]))
        fields = ("total_bytes", "free_after_load_bytes", "peak_bytes", "kv_cache_bytes")
        vram = None if report is None else {f: int(getattr(report, f)) for f in fields}
        send(self.rep, {"ok": True, "vram": vram})

    def op_prefill(self, msg: dict) -> None:
        seqs, n = [int(s) for s in msg["seqs"]], int(msg["n"])
        ids = unpack_ids(msg["ids"], n * len(seqs)).reshape(len(seqs), n)
        self.timer.start()
        logits = [self.runner.prefill(seq, row) for seq, row in zip(seqs, ids, strict=True)]
        argmax = [int(np.argmax(x)) for x in logits]
        in_s = self.timer.stop()
        send(self.rep, {"ok": True, "argmax": argmax, "in_s": in_s})
        self.await_more()
        digests = []
        for x in logits:
            row = np.asarray(x).reshape(1, -1)
            if not np.all(np.isfinite(row)):
                raise EngineOutputError("prefill returned non-finite logits")
            lp = log_softmax_rows(row)[0]
            digests.append([[i, float(lp[i])] for i in top_k(lp, DIGEST_TOPK)])
        send(self.rep, {"ok": True, "topk": digests})

    def op_decode(self, msg: dict) -> None:
        seqs = [int(s) for s in msg["seqs"]]
        first = np.array([int(t) for t in msg["first"]], dtype=np.int64)
        steps = int(msg["steps"])
        self.timer.start()
        out = self.runner.decode_greedy(seqs, first, steps)
        ids = _ids_of(out, steps, len(seqs))
        in_s = self.timer.stop()
        send(self.rep, {"ok": True, "ids": pack_ids(ids), "in_s": in_s})


@click.command(name="engine.harness.serve")
@click.option("--model", required=True)
@click.option("--backend", default="auto")
@click.option("--ctl-fd", type=int, required=True, help="Pipe the parent writes requests to.")
@click.option("--rep-fd", type=int, required=True, help="Pipe this process answers on.")
def serve(model: str, backend: str, ctl_fd: int, rep_fd: int) -> None:
    """Load a model and answer the timing parent's operations (see the module docstring)."""
    runner = open_model(model, backend)
    Server(runner, ctl_fd, rep_fd).serve()


if __name__ == "__main__":
    import sys

    sys.exit(run_group(serve))  # type: ignore[arg-type]
