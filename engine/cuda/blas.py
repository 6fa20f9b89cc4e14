"""Prefill's cuBLAS GEMM, called through ctypes on the libcublas that CuPy loaded.

CuPy's cuBLAS wrappers refuse to run while a stream is capturing ("calling cuBLAS API during
stream capture is currently unsupported"), so a prefill captured as a CUDA graph calls cuBLAS
itself: its own handle, bound once to the runner's stream and to a workspace of ours (a captured
GEMM then writes that buffer, not an allocation cuBLAS would make inside each graph).
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

import cupy as cp

CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUDA_R_16F, CUDA_R_32F = 2, 0
CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT = 68, -1
WORKSPACE_BYTES = 32 << 20  # cuBLAS's own default on Hopper


def _libcublas() -> ctypes.CDLL:
    """The libcublas this process has loaded (CuPy's), found in /proc/self/maps."""
    cp.cuda.device.get_cublas_handle()  # CuPy loads the library with its first handle
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/libcublas.so" in line}
    if len(paths) != 1:
        raise RuntimeError(f"expected one libcublas loaded by CuPy, found {sorted(paths)}")
    return ctypes.CDLL(paths.pop())


class Blas:
    """A cuBLAS handle on one stream, with out = x16 @ W^T + beta * out as its one operation."""

    def __init__(self, stream: Any) -> None:
        lib = _libcublas()
        self.workspace = cp.empty(WORKSPACE_BYTES, dtype=cp.uint8)
        self.handle = ctypes.c_void_p()
        self._check(lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        weakref.finalize(self, lib.cublasDestroy_v2, self.handle)
        self._check(lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream.ptr)), "setStream")
        # after setStream, which binds the handle to cuBLAS's default workspace again
        ws = ctypes.c_void_p(self.workspace.data.ptr)
        self._check(
            lib.cublasSetWorkspace_v2(self.handle, ws, ctypes.c_size_t(WORKSPACE_BYTES)),
            "setWorkspace",
        )
        self._gemm = lib.cublasGemmEx
        self._gemm.restype = ctypes.c_int
        p, i = ctypes.c_void_p, ctypes.c_int
        self._gemm.argtypes = [p, i, i, i, i, i, p, p, i, i, p, i, i, p, p, i, i, i, i]
        # alpha and beta for pointer mode host: kept alive here, passed by address
        self._scalars = [ctypes.c_float(v) for v in (0.0, 1.0)]
        self._address = {float(c.value): ctypes.addressof(c) for c in self._scalars}

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"cuBLAS {what} failed with status {status}")

    def gemm_f16(self, w_ptr: int, n: int, x16: Any, out_ptr: int, ldc: int, beta: float) -> None:
        """out[M, :n] (float32, row stride ldc, at out_ptr) = x16[M, K] @ W[n, K]^T + beta * out,
        W float16 row-major at w_ptr, float32 accumulation."""
        m, k = x16.shape
        one, b = self._address[1.0], self._address[float(beta)]
        self._check(
            self._gemm(
                self.handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k,
                one, w_ptr, CUDA_R_16F, k,
                x16.data.ptr, CUDA_R_16F, k,
                b, out_ptr, CUDA_R_32F, ldc,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
            ),
            "GemmEx",
        )  # fmt: skip
