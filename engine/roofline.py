"""`python -m engine.harness.bench roofline --model M`: the decode bandwidth ceiling beside the measure.

A decode step must read every weight byte once (all layers, the output head, one embedding
row) plus the KV cache of the context; dividing this GPU's measured copy bandwidth (a large
device-to-device copy, bytes read + written) by those bytes gives the tok/s no decode of this
model can beat. The command prints that ceiling and the engine's measured decode tok/s beside
it (CuPy backend only), and writes the numbers as JSON.
"""

from __future__ import annotations

import json
import sys
import time

import click
import numpy as np

from engine.errors import EngineError

COPY_GIB = 2.0


def copy_bandwidth(gib: float = COPY_GIB, reps: int = 10) -> float:
    """Device-to-device copy of two `gib` buffers: bytes read + written per second (median)."""
    import cupy as cp

    n = int(gib * 1024**3) // 4
    a = cp.random.random(n, dtype=cp.float32)
    b = cp.empty_like(a)
    for _ in range(3):
        b[...] = a
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(reps):
        start.record()
        b[...] = a
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    del a, b
    cp.get_default_memory_pool().free_all_blocks()
    return 2 * n * 4 / float(np.median(times))


def measure_decode(runner, ctx: int, tokens: int, reps: int, width: int = 1) -> list[float]:
    """Aggregate decode tok/s of `width` sequences after a `ctx`-token prompt, per repetition."""
    rng = np.random.default_rng(0)
    vocab = min(runner.config.vocab_size, 49152)
    runner.reset(width, ctx + tokens + 8)
    out = []
    for _ in range(reps + 1):  # the first repetition warms up and is dropped
        for s in range(width):
            runner.truncate(s, 0)
            runner.prefill(s, rng.integers(0, vocab, ctx))
        firsts = rng.integers(0, vocab, width)
        runner.synchronize()
        t0 = time.perf_counter()
        runner.decode_greedy(list(range(width)), firsts, tokens)
        runner.synchronize()
        out.append(width * tokens / (time.perf_counter() - t0))
    return out[1:]


def roofline_numbers(model: str, ctx: int, tokens: int, reps: int) -> dict:
    from engine.backends import resolve_backend
    from engine.models import open_runner

    resolve_backend("cupy")  # a one-line error where there is no GPU
    runner = open_runner(model, "cupy")
    bw = copy_bandwidth()
    weight_bytes = runner.decode_read_bytes()
    kv_bytes = runner.kv_bytes_per_token * ctx
    ceiling = bw / (weight_bytes + kv_bytes)
    measured = measure_decode(runner, ctx, tokens, reps)
    med = float(np.median(measured))
    import cupy as cp

    return {
        "model": model,
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "ctx": ctx,
        "copy_bandwidth_bytes_s": bw,
        "weight_bytes_per_token": weight_bytes,
        "kv_bytes_per_token": kv_bytes,
        "ceiling_tok_s": ceiling,
        "decode_tok_s": measured,
        "decode_tok_s_median": med,
        "ratio": med / ceiling,
    }


@click.command(name="roofline")
@click.option("--model", required=True, help="Model name, e.g. llama-8b:q4_0.")
@click.option("--ctx", default=128, show_default=True, help="Context before the decode.")
@click.option("--tokens", default=128, show_default=True, help="Tokens decoded per repetition.")
@click.option("--reps", default=3, show_default=True, help="Timed repetitions.")
@click.option("--out", default="-", show_default=True, help="JSON file ('-' = stdout).")
def roofline(model: str, ctx: int, tokens: int, reps: int, out: str) -> None:
    """Bytes a decode step reads, the copy bandwidth, the tok/s ceiling and the measure."""
    if ctx < 1 or tokens < 1 or reps < 1:
        raise EngineError("--ctx, --tokens and --reps must be positive")
    r = roofline_numbers(model, ctx, tokens, reps)
    print(
        f"{r['model']} on {r['device']}, ctx {ctx}:\n"
        f"  bytes per decode step  {r['weight_bytes_per_token'] / 1e9:8.3f} GB weights"
        f" + {r['kv_bytes_per_token'] / 1e9:.3f} GB KV cache\n"
        f"  copy bandwidth         {r['copy_bandwidth_bytes_s'] / 1e12:8.3f} TB/s (read + write)\n"
        f"  ceiling                {r['ceiling_tok_s']:8.1f} tok/s\n"
        f"  measured decode        {r['decode_tok_s_median']:8.1f} tok/s"
        f"  ({100 * r['ratio']:.0f}% of the ceiling)",
        file=sys.stderr,
    )
    text = json.dumps(r, indent=1)
    if out == "-":
        click.echo(text)
    else:
        with open(out, "w") as f:
            f.write(text + "\n")
