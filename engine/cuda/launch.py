"""Kernel launches with programmatic dependent launch (PDL), through cuLaunchKernelEx.

CuPy's RawKernel launch takes no launch attributes, so this calls the driver directly (ctypes
on libcuda) with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the next kernel of
the decode step may be scheduled while the previous one drains, and waits inside
(griddepcontrol.wait, kernels/common.cuh) until its inputs are complete. Captured into the
decode graph, this hides most of the gap between consecutive kernels.

`PdlLauncher.available()` is False where the driver lacks cuLaunchKernelEx or the probe
launch fails, or when SPARKBOARD_PDL=0; the runner then launches through CuPy.

`KernelLauncher` is how the runner's parts launch a kernel by name: PDL inside the decode
step only, the kernel skips and per-kernel timings of engine/cuda/profiling.py.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

import cupy as cp
import numpy as np

CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
NULL = np.uint64(0)  # a null pointer argument


def i32(v: int) -> np.int32:
    return np.int32(v)


def f32(v: float) -> np.float32:
    return np.float32(v)


class _AttrValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("value", ctypes.c_int)]


class _Attr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttrValue)]


class _Config(ctypes.Structure):
    _fields_ = [
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_Attr)),
        ("numAttrs", ctypes.c_uint),
    ]


def _c_arg(a: Any) -> ctypes._SimpleCData:
    if isinstance(a, cp.ndarray):
        return ctypes.c_uint64(a.data.ptr)
    if isinstance(a, np.int32):
        return ctypes.c_int32(int(a))
    if isinstance(a, np.float32):
        return ctypes.c_float(float(a))
    if isinstance(a, np.uint64):
        return ctypes.c_uint64(int(a))
    raise TypeError(f"kernel argument of type {type(a).__name__} (use numpy scalars)")


def _function_ptr(kernel: Any) -> int:
    """The CUfunction of a cupy.RawKernel."""
    fn = getattr(kernel, "kernel", None)
    ptr = getattr(fn, "ptr", None)
    if not ptr:
        raise RuntimeError("this CuPy does not expose the kernel's CUfunction")
    return int(ptr)


class PdlLauncher:
    def __init__(self) -> None:
        self._fn = None
        if os.environ.get("SPARKBOARD_PDL", "1") == "0":
            return
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib.cuLaunchKernelEx
        except (OSError, AttributeError):
            return
        fn.restype = ctypes.c_int
        fn.argtypes = [
            ctypes.POINTER(_Config),
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p,
        ]
        self._fn = fn
        self._attr = _Attr()
        self._attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        self._attr.value.value = 1

    def available(self) -> bool:
        return self._fn is not None

    def disable(self) -> None:
        self._fn = None

    def launch(
        self, kernel: Any, grid: tuple, block: tuple, args: tuple, stream: Any, shared: int = 0
    ) -> None:
        g = tuple(grid) + (1,) * (3 - len(grid))
        b = tuple(block) + (1,) * (3 - len(block))
        cfg = _Config(
            g[0], g[1], g[2], b[0], b[1], b[2], shared, stream.ptr, ctypes.pointer(self._attr), 1
        )
        values = [_c_arg(a) for a in args]
        params = (ctypes.c_void_p * len(values))(
            *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values]
        )
        status = self._fn(ctypes.byref(cfg), _function_ptr(kernel), params, None)
        if status != 0:
            raise RuntimeError(f"cuLaunchKernelEx failed with CUresult {status}")


class KernelLauncher:
    """Launches the compiled kernels by name on one stream.

    in_step: set while the decode step's kernels are issued; PDL only there, where every
    successor kernel is ours and waits (griddepcontrol.wait); prefill interleaves cuBLAS
    kernels, which may not. skip and trace are profiling.py's: kernel-name prefixes left out
    (timing ablations), and (name, start, end) events per launch when not None.
    """

    def __init__(self, kernels: Any, stream: Any) -> None:
        self.kernels = kernels
        self.stream = stream
        self.pdl = PdlLauncher()
        self.in_step = False
        self.skip: tuple[str, ...] = ()
        self.trace: list | None = None
        if self.pdl.available():
            try:  # probe: a no-op launch through the driver
                z = cp.zeros(1, dtype=cp.int32)
                self.pdl.launch(kernels["advance_lens"], (1,), (32,), (z, z, i32(0)), stream)
                stream.synchronize()
            except Exception as exc:
                print(
                    f"warning: programmatic dependent launch unavailable ({exc})", file=sys.stderr
                )
                self.pdl.disable()

    def __call__(self, name: str, grid: tuple, block: tuple, args: tuple, shared: int = 0) -> None:
        """Launch one kernel on the stream (`shared`: dynamic shared memory bytes); timed per
        kernel when tracing."""
        fn = self.kernels[name]
        if self.skip and name.startswith(self.skip):
            return
        if self.trace is None:
            if self.in_step and self.pdl.available():
                self.pdl.launch(fn, grid, block, args, self.stream, shared)
            else:
                fn(grid, block, args, shared_mem=shared)
            return
        self._traced(name, lambda: fn(grid, block, args, shared_mem=shared))

    def library_call(self, name: str, fn: Any, *args: Any) -> None:
        """A library's launch on the stream (a cuBLAS GEMM), timed like a kernel when tracing."""
        if self.trace is None:
            fn(*args)
        else:
            self._traced(name, lambda: fn(*args))

    def _traced(self, name: str, issue: Any) -> None:
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(self.stream)
        issue()
        b.record(self.stream)
        self.trace.append((name, a, b))
