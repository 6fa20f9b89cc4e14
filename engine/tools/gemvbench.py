"""Mat-vec kernel variants timed alone on Llama shapes (developer tool for PERF.md).

    python -m engine.tools.gemvbench [--variants base,w8,GEMV_KSPLIT=4+GEMV_WARPS=8]
        [--shapes 8b|1b] [--types f16,q4_0]

A variant is a name of VARIANTS below or defines joined by "+"; naming one twice re-times it
(drift). Each variant compiles the mat-vec sources (kernels/gemv_*.cu) with its -D values;
each (type, shape, mode) runs as a CUDA graph of back-to-back launches over enough weight
copies that the L2 cache cannot hold them, and reports microseconds per launch and weight
bytes per second.
"""

from __future__ import annotations

import math

import click
import numpy as np

VARIANTS = {
    "base": {},
    "w8": {"GEMV_WARPS": 8},
    "w2": {"GEMV_WARPS": 2},
    "nr2": {"GEMV_NR1": 2, "GEMV_NR1_Q": 2},
    "nr1": {"GEMV_NR1": 1, "GEMV_NR1_Q": 1},
    "u16": {"GEMV_U": 16},
    "u4": {"GEMV_U": 4},
    "fma": {"GEMV_MMA": 0},  # float16 weights through the float loop instead of tensor cores
    # tensor-core mat-vec: cp.async ring slots per warp, warps per block, loads before the wait
    "s3": {"MMA_S": 3, "MMA_S_GLU": 3},
    "s6": {"MMA_S": 6, "MMA_S_GLU": 4},
    "mw8": {"MMA_WARPS": 8},
    "late": {"MMA_EARLY": 0},
    "k1": {"GEMV_KSPLIT": 1},  # one warp per row group of the dp4a/float loop (2 split K)
    "mmaq": {"GEMV_MMA_Q": 1},  # Q4_0 on the int8 tensor cores
}
# (label, rows, cols, mode) of one decode layer of Llama-3.1-8B and of Llama-3.2-1B
SHAPES = {
    "8b": [
        ("qkv", 6144, 4096, "store"),
        ("o", 4096, 4096, "add"),
        ("gate|up", 14336, 4096, "glu"),
        ("down", 4096, 14336, "add"),
    ],
    "1b": [
        ("qkv", 3072, 2048, "store"),
        ("o", 2048, 2048, "add"),
        ("gate|up", 8192, 2048, "glu"),
        ("down", 2048, 8192, "add"),
    ],
}
POOL_BYTES = 512 * 1024**2


def _defines(variant: str) -> dict[str, int]:
    """A named variant, or defines written NAME=VALUE+NAME=VALUE (SPARKBOARD_KERNEL_DEFINES's
    items), checked as the geometry checks them."""
    from engine.cuda.geometry import DEFINES_ENV, Geometry, kernel_defines

    try:
        if variant in VARIANTS:
            defines = VARIANTS[variant]
        else:
            defines = kernel_defines({DEFINES_ENV: variant.replace("+", " ")})
        Geometry(defines)
    except ValueError as exc:
        raise click.BadParameter(
            f"variant {variant!r}: a name of {sorted(VARIANTS)} or NAME=N+... ({exc})"
        ) from exc
    return defines


@click.command()
@click.option("--variants", default="base,w8,nr2,u16")
@click.option("--rows", "act_rows", default=1, help="activation rows (decode width)")
@click.option("--shapes", type=click.Choice(sorted(SHAPES)), default="8b", help="layer shapes")
@click.option("--types", "types", default="f16,q4_0", help="weight types (f16, q4_0)")
def main(variants: str, act_rows: int, shapes: str, types: str) -> None:
    from engine.cuda.geometry import WT_F16, WT_Q4_0, Geometry

    # every argument checked before the first compile (minutes on the device)
    wts = {"f16": WT_F16, "q4_0": WT_Q4_0}
    unknown = set(types.split(",")) - set(wts)
    if unknown:
        raise click.BadParameter(f"unknown types {sorted(unknown)}; choose from f16, q4_0")
    chosen = [(v, _defines(v)) for v in variants.split(",") if v]  # a repeat is a drift check

    import cupy as cp

    from engine.cuda.kernels import GEMV_SOURCES, source_text
    from engine.tools.planes import random_weight

    NULL = np.uint64(0)
    stream = cp.cuda.Stream(non_blocking=True)
    table = []
    for vname, defines in chosen:
        geo = Geometry(defines)
        mod = cp.RawModule(code=source_text(*GEMV_SOURCES), options=geo.nvrtc_options)
        for wt in [wts[t] for t in types.split(",")]:
            for label, rows, cols, mode in SHAPES[shapes]:
                name, grid, block = geo.launch(wt, rows, cols, act_rows, mode)
                fn = mod.get_function(name)
                shared = geo.shared_bytes(name)
                if shared:
                    fn.max_dynamic_shared_size_bytes = shared
                # random weights serve as the tensor-core orders (tiles.py) as they are
                if rows % 16:
                    raise ValueError(f"bench shapes need rows in multiples of 16, got {rows}")
                mats = 2 if mode == "glu" else 1
                bpw = 2.0 if wt == WT_F16 else 18 / 32
                nbytes = int(rows * cols * bpw * mats)
                copies = max(2, math.ceil(POOL_BYTES / nbytes))
                rs = cp.random.RandomState(0)
                ws = [random_weight(cp, rs, wt, rows * mats, cols) for _ in range(copies)]
                if wt == WT_F16:
                    x = cp.random.standard_normal((act_rows, cols), dtype=cp.float32)
                    xs = NULL
                else:
                    x = cp.random.randint(-127, 128, size=(act_rows, 2 * cols)).astype(cp.int8)
                    xs = cp.random.random((act_rows, cols // 32 * 4), dtype=cp.float32)
                out = cp.zeros((act_rows, rows), dtype=cp.float32)
                with stream:
                    stream.begin_capture()
                    for q, s in ws:
                        q2 = q[rows:] if mats == 2 else NULL
                        s2 = (s[rows:] if s is not None else NULL) if mats == 2 else NULL
                        fn(
                            grid,
                            block,
                            (
                                q[:rows], s[:rows] if s is not None else NULL, q2, s2, x, xs, out,
                                np.int32(rows), np.int32(cols), np.int32(act_rows), np.int32(rows),
                            ),
                            shared_mem=shared,
                        )  # fmt: skip
                    graph = stream.end_capture()
                graph.launch(stream)
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record(stream)
                reps = 5
                for _ in range(reps):
                    graph.launch(stream)
                b.record(stream)
                b.synchronize()
                us = cp.cuda.get_elapsed_time(a, b) * 1e3 / (reps * copies)
                tname = "f16" if wt == WT_F16 else "q4_0"
                table.append((vname, tname, label, us, nbytes / us / 1e3))
                del ws, graph
                cp.get_default_memory_pool().free_all_blocks()
    print(
        f"{'variant':8} {'type':5} {'matrix':8} {'us':>8} {'GB/s':>8}   (activation rows {act_rows})"
    )
    for v, t, lab, us, gbs in table:
        print(f"{v:8} {t:5} {lab:8} {us:8.1f} {gbs:8.0f}")


if __name__ == "__main__":
    main()
