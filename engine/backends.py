"""Which array backend runs a model: "numpy" (CPU) or "cupy" (NVIDIA GPU).

resolve_backend("auto") picks cupy only when `import cupy` works and a CUDA device answers;
asking for "cupy" explicitly without one is an EngineError (never a silent CPU fallback, so
a GPU measurement cannot quietly become a CPU one).
"""

from __future__ import annotations

from functools import lru_cache

from engine.errors import EngineError

BACKENDS = ("auto", "numpy", "cupy")


@lru_cache(maxsize=1)
def gpu_problem() -> str | None:
    """None when CuPy can use a GPU here, else a short reason why not."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising anything
        return f"CuPy is not importable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
        if n < 1:
            return "no CUDA device is visible"
        cupy.zeros(1).sum().item()  # a device that enumerates but cannot run is unusable
    except Exception as exc:
        return f"no usable CUDA device ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return None


def resolve_backend(backend: str = "auto") -> str:
    """ "numpy" or "cupy" for a requested "auto" | "numpy" | "cupy"."""
    if backend not in BACKENDS:
        raise EngineError(f"unknown backend {backend!r} (choose one of: {', '.join(BACKENDS)})")
    if backend == "numpy":
        return "numpy"
    problem = gpu_problem()
    if backend == "cupy":
        if problem:
            raise EngineError(f"backend cupy is not available: {problem}")
        return "cupy"
    return "numpy" if problem else "cupy"


def array_module(backend: str):  # noqa: ANN201 - numpy or cupy module
    """The array module of a resolved backend."""
    if backend == "cupy":
        import cupy

        return cupy
    import numpy

    return numpy
