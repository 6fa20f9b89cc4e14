"""Compile the CUDA C sources in kernels/ with NVRTC (through cupy.RawModule) and hand out
their functions.

Each .cu file is compiled once per process, with kernels/common.cuh prepended, for the arch
of the current device (CuPy picks it; sm_90 on an H200). CuPy keeps the compiled binaries in
its on-disk kernel cache, so a second process skips NVRTC. Functions are looked up once and
kept, so nothing is loaded while a CUDA graph is being captured.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import cupy as cp

KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernels"
SOURCES = ("gemv.cu", "layers.cu", "attention.cu")
NVRTC_OPTIONS = ("--std=c++17",)

# Weight storage types: the WT_* numbers in kernels/common.cuh.
WT_F32, WT_F16, WT_Q8_0, WT_Q4_0, WT_Q4_1 = 0, 1, 2, 3, 4
WT_NAMES = {WT_F32: "f32", WT_F16: "f16", WT_Q8_0: "q8_0", WT_Q4_0: "q4_0", WT_Q4_1: "q4_1"}
GEMV_ROW_BLOCKS = (1, 2, 4, 8)  # activation rows one mat-vec launch reads each weight for
GEMV_MODES = ("store", "add", "glu")
GEMV_WARPS = 4  # output rows per block (GEMV_WARPS in gemv.cu)
HEAD_DIMS = (16, 32, 64, 128)  # attention instantiations
MAX_GROUP = 8  # query heads per KV head (GMAX in attention.cu)


def source_text(name: str) -> str:
    common = (KERNEL_DIR / "common.cuh").read_text()
    return common + "\n" + (KERNEL_DIR / name).read_text()


def gemv_rows_per_warp(row_block: int, wt: int) -> int:
    """Output rows one warp computes (GEMV_NR in gemv.cu)."""
    if row_block >= 4:
        return 4
    if row_block == 2:
        return 2
    return 2 if wt >= WT_Q8_0 else 1


def gemv_grid(n_out: int, rows: int, wt: int) -> tuple[tuple[int, int], int]:
    """(grid, row block) of a mat-vec launch over n_out outputs for `rows` activation rows."""
    rb = 1 if rows <= 1 else 2 if rows <= 2 else 4 if rows <= 4 else 8
    per_block = GEMV_WARPS * gemv_rows_per_warp(rb, wt)
    return ((n_out + per_block - 1) // per_block, (rows + rb - 1) // rb), rb


def gemv_name(wt: int, rows: int, mode: str) -> str:
    return f"gemv_{WT_NAMES[wt]}_r{rows}_{mode}"


def all_kernel_names() -> list[str]:
    names = [gemv_name(wt, rb, m) for wt in WT_NAMES for rb in GEMV_ROW_BLOCKS for m in GEMV_MODES]
    names += ["quantize_q8", "rmsnorm", "embed", "dequant_f16", "swiglu_f16", "rope_kv"]
    names += ["argmax_advance", "advance_lens", "attn_combine"]
    names += [f"attn_split_{hd}" for hd in HEAD_DIMS] + [f"attn_prefill_{hd}" for hd in HEAD_DIMS]
    return names


class Kernels:
    """Every kernel function of kernels/, compiled and loaded."""

    def __init__(self) -> None:
        self.modules = [
            cp.RawModule(code=source_text(name), options=NVRTC_OPTIONS) for name in SOURCES
        ]
        self._functions: dict[str, cp.RawKernel] = {}
        for name in all_kernel_names():
            self._functions[name] = self._find(name)

    def _find(self, name: str) -> cp.RawKernel:
        for module in self.modules:
            try:
                return module.get_function(name)
            except cp.cuda.driver.CUDADriverError:  # not in this module: try the next one
                continue
        raise KeyError(f"no kernel named {name} in {', '.join(SOURCES)}")

    def __getitem__(self, name: str) -> cp.RawKernel:
        return self._functions[name]


@lru_cache(maxsize=1)
def get_kernels() -> Kernels:
    """The process-wide compiled kernels (first call compiles: ~seconds)."""
    return Kernels()
