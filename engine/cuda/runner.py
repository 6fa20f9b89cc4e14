"""CupyRunner: the engine's GPU backend (kernels in kernels/, launched through CuPy).

The runner wires its parts: weights_gpu.py puts the model on the GPU, kv_cache.py holds the
cache, decode.py is the decode step and its CUDA graphs (decode_greedy replays it `steps`
times with the argmax fed back on the device and copies the tokens back once at the end),
prefill.py the chunked prefill (a short chunk replayed as a CUDA graph too), launch.py launches
the kernels (kernels.py compiles them) and profiling.py times the step's kernels. The sequence
bookkeeping is engine.runner.Runner's.
"""

from __future__ import annotations

from collections.abc import Sequence

import cupy as cp
import numpy as np

from engine.config import ModelConfig
from engine.cuda.decode import DecodeStep
from engine.cuda.kernels import HEAD_DIMS, MAX_GROUP, get_kernels
from engine.cuda.kv_cache import KvCache, kv_bytes_per_token
from engine.cuda.launch import KernelLauncher
from engine.cuda.prefill import PREFILL_CHUNK, Prefill
from engine.cuda.weights_gpu import decode_read_bytes, load_model, weight_bytes
from engine.errors import EngineError
from engine.runner import Runner, VramReport
from engine.weights import ModelWeights

DEFAULT_MAX_LEN = 4096


