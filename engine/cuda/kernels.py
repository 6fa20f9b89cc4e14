"""Compile the CUDA C sources in kernels/ with NVRTC (through cupy.RawModule) and hand out
their functions.

Each .cu file is compiled once per process, with kernels/common.cuh prepended, for the arch
of the current device (CuPy picks it; sm_90 on an H200). CuPy keeps the compiled binaries in
its on-disk kernel cache, so a second process skips NVRTC. Functions are looked up once and
kept, so nothing is loaded while a CUDA graph is being captured.

The tuning macros (SPARKBOARD_KERNEL_DEFINES) and the launch geometry that follows from them
are in geometry.py, which needs no CuPy.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import cupy as cp

from engine.cuda.geometry import (
    ATT_GMAX,
    GEMV_MODES,
    GEMV_ROW_BLOCKS,
    MMA_NAMES,
    NORM_MODES,
    NVRTC_OPTIONS,
    QUANTIZED,
    QX_ROW_BLOCKS,
    WT_NAMES,
    attn_shared_bytes,
    env_carveout,
    gemv_name,
    gemv_shared_bytes,
    prefill_shared_bytes,
)

KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernels"
SOURCES = ("gemv_simt.cu", "gemv_mma.cu", "quantize_q8.cu", "layers.cu", "attention.cu")
GEMV_SOURCES = SOURCES[:3]  # the mat-vec kernels and their input quantizer (gemvbench)
HEAD_DIMS = (16, 32, 64, 128)  # attention instantiations
MAX_GROUP = ATT_GMAX  # query heads per KV head (GMAX in attention.cu)


def source_text(*names: str) -> str:
    """common.cuh, then the named .cu files: one compilation unit."""
    parts = [(KERNEL_DIR / name).read_text() for name in ("common.cuh", *names)]
    return "\n".join(parts)


def all_kernel_names() -> list[str]:
    names = [gemv_name(wt, rb, m) for wt in WT_NAMES for rb in GEMV_ROW_BLOCKS for m in GEMV_MODES]
    names += [
        gemv_name(wt, rb, m) + "_norm"
        for wt in QUANTIZED
        for rb in GEMV_ROW_BLOCKS
        for m in NORM_MODES
    ]
    names += [  # float input, quantized in the lanes
        gemv_name(wt, rb, m) + sfx
        for wt in QUANTIZED
        for rb in QX_ROW_BLOCKS
        for m, sfx in [(m, "_qx") for m in GEMV_MODES] + [(m, "_norm_qx") for m in NORM_MODES]
    ]
    names += list(MMA_NAMES)
    names += [
        "quantize_q8",
        "rmsnorm",
        "rmsnorm_f16",
        "embed",
        "dequant_f16",
        "swiglu_f16",
        "rope_kv",
    ]
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
        carveout = env_carveout()
        for name in all_kernel_names():
            fn = self._find(name)
            if name.startswith("attn_split_"):
                shared = attn_shared_bytes(int(name.rsplit("_", 1)[1]))
            elif name.startswith("attn_prefill_"):
                shared = prefill_shared_bytes(int(name.rsplit("_", 1)[1]))
            else:
                shared = gemv_shared_bytes(name)
            if shared:  # above 48 KB a kernel must ask for its dynamic shared memory
                fn.max_dynamic_shared_size_bytes = shared
            if carveout is not None:
                fn.preferred_shared_memory_carveout = carveout
            self._functions[name] = fn

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
