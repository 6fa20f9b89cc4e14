"""The prefill attention kernel timed alone (developer tool for PERF.md).

    python -m engine.tools.attnbench [--n 4096] [--heads 32] [--kv 8] [--hd 128] [--reps 20]

Times attn_prefill_<hd> over one causal prompt of n queries (random q, K and V already in the
cache) with the geometry of this process's SPARKBOARD_KERNEL_DEFINES, and prints microseconds
per launch and tensor-core TFLOP/s (the causal half of Q K^T and P V).
"""

from __future__ import annotations

import math

import click
import numpy as np


@click.command()
@click.option("--n", default=4096, help="queries (= keys) of the prompt")
@click.option("--heads", default=32, help="query heads")
@click.option("--kv", default=8, help="kv heads")
@click.option("--hd", default=128, help="head dim")
@click.option("--reps", default=20, help="timed launches")
def main(n: int, heads: int, kv: int, hd: int, reps: int) -> None:
    import cupy as cp

    from engine.cuda.geometry import GEOMETRY, NVRTC_OPTIONS
    from engine.cuda.kernels import source_text

    rng = np.random.default_rng(0)
    module = cp.RawModule(code=source_text("attention.cu"), options=NVRTC_OPTIONS)
    kernel = module.get_function(f"attn_prefill_{hd}")
    q = cp.asarray(rng.standard_normal((n, heads, hd), dtype=np.float32))
    kc = cp.asarray(rng.standard_normal((1, kv, n, hd)).astype(np.float16))
    vc = cp.asarray(rng.standard_normal((1, kv, n, hd)).astype(np.float16))
    out = cp.empty((n, heads * hd), dtype=cp.float16)
    grid, block, shared = GEOMETRY.prefill_attention(hd, n, heads)
    kernel.max_dynamic_shared_size_bytes = shared
    args = (
        q, kc, vc, out, np.int32(0), np.int32(0), np.int32(n), np.int32(heads), np.int32(kv),
        np.int32(n), np.float32(math.log2(math.e) / math.sqrt(hd)),
    )  # fmt: skip
    for _ in range(3):
        kernel(grid, block, args, shared_mem=shared)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(reps):
        kernel(grid, block, args, shared_mem=shared)
    b.record()
    b.synchronize()
    us = cp.cuda.get_elapsed_time(a, b) / reps * 1e3
    flop = 4.0 * heads * hd * n * (n + 1) / 2  # two products over the causal half
    defines = " ".join(f"{k}={v}" for k, v in sorted(GEOMETRY.defines.items())) or "defaults"
    print(
        f"attn_prefill_{hd} n={n} heads={heads}/{kv} ({defines}): {us:.1f} us, {flop / us / 1e6:.0f} TFLOP/s"
    )


if __name__ == "__main__":
    main()
