"""Device probe (not a test): a short prefill launched kernel by kernel against the same chunk
replayed as a CUDA graph (engine/cuda/prefill.py), in one process, interleaved. Per model and
prompt length: 30 blocks of 8 prefills of fresh prompts into sequences 0..7 (the gpu profile's
region of 1,024 prompt tokens at 128), each block with graphs on and off in alternating order,
the first two blocks dropped; ms per prefill (each includes its logits' copy to the host).

    python tests/gpu/prefill_graph_probe.py llama-1b:f16 llama-8b:q4_0
"""

from __future__ import annotations

import statistics as st
import sys
import time

import numpy as np

from engine.models import open_runner

PROMPTS, BLOCKS, DROPPED = 8, 30, 2


def main(models: list[str]) -> None:
    rng = np.random.default_rng()
    for name in models:
        r = open_runner(name, "cupy")
        for n in (128, 512):
            times: dict[bool, list[float]] = {True: [], False: []}
            for block in range(BLOCKS):
                for graphs in (True, False) if block % 2 else (False, True):
                    r.prefiller.use_graphs = graphs
                    r.reset(PROMPTS, n + 65)
                    t0 = time.perf_counter()
                    for s in range(PROMPTS):
                        r.prefill(s, rng.integers(0, 32000, n))
                    times[graphs].append((time.perf_counter() - t0) / PROMPTS * 1e3)
            for graphs in (False, True):
                t = times[graphs][DROPPED:]
                print(
                    f"{name:16} n={n:4} graphs={graphs!s:5} ms/prefill min {min(t):.3f} "
                    f"med {st.median(t):.3f} max {max(t):.3f}  tok/s (min) {n / min(t) * 1e3:,.0f}"
                )
        del r


if __name__ == "__main__":
    main(sys.argv[1:])