class CupyRunner(Runner):
    backend = "cupy"

    def __init__(self, weights: ModelWeights, prefill_chunk: int = PREFILL_CHUNK) -> None:
        c: ModelConfig = weights.config
        self.config = c
        self.model_id = weights.model_id
        if c.head_dim not in HEAD_DIMS:
            raise EngineError(f"head dim {c.head_dim} is not supported (kernels: {HEAD_DIMS})")
        if c.n_heads % c.n_kv_heads or c.group_size > MAX_GROUP:
            raise EngineError(f"{c.n_heads} query heads over {c.n_kv_heads} KV heads unsupported")
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.launcher = KernelLauncher(get_kernels(), self.stream)
        # The loader made the weights on the default stream, and ours does not wait for it:
        # finish that work before reading them here.
        cp.cuda.Device().synchronize()
        with self.stream:
            self.model = load_model(weights)
        self.stream.synchronize()
        cp.get_default_memory_pool().free_all_blocks()
        free, self._total = cp.cuda.runtime.memGetInfo()
        # measured at the first reset(): by then the caller has dropped the loader's arrays,
        # which q|k|v and gate|up fusion copied
        self._free_after_load: int | None = None
        self._peak = 0
        self.weight_bytes = weight_bytes(self.model, c)
        self.prefiller = Prefill(c, self.model, self.launcher, prefill_chunk)
        self.cache: KvCache | None = None
        self.step: DecodeStep | None = None

    @property
    def prefill_chunk(self) -> int:
        return self.prefiller.chunk

    def decode_read_bytes(self) -> int:
        """Weight bytes one decode step reads (all layers, the output head, one embedding row)."""
        return decode_read_bytes(self.model, self.config)

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.config)

    # ---- KV cache and the decode step's buffers ---------------------------------------------

    def reset(self, n_seqs: int, max_len: int) -> None:
        self._check_shape(n_seqs, max_len)
        self.stream.synchronize()
        if self.step is not None and (n_seqs, max_len) == (self.n_seqs, self.max_len):
            # same shape: keep the cache buffers and the captured graphs, forget the tokens
            with self.stream:
                self.cache.lens.fill(0)
            self.stream.synchronize()
            self._lens[:] = 0
            return
        self.step = self.cache = None
        self.prefiller.forget_graphs()  # they write the cache and read the step's buffers
        cp.get_default_memory_pool().free_all_blocks()
        if self._free_after_load is None:
            self._note_load()
        with self.stream:
            self.cache = KvCache.allocate(self.config, n_seqs, max_len)
            self.step = DecodeStep(self.config, self.model, self.cache, self.launcher)
        self.stream.synchronize()
        self._lens = np.zeros(n_seqs, dtype=np.int64)
        self.n_seqs, self.max_len = n_seqs, max_len
        self.step.capture_all(n_seqs)  # the usual step shape, now: no timed decode pays it
        self._sample_memory()

    def _ensure_ready(self) -> None:
        if self.step is None:
            self.reset(1, min(self.config.max_context, DEFAULT_MAX_LEN))

    def ready_step(self) -> DecodeStep:
        """The decode step (the default cache made if reset() has not run)."""
        self._ensure_ready()
        return self.step

    def _store_len(self, seq: int, length: int) -> None:
        with self.stream:
            self.cache.lens[seq] = length

    # ---- decode and prefill -----------------------------------------------------------------

    def decode(self, seqs: Sequence[int], tokens: np.ndarray) -> np.ndarray:
        seqs, ids = self._check_rows(seqs, tokens, 1)
        n = len(seqs)
        self.step.set_rows(seqs, ids)
        self.step.run(n, longest=max(int(self._lens[s]) for s in seqs) + 1)
        with self.stream:
            out = self.step.buf["logits"][:n].get(stream=self.stream)
        self.stream.synchronize()
        for s in seqs:
            self._lens[s] += 1
        self._sample_memory()
        return out

    def decode_greedy(self, seqs: Sequence[int], tokens: np.ndarray, steps: int) -> np.ndarray:
        if steps < 0:
            raise EngineError(f"cannot decode a negative number of steps ({steps})")
        seqs, ids = self._check_rows(seqs, tokens, steps)
        n = len(seqs)
        if steps == 0:
            return np.empty((0, n), dtype=np.int64)
        start = [int(self._lens[s]) for s in seqs]
        self.step.set_rows(seqs, ids)
        for i in range(steps):
            self.step.run(n, longest=max(start) + i + 1)
        with self.stream:
            hist = self.step.buf["hist"][:n].get(stream=self.stream)
        self.stream.synchronize()
        out = np.empty((steps, n), dtype=np.int64)
        for r, s in enumerate(seqs):
            out[:, r] = hist[r, start[r] : start[r] + steps]
            self._lens[s] += steps
        self._sample_memory()
        return out

    def prefill(self, seq: int, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray:
        self._ensure_ready()
        self._check_seq(seq)
        ids = self._check_tokens(tokens)
        if ids.size == 0:
            raise EngineError("cannot prefill an empty prompt")
        self._check_room(seq, ids.size)
        p0 = int(self._lens[seq])
        C = self.prefiller.chunk
        outs = []
        with self.stream:
            for a in range(0, ids.size, C):
                chunk = ids[a : a + C]
                last = a + C >= ids.size
                mode = "all" if all_logits else ("last" if last else "none")
                got = self.prefiller.run_chunk(
                    self.cache, self.step.buf["seq_ids"], seq, p0 + a, chunk, mode
                )
                if got is not None:
                    outs.append(got.get(stream=self.stream))
                self._sample_memory()
            self.cache.lens[seq] = p0 + ids.size
        self.stream.synchronize()
        self._lens[seq] = p0 + ids.size
        self._sample_memory()
        return np.concatenate(outs) if all_logits else outs[-1][0]

    # ---- reporting ------------------------------------------------------------------------------

    def synchronize(self) -> None:
        self.stream.synchronize()

    def _note_load(self) -> None:
        free, total = cp.cuda.runtime.memGetInfo()
        self._free_after_load = int(free)
        self._peak = max(self._peak, int(total - free))

    def _sample_memory(self) -> None:
        free, total = cp.cuda.runtime.memGetInfo()
        self._peak = max(self._peak, int(total - free))

    def vram(self, kv_tokens: int = 0) -> VramReport | None:
        if self._free_after_load is None:
            cp.get_default_memory_pool().free_all_blocks()
            self._note_load()
        self._sample_memory()
        return VramReport(
            total_bytes=int(self._total),
            free_after_load_bytes=int(self._free_after_load or 0),
            peak_bytes=self._peak,
            kv_cache_bytes=int(kv_tokens) * self.kv_bytes_per_token,
        )
