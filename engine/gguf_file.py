"""Reading a GGUF file with the `gguf` package: metadata -> ModelConfig, tensors -> ModelWeights.

Tensors stay NumPy memmaps of the file (nothing is copied until a backend asks). Anything
this engine cannot run -- an architecture other than llama/qwen3, a tensor type other than
F32/F16/BF16/Q8_0/Q4_0/Q4_1, a missing or misshapen tensor, a damaged file -- is refused with
an EngineError that names the file (and the tensor and its type where one is at fault).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import ModelConfig
from engine.errors import EngineError
from engine.quants import BLOCK_SIZES, SUPPORTED_TYPES
from engine.weights import ModelWeights, WeightTensor, expected_tensors

SUPPORTED_ARCHS = ("llama", "qwen3")


@dataclass
class GGUFFile:
    """An opened GGUF: its path, metadata and tensors (memmaps)."""

    path: Path
    reader: Any  # gguf.GGUFReader

    def field(self, key: str, default: Any = None) -> Any:
        f = self.reader.fields.get(key)
        if f is None:
            return default
        try:
            return f.contents()
        except Exception as exc:  # a damaged field
            raise EngineError(f"{self.path}: cannot read metadata {key}: {exc}") from None

    def require(self, key: str) -> Any:
        value = self.field(key)
        if value is None:
            raise EngineError(f"{self.path}: metadata {key} is missing")
        return value

    @property
    def arch(self) -> str:
        return str(self.require("general.architecture"))


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Open a GGUF file; a missing, unreadable, truncated or non-GGUF file is an EngineError.

    Opened files are cached per process (the gguf reader takes seconds on a large vocabulary).
    """
    p = Path(path)
    if not p.exists():
        raise EngineError(f"model file not found: {p}")
    st = p.stat()
    return _open_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)


def _fast_reader_class() -> type:
    import gguf

    class FastReader(gguf.GGUFReader):
        """GGUFReader slicing a plain ndarray view of its memmap: the same bytes (still
        file-backed), without np.memmap's per-slice overhead, which made opening a
        49k-token vocabulary take seconds."""

        def _get(self, offset, dtype, count=1, override_order=None):  # noqa: ANN001, ANN202
            if type(self.data) is not np.ndarray:
                self.data = self.data.view(np.ndarray)
            return super()._get(offset, dtype, count, override_order)

    return FastReader


def _make_reader(path: Path, mode: str):  # noqa: ANN202
    try:
        cls = _fast_reader_class()
        return cls(path, mode)
    except TypeError:  # a gguf release whose private _get changed shape: use it as it is
        import gguf

        return gguf.GGUFReader(path, mode)


@lru_cache(maxsize=4)
def _open_cached(path: str, size: int, mtime_ns: int) -> GGUFFile:
    p = Path(path)
    if not p.exists():
        raise EngineError(f"model file not found: {p}")
    if not p.is_file():
        raise EngineError(f"model path is not a file: {p}")
    try:
        with p.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise EngineError(f"cannot read {p}: {exc.strerror or exc}") from None
    if magic != b"GGUF":
        raise EngineError(f"not a GGUF file (bad magic {magic!r}): {p}")
    try:
        reader = _make_reader(p, "r")
    except Exception as exc:  # the gguf package raises many kinds on damaged files
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EngineError(f"damaged or truncated GGUF file {p}: {reason}") from None
    return GGUFFile(path=p, reader=reader)


def read_config(f: GGUFFile) -> ModelConfig:
    """The model hyper-parameters from the GGUF metadata."""
    arch = f.arch
    if arch not in SUPPORTED_ARCHS:
        raise EngineError(
            f"{f.path}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHS)})"
        )
    names = {t.name for t in f.reader.tensors}
    dim = int(f.require(f"{arch}.embedding_length"))
    n_heads = int(f.require(f"{arch}.attention.head_count"))
    head_dim = int(f.field(f"{arch}.attention.key_length", dim // n_heads))
    rope_dims = int(f.field(f"{arch}.rope.dimension_count", head_dim))
    if rope_dims != head_dim:
        raise EngineError(
            f"{f.path}: partial rotary embeddings ({rope_dims} of {head_dim}) are not supported"
        )
    tokens = f.reader.fields.get("tokenizer.ggml.tokens")
    vocab = f.field(f"{arch}.vocab_size")
    if vocab is None:
        vocab = len(tokens.data) if tokens is not None else None
    if vocab is None:
        embd = next((t for t in f.reader.tensors if t.name == "token_embd.weight"), None)
        if embd is None:
            raise EngineError(f"{f.path}: tensor token_embd.weight is missing")
        vocab = int(embd.shape[1])
    try:
        return ModelConfig(
            arch=arch,
            n_layers=int(f.require(f"{arch}.block_count")),
            dim=dim,
            ffn_dim=int(f.require(f"{arch}.feed_forward_length")),
            n_heads=n_heads,
            n_kv_heads=int(f.field(f"{arch}.attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            vocab_size=int(vocab),
            max_context=int(f.require(f"{arch}.context_length")),
            rope_base=float(f.field(f"{arch}.rope.freq_base", 10000.0)),
            norm_eps=float(f.field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
            tied_embeddings="output.weight" not in names,
            qk_norm=arch == "qwen3",
        )
    except (ValueError, TypeError) as exc:
        raise EngineError(f"{f.path}: bad model metadata: {str(exc).splitlines()[0]}") from None


def _as_weight_tensor(f: GGUFFile, t: Any) -> WeightTensor:
    type_name = t.tensor_type.name
    if type_name not in SUPPORTED_TYPES:
        raise EngineError(
            f"tensor {t.name} has type {type_name}, which this engine does not support "
            f"(supported: {', '.join(SUPPORTED_TYPES)}) in {f.path}"
        )
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # GGUF lists dims fastest-first
    data = t.data
    if type_name == "BF16":
        data = data.view(np.uint16).reshape(shape)
    elif type_name in ("F32", "F16"):
        data = data.reshape(shape)
    else:
        block, nbytes = BLOCK_SIZES[type_name]
        rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        data = data.reshape(rows, shape[-1] // block * nbytes)
    return WeightTensor(name=t.name, ggml_type=type_name, shape=shape, data=data)


def load_gguf_weights(path: str | os.PathLike[str]) -> ModelWeights:
    """A GGUF file's config and tensors, checked against what the architecture needs."""
    f = open_gguf(path)
    config = read_config(f)
    tensors = {t.name: _as_weight_tensor(f, t) for t in f.reader.tensors}
    if "rope_freqs.weight" in tensors:  # Llama-3.1 style rope scaling
        raise EngineError(f"{f.path}: rope frequency factors (rope_freqs.weight) are not supported")
    for name, shape in expected_tensors(config).items():
        if name not in tensors:
            raise EngineError(f"{f.path}: tensor {name} is missing")
        if tensors[name].shape != shape:
            raise EngineError(
                f"{f.path}: tensor {name} has shape {tensors[name].shape}, expected {shape}"
            )
    return ModelWeights(config=config, model_id=file_id(f.path), tensors=tensors)


@lru_cache(maxsize=8)
def _sha256_prefix(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def file_id(path: str | os.PathLike[str]) -> str:
    """`sha256:<first 16 hex digits>` of the file's bytes (what the protocol calls model_id)."""
    st = os.stat(path)
    return "sha256:" + _sha256_prefix(str(path), st.st_size, st.st_mtime_ns)
