"""What a persistent decode kernel could save on a launch-bound model (developer tool for
PERF.md).

    python -m engine.tools.phasebench [--layers 30] [--type q4_1] [--reps 20] [--rounds 5]

SmolLM2-135M's decode step is ~150 short kernels (~3 us each at 2,200 tok/s). This times the
step's mat-vec phases, four a layer (q|k|v, o, gate|up, down; one activation row, the `_qx`
kernels' body, the attention left out), two ways over the same weights and buffers
(phasebench.cu): as PDL launches in one CUDA graph, as the decode step issues them, and as one
persistent kernel whose blocks walk every phase with a grid barrier between phases. Before
timing, both run once from the same input and must leave the same bits. Then the same number
of boundaries with no work (an empty PDL kernel each; a persistent kernel of barriers only).
Rounds alternate the graphs' order; the table gives the median of each over rounds, in us per
step and per phase boundary. The kernels honour SPARKBOARD_KERNEL_DEFINES (with GEMV_KSPLIT 1
only the launches are timed: the persistent kernel needs split K).
"""

from __future__ import annotations

import ctypes
import os
import statistics
from pathlib import Path

import click
import numpy as np

# SmolLM2-135M: hidden 576, q|k|v 576 + 2 x 192 (9 query heads, 3 KV heads of 64), FFN 1,536
DIMS = {"D": 576, "QKV": 960, "F": 1536}
# (output rows, columns, mode, norm) of a layer's phases 0..3, as phasebench.cu runs them
PHASES = [
    (DIMS["QKV"], DIMS["D"], "store", True),
    (DIMS["D"], DIMS["D"], "add", False),
    (DIMS["F"], DIMS["D"], "glu", True),
    (DIMS["D"], DIMS["F"], "add", False),
]
TYPES = ("q4_0", "q4_1", "q8_0")  # names of engine/cuda/geometry.py's WT_NAMES with `_qx` kernels
PROBE_SOURCE = Path(__file__).with_name("phasebench.cu")
EPS = 1e-5


def _blocks_per_sm(fn, threads: int) -> int:
    """The driver's count of co-resident blocks of fn an SM (a persistent grid may not exceed
    it times the SMs, or its barriers never fill)."""
    from engine.cuda.launch import _function_ptr

    lib = ctypes.CDLL("libcuda.so.1")
    n = ctypes.c_int()
    status = lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(n), ctypes.c_void_p(_function_ptr(fn)), threads, ctypes.c_size_t(0)
    )
    if status != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor: CUresult {status}")
    return n.value


