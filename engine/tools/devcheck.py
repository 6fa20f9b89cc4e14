"""One device-machine cycle: copy bandwidth, then decode and prefill timings per model.

    python -m engine.tools.devcheck --models llama-1b:f16,llama-8b:q4_0 --ctx 128 [--out F]

Prints one table (decode tok/s beside the bandwidth ceiling of the same run) and writes the
rows as JSON. A developer tool for PERF.md; the harness measures with engine.harness.bench.
"""

from __future__ import annotations

import json
import sys
import time

import click
import numpy as np

from engine.roofline import copy_bandwidth


def time_decode(runner, ctx: int, tokens: int, width: int = 1) -> float:
    rng = np.random.default_rng(0)
    runner.reset(width, ctx + tokens + 8)
    for s in range(width):
        runner.prefill(s, rng.integers(0, 49152, ctx))
    firsts = rng.integers(0, 49152, width)
    runner.decode_greedy(list(range(width)), firsts, 4)  # capture + warm
    runner.synchronize()
    t0 = time.perf_counter()
    runner.decode_greedy(list(range(width)), firsts, tokens)
    runner.synchronize()
    return width * tokens / (time.perf_counter() - t0)


def time_prefill(runner, n: int) -> float:
    rng = np.random.default_rng(1)
    runner.reset(1, n + 8)
    runner.prefill(0, rng.integers(0, 49152, 256))  # warm cuBLAS
    runner.truncate(0, 0)
    runner.synchronize()
    t0 = time.perf_counter()
    runner.prefill(0, rng.integers(0, 49152, n))
    runner.synchronize()
    return n / (time.perf_counter() - t0)


def print_profile(model: str, what: str, times: dict[str, float]) -> None:
    """The costliest kernels of one eager decode step or prefill (each launch timed alone)."""
    total = sum(times.values())
    print(f"{model} {what}: eager kernels sum {total:.0f} us", file=sys.stderr)
    for kname, us in sorted(times.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {kname:28} {us:9.1f} us", file=sys.stderr)


def ablation(runner, model: str, rows: int, ctx: int, tag: str, ceiling: float) -> list[dict]:
    """Graph step times of `rows` sequences of `ctx` tokens with groups of kernels left out
    (each replay moves the rows on by a token; they go back to `ctx` tokens per group), in
    the step the decode takes at that length (short rows: one attention split, no combine)."""
    from engine.cuda.profiling import time_graph

    reps = 20
    runner.reset(rows, ctx + 2000)
    for s in range(rows):
        runner.prefill(s, np.arange(ctx) % 1000)
    short = runner.ready_step().is_short(ctx + reps + 4)  # time_graph's 3 warm-up replays and reps
    # a decode step's kernels by name prefix (RoPE runs inside attn_split)
    others = ("embed", "rmsnorm", "attn_", "argmax", "quantize")
    out = []
    for label, skip in [
        ("full", ()),
        ("no attention", ("attn_",)),
        ("no combine", ("attn_combine",)),
        ("no rmsnorm", ("rmsnorm",)),
        ("no quantize", ("quantize",)),
        ("no argmax", ("argmax",)),
        ("mat-vec only", others),
        ("no mat-vec", ("gemv_",)),
    ]:
        for s in range(rows):
            runner.truncate(s, ctx)
        ms = time_graph(runner, rows, skip, reps=reps, short=short)
        print(f"  ablate {model:14} {tag:<6} {label:14} {ms * 1e3:8.1f} us/step", file=sys.stderr)
        what = f"abl{tag}:{label}"
        out.append(dict(model=model, what=what, tok_s=1e3 / ms, ceiling=ceiling, ratio=0.0))
    return out


@click.command()
@click.option("--models", default="llama-1b:f16,llama-8b:q4_0,llama-8b:f16")
@click.option("--ctx", default="128")
@click.option("--tokens", default=64, type=int)
@click.option("--prefill", "prefill_n", default=0, type=int, help="also time a prefill of N")
@click.option("--widths", default="", help="also time concurrent decode at these widths")
@click.option("--out", default="", help="JSON rows")
@click.option(
    "--profile", is_flag=True, help="per-kernel times of one eager decode step (and prefill)"
)
@click.option(
    "--ablate",
    is_flag=True,
    help="graph step time with kernel groups left out, at each --ctx and each width > 1",
)
def main(
    models: str,
    ctx: str,
    tokens: int,
    prefill_n: int,
    widths: str,
    out: str,
    profile: bool,
    ablate: bool,
) -> None:
    import cupy as cp

    from engine.cuda.profiling import profile_prefill, profile_step
    from engine.models import open_runner

    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    bw = copy_bandwidth()
    print(f"device {dev}: copy bandwidth {bw / 1e12:.2f} TB/s (read+write)", file=sys.stderr)
    rows = []
    for name in [m for m in models.split(",") if m]:
        t0 = time.perf_counter()
        r = open_runner(name, "cupy")
        r.synchronize()
        load_s = time.perf_counter() - t0
        read = r.decode_read_bytes()
        ceiling = bw / read
        for c in [int(x) for x in ctx.split(",") if x]:
            kv = r.kv_bytes_per_token * c
            ceil_c = bw / (read + kv)
            tps = time_decode(r, c, tokens)
            rows.append(
                dict(model=name, what=f"decode@{c}", tok_s=tps, ceiling=ceil_c, ratio=tps / ceil_c)
            )
            print(f"{name} decode@{c}: {tps:.1f} tok/s ceiling {ceil_c:.1f}", file=sys.stderr)
        if profile:
            print_profile(name, "x1 decode step", profile_step(r, 1))
        for c in [int(x) for x in ctx.split(",") if x] if ablate else []:
            rows += ablation(r, name, 1, c, f"@{c}", ceiling)
        for w in [int(x) for x in widths.split(",") if x]:
            tps = time_decode(r, 128, tokens, width=w)
            rows.append(
                dict(model=name, what=f"width{w}", tok_s=tps, ceiling=w * ceiling, ratio=0.0)
            )
            if profile:
                print_profile(name, f"x{w} decode step", profile_step(r, w))
            if ablate and w > 1:
                rows += ablation(r, name, w, 128, f"w{w}", ceiling)
        if prefill_n:
            tps = time_prefill(r, prefill_n)
            rows.append(
                dict(model=name, what=f"prefill@{prefill_n}", tok_s=tps, ceiling=0.0, ratio=0.0)
            )
            if profile:
                print_profile(name, f"prefill of {prefill_n}", profile_prefill(r, prefill_n))
        rows.append(dict(model=name, what="load_s", tok_s=load_s, ceiling=0.0, ratio=0.0))
        del r
        cp.get_default_memory_pool().free_all_blocks()
    if out:
        with open(out, "w") as f:
            json.dump(dict(device=dev, copy_bw=bw, rows=rows), f, indent=1)
    print(f"\n{'model':16} {'what':14} {'tok/s':>10} {'ceiling':>10} {'ratio':>6}")
    for row in rows:
        print(
            f"{row['model']:16} {row['what']:14} {row['tok_s']:10.1f} {row['ceiling']:10.1f} {row['ratio']:6.2f}"
        )
    print(f"copy bandwidth {bw / 1e12:.3f} TB/s on {dev}")


if __name__ == "__main__":
    main()
