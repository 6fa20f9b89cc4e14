"""The numerics variants of data/calibration/numerics.py: legitimate alternative implementations
of the engine's math, and small planted errors in it.

Every variant is built from the unmodified model weights and changes nothing in engine/: the
NumPy ones subclass `NumpyRunner` through its hooks (`_matmul` sees every matrix product,
`_rms_norm` every norm, `_rope` every rotation), the planted errors that are edits of the model
(a config number, a norm weight set to 1) work on any backend's runner.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.config import ModelConfig
from engine.numpy_backend import NumpyRunner, matmul_t
from engine.tools.emulation import Float16Emulation, to_f16
from engine.weights import ModelWeights, WeightTensor

Q8_BLOCK = 32  # llama.cpp's q8_0 block: 32 values share one float scale


# --- roundings of the activations ------------------------------------------------------------


def to_bf16(a: np.ndarray) -> np.ndarray:
    """`a` rounded to bfloat16 (nearest, ties to even) and back, as float32."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32).astype(a.dtype)


def to_q8_0(a: np.ndarray) -> np.ndarray:
    """`a` [n, k] quantized as llama.cpp quantizes activations for a quantized mat-vec: per
    block of 32 values, d = max|x| / 127, q = round(x / d) in int8; returns q * d."""
    n, k = a.shape
    if k % Q8_BLOCK:
        raise ValueError(f"q8_0 activations need a width that is a multiple of {Q8_BLOCK}")
    blocks = a.reshape(n, k // Q8_BLOCK, Q8_BLOCK)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / 127.0
    d = d.astype(np.float16).astype(a.dtype)  # llama.cpp stores the scale as float16
    q = np.round(np.divide(blocks, d, out=np.zeros_like(blocks), where=d > 0))
    return (np.clip(q, -127, 127) * d).reshape(n, k).astype(a.dtype)


class RoundedActivations(NumpyRunner):
    """Every matrix product's input rounded by `rounding` (float16, bfloat16, int8 blocks)."""

    def __init__(self, weights: ModelWeights, rounding: Callable[[np.ndarray], np.ndarray]):
        self.rounding = rounding
        super().__init__(weights)

    def _matmul(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return super()._matmul(self.rounding(x), w)


class SplitK(NumpyRunner):
    """x @ w.T as the sum of `parts` partial products over slices of K (split-K GEMM)."""

    def __init__(self, weights: ModelWeights, parts: int):
        self.parts = parts
        super().__init__(weights)

    def _matmul(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        bounds = np.linspace(0, x.shape[1], self.parts + 1).astype(int)
        out = matmul_t(x[:, bounds[0] : bounds[1]], w[:, bounds[0] : bounds[1]])
        for a, b in zip(bounds[1:-1], bounds[2:], strict=True):
            out = out + matmul_t(x[:, a:b], w[:, a:b])
        return out


# --- planted errors through the hooks ----------------------------------------------------------


class ScaledScores(NumpyRunner):
    """Attention scores scaled by `factor` on top of 1/sqrt(head_dim): q is scaled after RoPE
    (q . k * scale * f == (f q) . k * scale). q and k are told apart by their head count."""

    def __init__(self, weights: ModelWeights, factor: float):
        if weights.config.n_heads == weights.config.n_kv_heads:
            raise ValueError("ScaledScores tells q from k by head count; this model has MHA")
        self.factor = factor
        super().__init__(weights)

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        out = super()._rope(x, positions)
        if x.shape[1] == self.config.n_heads:
            out = out * self.dtype.type(self.factor)
        return out


class LastAttentionResidualDropped(NumpyRunner):
    """The last layer computes x = attn @ wo.T instead of x = x + attn @ wo.T: the residual
    stream entering its attention norm is subtracted from the attention output."""

    def _rms_norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        if w is self.layers[-1].attn_norm:
            self._residual = x
        return super()._rms_norm(x, w)

    def _matmul(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        out = super()._matmul(x, w)
        return out - self._residual if w is self.layers[-1].wo else out


class QKNormDropped(NumpyRunner):
    """A qk-norm model (qwen3) without its per-head RMSNorm of q and k."""

    def _rms_norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        if any(w is L.q_norm or w is L.k_norm for L in self.layers):
            return x
        return super()._rms_norm(x, w)


# --- planted errors as edits of the model (any backend) -----------------------------------------


def with_config(weights: ModelWeights, **scaled: float) -> ModelWeights:
    """The same weights with config numbers multiplied: with_config(w, norm_eps=100)."""
    c = weights.config
    update = {name: getattr(c, name) * f for name, f in scaled.items()}
    return dataclasses.replace(weights, config=c.model_copy(update=update))


def with_unit_norm(weights: ModelWeights, suffix: str) -> ModelWeights:
    """The same weights with every norm weight whose name ends in `suffix` set to 1.0."""
    tensors = dict(weights.tensors)
    for name, t in weights.tensors.items():
        if name.endswith(suffix):
            xp = importlib.import_module(type(t.data).__module__.split(".")[0])  # numpy or cupy
            ones = xp.ones(t.shape, dtype=xp.float32)
            tensors[name] = WeightTensor(name=name, ggml_type="F32", shape=t.shape, data=ones)
    return dataclasses.replace(weights, tensors=tensors)


# --- the catalogue ---------------------------------------------------------------------------


def _always(_: ModelConfig) -> bool:
    return True


@dataclass(frozen=True)
class Variant:
    name: str
    legit: bool  # a real alternative implementation (must pass) or a planted error (must fail)
    what: str
    # The runner, from the unmodified weights; None: the backend's own runner of plant(weights)
    numpy_runner: Callable[[ModelWeights], NumpyRunner] | None = None
    plant: Callable[[ModelWeights], ModelWeights] | None = None
    chunk: int | None = None  # prefill rows per call (None: the harness's SCORE_CHUNK)
    decode: bool = False  # teacher-forced through decode(), one token per step
    int8: bool = False  # int8 activations: llama.cpp's quantized path, far coarser than float
    applies: Callable[[ModelConfig], bool] = _always
    env: dict[str, str] = field(default_factory=dict)  # GPU only: the CUDA backend's knobs

    def runs_on(self, backend: str) -> bool:
        return self.numpy_runner is None if backend == "cupy" else not self.env


def _legit(name: str, what: str, runner: Callable | None = None, **kw: object) -> Variant:
    return Variant(name, True, what, runner, **kw)  # type: ignore[arg-type]


def _error(name: str, what: str, runner: Callable | None = None, **kw: object) -> Variant:
    return Variant(name, False, what, runner, **kw)  # type: ignore[arg-type]


def _rounded(rounding: Callable[[np.ndarray], np.ndarray]) -> Callable[[ModelWeights], NumpyRunner]:
    return lambda w: RoundedActivations(w, rounding)


NUMPY_VARIANTS: list[Variant] = [
    _legit("main-again", "A/A: a second, fresh main runner", NumpyRunner),
    _legit("float64", "float64 weights and accumulation", lambda w: NumpyRunner(w, np.float64)),
    _legit("split-k-2", "every matmul as the sum of 2 K-halves", lambda w: SplitK(w, 2)),
    _legit("split-k-4", "every matmul as the sum of 4 K-quarters", lambda w: SplitK(w, 4)),
    _legit("act-f16", "matmul inputs rounded to float16", _rounded(to_f16)),
    _legit("act-bf16", "matmul inputs rounded to bfloat16", _rounded(to_bf16)),
    _legit(
        "act-q8_0",
        "matmul inputs as int8 per 32-block (llama.cpp q8_0)",
        _rounded(to_q8_0),
        int8=True,
    ),
    _legit(
        "gpu-f16-emulation",
        "the CUDA backend's float16 roundings (GEMM inputs, weights, "
        "KV cache, prefill q: engine/tools/emulation.py)",
        Float16Emulation,
    ),
    _legit(
        "prefill-chunk-64", "prefill in chunks of 64 rows (score's: 256)", NumpyRunner, chunk=64
    ),
    _legit(
        "decode-path",
        "teacher-forced through decode(), one token per step",
        NumpyRunner,
        decode=True,
    ),
]

PLANTED: list[Variant] = [
    _error("eps-x100", "RMSNorm epsilon x100", plant=lambda w: with_config(w, norm_eps=100.0)),
    _error("eps-x10000", "RMSNorm epsilon x10000", plant=lambda w: with_config(w, norm_eps=1e4)),
    _error("rope-base-x1.05", "RoPE base x1.05", plant=lambda w: with_config(w, rope_base=1.05)),
    _error("rope-base-x0.5", "RoPE base x0.5", plant=lambda w: with_config(w, rope_base=0.5)),
    _error("attn-scale-x1.02", "attention scale 1/sqrt(d) x1.02", lambda w: ScaledScores(w, 1.02)),
    _error("attn-scale-x1.1", "attention scale 1/sqrt(d) x1.1", lambda w: ScaledScores(w, 1.1)),
    _error("last-attn-residual-dropped", "last layer: x = attn(x), its x + dropped",
           LastAttentionResidualDropped),
    _error("ffn-norm-weight-dropped", "every FFN norm's learned weight taken as 1.0",
           plant=lambda w: with_unit_norm(w, "ffn_norm.weight")),
    _error("output-norm-weight-dropped", "the output norm's learned weight taken as 1.0",
           plant=lambda w: with_unit_norm(w, "output_norm.weight")),
    _error("qk-norm-dropped", "qwen3's per-head q/k RMSNorm left out", QKNormDropped,
           applies=lambda c: c.qk_norm),
]  # fmt: skip

# The CUDA backend's own alternatives. Its knobs are read from the environment at import, so
# each variant runs in a process of its own; the decode-* ones change only what decode() does.
GPU_VARIANTS: list[Variant] = [
    _legit("main-again", "A/A: main's dump from another process"),
    _legit("prefill-chunk-64", "prefill in chunks of 64 rows", chunk=64),
    _legit("decode-path", "teacher-forced through decode()", decode=True),
    _legit("decode-attn-splits-8", "decode, flash-decoding over 8 partitions (default 32)",
           decode=True, env={"SPARKBOARD_ATTN_SPLITS": "8"}),
    _legit("decode-attn-min-chunk-128", "decode, partitions of at least 128 positions (32)",
           decode=True, env={"SPARKBOARD_ATTN_MIN_CHUNK": "128"}),
    _legit("decode-gemv-ksplit-4", "decode, mat-vecs split K over 4 warps (2)", decode=True,
           env={"SPARKBOARD_KERNEL_DEFINES": "GEMV_WARPS=8,GEMV_KSPLIT=4"}),
    _legit("decode-gemv-no-mma", "decode, float16 mat-vecs off the tensor cores", decode=True,
           env={"SPARKBOARD_KERNEL_DEFINES": "GEMV_MMA=0"}),
    _legit("decode-norm-apart", "decode, RMSNorm as a kernel of its own", decode=True,
           env={"SPARKBOARD_NORM_IN_MV": "0"}),
]  # fmt: skip


def variants_for(backend: str) -> list[Variant]:
    """Every variant that runs on `backend`, legitimate ones first."""
    legit = NUMPY_VARIANTS if backend == "numpy" else GPU_VARIANTS
    return [v for v in legit + PLANTED if v.runs_on(backend)]