@click.command()
@click.option("--layers", default=30, type=click.IntRange(1, 200), help="decoder layers")
@click.option("--type", "wtype", type=click.Choice(sorted(TYPES)), default="q4_1")
@click.option("--reps", default=20, type=click.IntRange(1, 10_000), help="replays a round")
@click.option("--rounds", default=5, type=click.IntRange(1, 100), help="alternating rounds")
def main(layers: int, wtype: str, reps: int, rounds: int) -> None:
    try:  # the geometry module reads SPARKBOARD_KERNEL_DEFINES as it is imported
        from engine.cuda.geometry import WT_NAMES, Geometry, kernel_defines

        geo = Geometry(kernel_defines(os.environ))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    # the persistent kernel's warps must all reach each phase's block barrier (phasebench.cu)
    persistent_too = geo.values["GEMV_KSPLIT"] >= 2

    wt = next(n for n, name in WT_NAMES.items() if name == wtype)
    # each phase's grid and block as the engine launches its `_qx` kernel (phasebench.cu's
    # kernels are that kernel's body at the same shape)
    launches_of = [
        geo.launch(wt, n_out, cols, 1, mode, norm, qx=True) for n_out, cols, mode, norm in PHASES
    ]
    need = [grid[0] for _, grid, _ in launches_of]  # blocks of phases 0..3
    threads = launches_of[0][2][0]

    import cupy as cp

    from engine.cuda.kernels import source_text
    from engine.cuda.launch import PdlLauncher, f32, i32
    from engine.tools.planes import random_weight

    D, QKV, F = DIMS["D"], DIMS["QKV"], DIMS["F"]
    options = (
        *geo.nvrtc_options,
        "-DGEMV_BODY_ONLY",
        f"-DPROBE_WT={wt}",
        f"-DPROBE_D={D}",
        f"-DPROBE_QKV={QKV}",
        f"-DPROBE_F={F}",
    )
    code = source_text("gemv_simt.cu") + "\n" + PROBE_SOURCE.read_text()
    mod = cp.RawModule(code=code, options=options)
    fn_phase = [mod.get_function(f"probe_launch_{p}") for p in range(4)]
    fn_persistent = mod.get_function("probe_persistent") if persistent_too else None
    fn_empty = mod.get_function("probe_empty_launch")
    fn_empty_p = mod.get_function("probe_empty_persistent")

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    line = f"{wtype} x {layers} layers, blocks a phase {need}, phase kernels' registers "
    line += f"{[k.num_regs for k in fn_phase]}"
    if persistent_too:
        resident = _blocks_per_sm(fn_persistent, threads)
        grid = sms * resident
        if grid < max(need):
            raise click.ClickException(
                f"{resident} persistent blocks an SM x {sms} SMs < the {max(need)} a phase needs"
            )
        line += f"; persistent grid {grid} ({resident} an SM, {fn_persistent.num_regs} registers)"
    else:
        line += "; GEMV_KSPLIT 1: the launches alone"
    print(line, flush=True)

    rng = np.random.default_rng(0)
    rs = cp.random.RandomState(0)
    keep = []  # the weights, alive as long as the pointer table
    table = np.zeros((layers, 12), dtype=np.uint64)
    for li in range(layers):
        planes = []
        for rows, cols in ((QKV, D), (D, D), (F, D), (F, D), (D, F)):
            planes += random_weight(cp, rs, wt, rows, cols)
        norms = [cp.asarray(1 + 0.1 * rng.standard_normal(D), dtype=cp.float32) for _ in range(2)]
        keep += planes + norms
        table[li] = [a.data.ptr for a in planes + norms]
    layers_dev = cp.asarray(table)
    x0 = cp.asarray(rng.standard_normal(D), dtype=cp.float32)
    x = cp.empty(D, cp.float32)
    qkv = cp.zeros(QKV, cp.float32)
    f = cp.zeros(F, cp.float32)
    sync = cp.zeros(2, cp.uint32)
    err = cp.zeros(1, cp.int32)
    stream = cp.cuda.Stream(non_blocking=True)
    pdl = PdlLauncher()
    if not pdl.available():
        raise click.ClickException("no programmatic dependent launch here (cuLaunchKernelEx)")
    phases = 4 * layers

    def capture(issue):
        with stream:
            stream.begin_capture()
            try:
                issue()
            finally:
                graph = stream.end_capture()
        return graph

    def launches():
        for li in range(layers):
            for p in range(4):
                args = (layers_dev, x, qkv, f, i32(li), f32(EPS))
                pdl.launch(fn_phase[p], (need[p],), (threads,), args, stream)

    def persistent():
        args = (layers_dev, x, qkv, f, i32(layers), f32(EPS), sync, err)
        fn_persistent((grid,), (threads,), args)

    def empty_launches():
        for _ in range(phases):
            pdl.launch(fn_empty, (max(need),), (threads,), (), stream)

    def empty_persistent(blocks: int):
        fn_empty_p((blocks,), (threads,), (i32(phases), sync, err))

    graphs = {"launches": capture(launches), "empty launches": capture(empty_launches)}
    if persistent_too:
        graphs["persistent"] = capture(persistent)
        graphs["empty persistent"] = capture(lambda: empty_persistent(grid))
        # fewer arrivals a barrier: how much of its cost is the count's contention
        graphs["empty persistent, 1 block an SM"] = capture(lambda: empty_persistent(sms))

    # the same bits both ways, from the same input (and a finite x: a plausible run)
    results = {}
    for mode in ("launches", "persistent") if persistent_too else ("launches",):
        with stream:
            x[...] = x0
            qkv.fill(0)
            f.fill(0)
        graphs[mode].launch(stream)
        stream.synchronize()
        results[mode] = (x.get(), qkv.get(), f.get())
    if int(err.get()[0]):
        raise click.ClickException("a grid barrier gave up: the persistent grid was not resident")
    same = all(
        np.array_equal(a.view(np.uint32), b.view(np.uint32))
        for a, b in zip(
            results["launches"], results.get("persistent", results["launches"]), strict=True
        )
    )
    finite = bool(np.isfinite(results["launches"][0]).all())
    print(f"bit-identical: {same if persistent_too else 'n/a'} (x finite: {finite})", flush=True)
    if not same:
        diff = np.abs(results["launches"][0] - results["persistent"][0]).max()
        raise click.ClickException(f"launches and persistent differ (x: max |diff| {diff:.3g})")

    times: dict[str, list[float]] = {m: [] for m in graphs}
    for g in graphs.values():  # warm-up
        g.launch(stream)
    stream.synchronize()
    for r in range(rounds):
        order = list(graphs) if r % 2 == 0 else list(graphs)[::-1]
        for mode in order:
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            for _ in range(reps):
                graphs[mode].launch(stream)
            end.record(stream)
            end.synchronize()
            times[mode].append(cp.cuda.get_elapsed_time(start, end) * 1e3 / reps)
    if int(err.get()[0]):
        raise click.ClickException("a grid barrier gave up while timing")

    print(f"\n| mode | us a step (median of {rounds}) | min | max | us a phase |")
    print("|---|---|---|---|---|")
    for mode, ts in times.items():
        med = statistics.median(ts)
        print(f"| {mode} | {med:.1f} | {min(ts):.1f} | {max(ts):.1f} | {med / phases:.2f} |")
    if persistent_too:
        saved = statistics.median(times["launches"]) - statistics.median(times["persistent"])
        print(f"\npersistent saves {saved:.1f} us a step over {phases} phases")


if __name__ == "__main__":
    main()
