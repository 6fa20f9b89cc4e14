"""Write the GPU demo round's patches (data/demo/gpu/patches/*.patch) against the main commit
the round was measured at (gpu.toml's base_ref), so the published round can be measured again
however main has moved since.

    python data/demo/gpu/make_patches.py      # from the repository root

Each PR is a set of exact text edits to the CUDA backend (kernels/, engine/cuda/); an edit that no
longer finds its text stops the script (the same helpers as the CPU demo's make_patches.py).
tests/collector/test_demo_gpu.py checks that the committed patches apply at that commit and that
the conflicting one still conflicts.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

_CPU = Path(__file__).resolve().parents[1] / "make_patches.py"
_spec = importlib.util.spec_from_file_location("cpu_demo_patches", _CPU)
assert _spec and _spec.loader
_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_cpu)

OUT = Path(__file__).resolve().parent / "patches"
ROUND_MAIN = tomllib.loads((OUT.parent / "gpu.toml").read_text())["base_ref"]
GEMV, KPY, RUN = "kernels/gemv.cu", "engine/cuda/kernels.py", "engine/cuda/runner.py"

# Four output rows per warp for a quantized mat-vec of one activation row (main: two). Each
# activation chunk a lane loads then serves four weight rows instead of two; PERF.md's
# gemvbench measured 1 -> 2 rows at -30..-50% per q4_0 mat-vec.
FOUR_ROWS_Q = [
    (
        GEMV,
        "#define GEMV_NR1_Q 2  // the same for quantized weights\n",
        "#define GEMV_NR1_Q 4  // the same for quantized weights\n",
    ),
    (
        GEMV,
        "// float weights, 2 for quantized ones, whose rows are short (engine/PERF.md, gemvbench).\n",
        "// float weights, 4 for quantized ones, whose rows are short (engine/PERF.md, gemvbench).\n",
    ),
    (KPY, "    return 2 if wt >= WT_Q8_0 else 1\n", "    return 4 if wt >= WT_Q8_0 else 1\n"),
]

# Prefill in chunks of 1,024 tokens: a quarter of the prefill scratch, but every chunk
# dequantizes every weight again and the GEMMs get shorter.
SMALL_PREFILL_CHUNKS = [(RUN, "PREFILL_CHUNK = 4096\n", "PREFILL_CHUNK = 1024\n")]

# Four output rows per warp for float weights too (main: one): one code path for every weight
# type. PERF.md's gemvbench had float16 mat-vecs up to 2x slower with more than one row per warp.
FOUR_ROWS_ALL = FOUR_ROWS_Q + [
    (
        GEMV,
        "#define GEMV_NR1 1  // output rows per warp for a single activation row, float weights\n",
        "#define GEMV_NR1 4  // output rows per warp for a single activation row, float weights\n",
    ),
    (KPY, "    return 4 if wt >= WT_Q8_0 else 1\n", "    return 4\n"),
]

# Skip the last transformer layer in decode and prefill: faster, and no longer the same model.
SKIP_LAST_LAYER = [
    (
        RUN,
        "        for li, L in enumerate(self.layers):\n"
        '            self._rmsnorm(b["x"], L.attn_norm, b["h"], NULL, rows, quant=L.qkv[0][0].quantized)\n',
        "        # the last layer barely moves the residual stream: stop one early\n"
        "        for li, L in enumerate(self.layers[:-1]):\n"
        '            self._rmsnorm(b["x"], L.attn_norm, b["h"], NULL, rows, quant=L.qkv[0][0].quantized)\n',
    ),
    (
        RUN,
        "        for li, L in enumerate(self.layers):\n"
        "            self._rmsnorm(x, L.attn_norm, NULL, h16, n)\n",
        "        for li, L in enumerate(self.layers[:-1]):\n"
        "            self._rmsnorm(x, L.attn_norm, NULL, h16, n)\n",
    ),
]

# The harness pins engine/harness/bench.py from main: a PR that edits it is not measured.
HARNESS_EDIT = [
    (
        "engine/harness/bench.py",
        "WARMUP_STEPS = 4\n",
        "WARMUP_STEPS = 16  # the GPU clocks need longer to settle\n",
    )
]

# Rows of a batched greedy decode reordered longest-cache-first, with an off-by-one: every
# concurrent width crashes (IndexError), one sequence never reaches the bug.
CRASH_ON_CONCURRENT = [
    (
        RUN,
        "        start = [int(self._lens[s]) for s in seqs]\n        self._set_rows(seqs, ids)\n",
        "        start = [int(self._lens[s]) for s in seqs]\n"
        "        if n > 1:  # longest cache first: its attention splits start earliest\n"
        "            order = sorted(range(n), key=lambda r: -start[r])\n"
        "            seqs = [seqs[order[r]] for r in range(n + 1)]\n"
        "            ids, start = ids[order], [start[r] for r in order]\n"
        "        self._set_rows(seqs, ids)\n",
    )
]

# The output head of the decode step (final norm, logits, argmax) moved into a named method:
# the same launches in the same order.
_HEAD = (
    '        self._rmsnorm(b["x"], self.out_norm, b["h"], NULL, rows, quant=self.w_out.quantized)\n'
    '        self._mv(self.w_out, "h", rows, b["logits"], "store")\n'
    "        self._launch(\n"
    '            "argmax_advance",\n'
    "            (rows,),\n"
    "            (1024,),\n"
    "            (\n"
    '                b["logits"], _i(c.vocab_size), b["tokens"], b["seq_ids"], self.lens,\n'
    '                b["hist"], _i(self.max_len), _i(1),\n'
    "            ),\n"
    "        )  # fmt: skip\n"
)
NEUTRAL_REFACTOR = [
    (
        RUN,
        _HEAD,
        "        self._head(rows)\n"
        "\n"
        "    def _head(self, rows: int) -> None:\n"
        '        """Final RMSNorm, the logits and the greedy pick that feeds the next step."""\n'
        "        c, b = self.config, self._buf\n" + _HEAD,
    )
]

# Written against fcbc1d6, before the cuBLAS handle was bound to the runner's stream (2d12296):
# the lines it edits have changed on main since.
CONFLICT_BASE_COMMIT = "fcbc1d6"
CONFLICT_EDIT = [
    (
        RUN,
        "        ldc = out.shape[1]\n        handle = cp.cuda.device.get_cublas_handle()\n",
        "        ldc = out.shape[1]\n"
        "        handle = self._cublas  # one handle per runner: no lookup per GEMM\n",
    ),
    (
        RUN,
        "        self.prefill_chunk = prefill_chunk\n",
        "        self.prefill_chunk = prefill_chunk\n"
        "        self._cublas = cp.cuda.device.get_cublas_handle()\n",
    ),
]

PATCHES: dict[str, list] = {
    "201-four-rows-q": FOUR_ROWS_Q,
    "202-decode-gain-prefill-loss": FOUR_ROWS_Q + SMALL_PREFILL_CHUNKS,
    "203-skip-last-layer": SKIP_LAST_LAYER,
    "204-four-rows-all": FOUR_ROWS_ALL,
    "205-harness-edit": HARNESS_EDIT,
    "206-conflicts": CONFLICT_EDIT,
    "207-crash-concurrent": CRASH_ON_CONCURRENT,
    "208-neutral-refactor": NEUTRAL_REFACTOR,
}


def main() -> None:
    _cpu.write_patches(PATCHES, OUT, {"206-conflicts": (RUN, CONFLICT_BASE_COMMIT)}, ROUND_MAIN)


if __name__ == "__main__":
    main()
