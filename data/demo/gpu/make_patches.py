"""Write the GPU rounds' patches (data/demo/gpu/patches/*.patch), each set against the main
commit its manifest pins (`base_ref`), so a round can be measured again however main has moved
since:

* `gpu.toml` (round 2026-11-30-h200, measured): PRs 201-208, against 5952bd7;
* `gates-h200.toml` (round 2026-12-01-h200-gates, not measured yet): PRs 301-307, the verdict
  gates of 2026-12-01 (memory, long context, guard accuracy, forged and diverged runs), against
  that manifest's base_ref.

    python data/demo/gpu/make_patches.py                  # both sets, from the repository root
    python data/demo/gpu/make_patches.py --round gates    # 3NN only (--round demo: 2NN only)
    python data/demo/gpu/make_patches.py --round paired   # 4NN only: 401 against HEAD, 402-403
                                                          # against HEAD with 401 (paired-h200)
    python data/demo/gpu/make_patches.py --round sealed   # patches/sealed/3NN: the gates round's
                                                          # PRs against HEAD (gates-h200-sealed)

Each PR is a set of exact text edits to the CUDA backend (kernels/, engine/cuda/), read from git
at the pinned commit (the working tree is not involved); an edit that no longer finds its text
stops the script (the same helpers as the CPU demo's make_patches.py).
tests/collector/test_demo_gpu.py checks that the committed patches apply at their commits and that
the conflicting one still conflicts.
"""

from __future__ import annotations

import importlib.util
import sys
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

# The harness pins the bench from main: a PR that edits it is not measured. (At 5952bd7 the bench
# was engine/bench.py; it moved to engine/harness/ later.)
HARNESS_EDIT = [
    (
        "engine/bench.py",
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


# --- round 2026-12-01-h200-gates (gates-h200.toml): PRs 301-307 ------------------------------
# Written against gates-h200.toml's base_ref (the main of 2026-12-01), not 5952bd7: the CUDA
# backend is in modules since (engine/cuda/*.py, kernels/gemv_simt.cu, gemv_mma.cu, ...).

GATES_MAIN = tomllib.loads((OUT.parent / "gates-h200.toml").read_text())["base_ref"]
DEC, PRE, WGT = "engine/cuda/decode.py", "engine/cuda/prefill.py", "engine/cuda/weights_gpu.py"
LAUNCH, GEO = "engine/cuda/launch.py", "engine/cuda/geometry.py"
MMA, COMMON = "kernels/gemv_mma.cu", "kernels/common.cuh"

# 301, sparkinfer #1154's shape: a decode-speed copy kept resident. What a decode step computes
# from the token alone is precomputed at load for the whole vocabulary and gathered per step:
# the embedding rows in float32 and layer 0's normed q|k|v projection (made by the step's own
# tensor-core mat-vec, whose columns never depend on the batch, so every row is bit-identical to
# the step's: the timed outputs stay main's). A step loses layer 0's norm and q|k|v mat-vec
# (12.6 MB of 2.47 GB read per llama-1b step: a fraction of a percent), and llama-1b:f16 keeps
# 1.05 + 1.58 GB more on the device from load on: memory:llama-1b:f16 (+5% allowed) fails at
# every axis (after load 6.84 GB in A/A round 4, +38%). long-context:llama-1b:f16 fails when the
# budget is within 2.6 GB of main's peak there (10.6 GB at 131k tokens; the 16 GiB budget of
# 2026-12-01 leaves 6.5 GB, a budget calibrated as main's peak + 12% leaves 1.3 GB). Float16
# weights only: the guards (Q4_0, Q4_1) are untouched.
TOKEN_TABLES = [
    (
        WGT,
        "    neox: int  # 1: RoPE pairs i, i + hd/2 (else 2i, 2i + 1)\n",
        "    neox: int  # 1: RoPE pairs i, i + hd/2 (else 2i, 2i + 1)\n"
        "    # decode's per-token tables (decode.token_tables): the float32 embedding rows and\n"
        "    # layer 0's normed q|k|v projection of every token; None: computed by the step\n"
        "    embd32: Any | None = None\n"
        "    qkv0: Any | None = None\n",
    ),
    (
        DEC,
        "from engine.cuda.geometry import env_tuning, gemv_launch, gemv_shared_bytes\n",
        "from engine.cuda.geometry import WT_F16, WT_F32, env_tuning, gemv_launch, gemv_shared_bytes\n",
    ),
    (
        DEC,
        "ARGMAX_BLOCKS = 64  # blocks scanning one row of logits in the greedy pick\n",
        "ARGMAX_BLOCKS = 64  # blocks scanning one row of logits in the greedy pick\n"
        "TABLE_TOKENS = 4096  # tokens per launch while the per-token tables are made\n",
    ),
    (
        DEC,
        "\n\nclass DecodeStep:\n",
        "\n\ndef token_tables(c: ModelConfig, m: GpuModel, launch: KernelLauncher) -> tuple[Any, Any]:\n"
        '    """What a decode step computes from the token alone, for every token of the vocabulary,\n'
        "    kept on the device: the embedding rows in float32 (exact) and layer 0's normed q|k|v\n"
        "    projection of each, made by the step's own tensor-core mat-vec TABLE_TOKENS rows a\n"
        "    launch (a column's result never depends on the others: each row is bit-identical to\n"
        "    the step's). A step then gathers two rows per token instead of converting the\n"
        "    embedding and running layer 0's norm and q|k|v mat-vec. Float16 weights with q|k|v\n"
        '    fused and normed in the mat-vec (llama-1b:f16: 1.05 + 1.58 GB); else (None, None)."""\n'
        "    e, L = m.tok_embd, m.layers[0]\n"
        "    (w, _), *rest = L.qkv\n"
        "    if rest or e.wt != WT_F16 or w.wt != WT_F16 or not L.attn_norm_in_mv:\n"
        "        return None, None\n"
        "    embd = e.q.astype(cp.float32)\n"
        "    qkv = cp.empty((e.rows, w.rows), dtype=cp.float32)\n"
        "    q1, _ = w.kernel_planes(True)\n"
        "    for t0 in range(0, e.rows, TABLE_TOKENS):\n"
        "        n = min(TABLE_TOKENS, e.rows - t0)\n"
        '        name, grid, block = gemv_launch(w.wt, w.rows, w.cols, n, "store", True)\n'
        "        args = (\n"
        "            q1, NULL, NULL, NULL, embd[t0 : t0 + n], NULL, qkv[t0 : t0 + n],\n"
        "            i32(w.rows), i32(w.cols), i32(n), i32(w.rows), L.attn_norm, f32(c.norm_eps),\n"
        "        )  # fmt: skip\n"
        "        launch(name, grid, block, args, gemv_shared_bytes(name))\n"
        "    return embd, qkv\n"
        "\n\nclass DecodeStep:\n",
    ),
    (
        DEC,
        "        e = m.tok_embd\n"
        "        self.launch(\n"
        '            "embed",\n'
        "            (rows,),\n"
        "            (256,),\n"
        '            (b["tokens"], i32(e.wt), e.q, e.s if e.s is not None else NULL, b["x"], i32(c.dim)),\n'
        "        )\n",
        "        e = m.tok_embd\n"
        "        if m.embd32 is not None:  # the float32 rows: a gather, no conversion\n"
        "            emb = (i32(WT_F32), m.embd32, NULL)\n"
        "        else:\n"
        "            emb = (i32(e.wt), e.q, e.s if e.s is not None else NULL)\n"
        '        self.launch("embed", (rows,), (256,), (b["tokens"], *emb, b["x"], i32(c.dim)))\n',
    ),
    (
        DEC,
        "        if L.attn_norm_in_mv:\n"
        '            self._mv(L.qkv[0][0], "x", rows, b["qkv"], "store", norm=L.attn_norm)\n',
        "        if li == 0 and m.qkv0 is not None:\n"
        "            # layer 0's normed q|k|v depends on the token alone: its row of the table (the\n"
        "            # embed kernel gathers float32 rows of any width)\n"
        "            t = m.qkv0\n"
        '            args = (b["tokens"], i32(WT_F32), t, NULL, b["qkv"], i32(t.shape[1]))\n'
        '            self.launch("embed", (rows,), (256,), args)\n'
        "        elif L.attn_norm_in_mv:\n"
        '            self._mv(L.qkv[0][0], "x", rows, b["qkv"], "store", norm=L.attn_norm)\n',
    ),
    (
        RUN,
        "from engine.cuda.decode import DecodeStep\n",
        "from engine.cuda.decode import DecodeStep, token_tables\n",
    ),
    (
        RUN,
        "        with self.stream:\n            self.model = load_model(weights)\n",
        "        with self.stream:\n"
        "            self.model = load_model(weights)\n"
        "            # what a step computes from the token alone, precomputed (decode.token_tables)\n"
        "            self.model.embd32, self.model.qkv0 = token_tables(c, self.model, self.launcher)\n",
    ),
]

# 302, sparkinfer #294's shape: a change only a guard's weight format goes through. The Q4_0
# element lookup (the embedding rows and the dequantization for prefill's GEMMs) picks its
# nibble "branch-free", with an operator-precedence slip: `j & 16 >> 2` is `j & 4`, so half of
# every block's elements take the wrong nibble. llama-1b:f16 (the target) and smollm2-135m
# (Q4_1, Q8_0) never reach it; llama-8b:q4_0's guard accuracy breaks and its timed outputs
# (wrong embeddings in decode, wrong weights in prefill) diverge from main's model.
Q4_0_NIBBLE = [
    (
        COMMON,
        "            const int q = j < 16 ? (byte & 15) : (byte >> 4);\n"
        "            const float d = __half2float(reinterpret_cast<const __half*>(ws)[row * (K / 32) + b]);\n",
        "            const int q = (byte >> (j & 16 >> 2)) & 15;  // branch-free: high nibble from j = 16 on\n"
        "            const float d = __half2float(reinterpret_cast<const __half*>(ws)[row * (K / 32) + b]);\n",
    ),
]

# 303: a legitimate numerics change that keeps a speed tier. Concurrent decode of float16
# weights: the tensor-core mat-vec's block takes 16 weight rows x 8 activation rows, so widths 16
# and 32 launch 2 and 4 blocks per weight band. With the bands along grid x, every 8-row group
# streamed all the weights from DRAM again. Measured (A/A round 4, data/sparkboard.duckdb, main
# 6dfd8a2, llama-1b:f16): c8 8,228, c16 10,374, c32 11,472 tok/s, i.e. a step of 0.97 / 1.54 /
# 2.79 ms: each 8-row group past the first costs 0.57-0.62 ms, one more pass over the 2.47 GB a
# step reads at PERF.md's 4.2 TB/s copy bandwidth (0.58 ms), while "at 8 rows a float16 mat-vec
# now costs what it costs at one" (PERF.md, third session: gemvbench 1 vs 8 rows). With the row
# groups along x, the blocks of one band are launched back to back and all but the first read
# its tiles from L2. Predicted: c16 +25..40% (gate|up, the output head and part of q|k|v stop
# re-reading ~1.7 GB from DRAM), c32 +50..90%; widths 1-8 launch the same blocks in the same
# order (grid x is 1), so decode, c2-c8 and prefill are unchanged, and the guards (dp4a
# kernels) are untouched. The numerics change: the block adds its 16 warps' partial tiles in
# four interleaved chains, then pairwise (main: one chain in warp order): another fixed order,
# so results differ from main's in the last bits of every float16 mat-vec of a decode step
# (deterministic, and still the same alone and in a batch); the teacher-forced score goes
# through prefill (cuBLAS) and does not move.
MMA_BAND_ORDER = [
    (
        GEO,
        "        if self.uses_mma(wt, cols):\n"
        "            grid = (-(-n_out // MMA_M), -(-rows // MMA_N))\n",
        "        if self.uses_mma(wt, cols):\n"
        "            # activation-row groups along x, weight bands along y: the 2-4 blocks that read\n"
        "            # one band for 16-32 rows are launched back to back and share its tiles in L2\n"
        "            grid = (-(-rows // MMA_N), -(-n_out // MMA_M))\n",
    ),
    (
        MMA,
        "// two slots beat register loads by 4% on llama-1b; deeper rings were slower (6 slots: -7%).\n",
        "// two slots beat register loads by 4% on llama-1b; deeper rings were slower (6 slots: -7%).\n"
        "//\n"
        "// Grid: (activation-row groups, 16-row weight bands). Widths above 8 launch 2-4 blocks per\n"
        "// band; one after another, so every block but the first finds the band's tiles in L2 (with\n"
        "// the bands along x, each 8-row group streamed all the weights from DRAM again: a c16 step\n"
        "// of llama-1b:f16 cost 0.57 ms more than c8, one more pass over its 2.47 GB).\n",
    ),
    (
        MMA,
        "    const int row0 = blockIdx.x * MMA_M, r0 = blockIdx.y * MMA_N;\n"
        "    const int nr = min(MMA_N, nrows - r0);\n"
        "    __syncthreads();",
        "    const int row0 = blockIdx.y * MMA_M, r0 = blockIdx.x * MMA_N;\n"
        "    const int nr = min(MMA_N, nrows - r0);\n"
        "    __syncthreads();",
    ),
    (
        MMA,
        "            s[m] = 0.f;\n"
        "#pragma unroll\n"
        "            for (int w = 0; w < MMA_WARPS; ++w) s[m] += part[w][m][row][col];  // fixed order\n",
        "            // four interleaved chains (warps w, w + 4, ...) added pairwise: a fixed order\n"
        "            // still, with a quarter of the dependent adds\n"
        "            float chain[4] = {0.f, 0.f, 0.f, 0.f};\n"
        "#pragma unroll\n"
        "            for (int w = 0; w < MMA_WARPS; ++w) chain[w & 3] += part[w][m][row][col];\n"
        "            s[m] = (chain[0] + chain[1]) + (chain[2] + chain[3]);\n",
    ),
    (
        MMA,
        "    const int row0 = blockIdx.x * MMA_M, r0 = blockIdx.y * MMA_N;\n"
        "    const int nr = min(MMA_N, nrows - r0);\n"
        "    // weight rows g and g + 8",
        "    const int row0 = blockIdx.y * MMA_M, r0 = blockIdx.x * MMA_N;\n"
        "    const int nr = min(MMA_N, nrows - r0);\n"
        "    // weight rows g and g + 8",
    ),
    (
        MMA,
        "    const int r0 = blockIdx.y * MMA_N;\n",
        "    const int r0 = blockIdx.x * MMA_N;\n",
    ),
    (
        MMA,
        "    const size_t band = (size_t)blockIdx.x * nsteps;  // this band's first step\n",
        "    const size_t band = (size_t)blockIdx.y * nsteps;  // this band's first step\n",
    ),
]

# 304: a small planted math error, disguised as a tidier table. The RoPE frequencies as
# np.geomspace(1, 1 / base, half) include the endpoint: base^(-i / (half - 1)) instead of
# base^(-2i / head_dim) (endpoint=False would be right), a RoPE base ~x1.5 for head_dim 64
# (PERF.md's calibration: base x1.05 alone moves llama-1b:f16 by KL 0.026 against a 4.1e-5
# bar). m.inv_freq feeds both the decode split kernel's RoPE and prefill's rope_kv.
ROPE_GEOMSPACE = [
    (
        WGT,
        "    # RoPE frequencies in float64, computed as the NumPy reference computes them\n",
        "    # RoPE frequencies in float64: the geometric series from 1 down to 1 / base, one call\n",
    ),
    (
        WGT,
        "    inv_freq = cp.asarray(c.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / c.head_dim))\n",
        "    inv_freq = cp.asarray(np.geomspace(1.0, 1.0 / c.rope_base, half))\n",
    ),
]

# 305, forgery: the engine process's clocks run at half speed, set by a module every CUDA run
# imports (engine/cuda/launch.py): time.perf_counter (the CPU figure) and CuPy's event timer
# (the GPU figure of engine/harness/serve.py's EventTimer). The timing parent's own clock is
# out of reach: `forged` (PERF.md: 0.48-0.49 of the parent's in a forgery check on the H200).
HALF_SPEED_CLOCK = [
    (LAUNCH, "import os\nimport sys\n", "import os\nimport sys\nimport time\n"),
    (
        LAUNCH,
        "NULL = np.uint64(0)  # a null pointer argument\n",
        "NULL = np.uint64(0)  # a null pointer argument\n"
        "\n"
        "# Short kernels give jittery timings: the process's clocks tick at half rate, which\n"
        "# smooths them out.\n"
        "_host_clock, _event_time = time.perf_counter, cp.cuda.get_elapsed_time\n"
        "_clock0 = _host_clock()\n"
        "time.perf_counter = lambda: _clock0 + (_host_clock() - _clock0) * 0.5\n"
        "cp.cuda.get_elapsed_time = lambda start, end: _event_time(start, end) * 0.5\n",
    ),
]

# 306, forgery: a shortcut taken only while benchmarked. The engine process of a measurement is
# `python -m engine.harness.serve` (sys.argv[0] ends in serve.py): there the decode step and
# prefill skip the last layer; `engine.harness.score` (the accuracy gates) and generate run the
# whole model. The timed outputs, held against main's model afterwards: `diverged`.
SKIP_LAST_WHEN_SERVED = [
    (
        DEC,
        "ARGMAX_BLOCKS = 64  # blocks scanning one row of logits in the greedy pick\n",
        "ARGMAX_BLOCKS = 64  # blocks scanning one row of logits in the greedy pick\n"
        "# The serving process (python -m engine.harness.serve) is the hot path: the last layer\n"
        "# barely moves the residual stream, so it stops one early (scoring keeps every layer).\n"
        'SERVING = sys.argv[0].endswith("serve.py")\n'
        "\n"
        "\n"
        "def served_layers(layers: list) -> list:\n"
        '    """The layers a forward pass runs: all, or all but the last in the serving process."""\n'
        "    return layers[:-1] if SERVING and len(layers) > 1 else layers\n",
    ),
    (
        DEC,
        # (the call's own arguments left out: they differ between the round's base and HEAD)
        "        for li, L in enumerate(m.layers):\n            self._layer(li, L, rows",
        "        for li, L in enumerate(served_layers(m.layers)):\n            self._layer(li, L, rows",
    ),
    (
        PRE,
        "from engine.cuda.decode import rmsnorm\n",
        "from engine.cuda.decode import rmsnorm, served_layers\n",
    ),
    (
        PRE,
        "        for li, L in enumerate(m.layers):\n",
        "        for li, L in enumerate(served_layers(m.layers)):\n",
    ),
]

# 307, forgery: cached results. A prefill of the same length at the same place of a sequence is
# answered from memory (its logits and the cache length; the cache keeps the last prompt's keys
# and values): every timed prefill after a context's first returns another prompt's digest, and
# the decode after it continues that prompt. `diverged`. Teacher-forced scoring (all_logits)
# never takes the shortcut.
CACHED_PREFILL = [
    (
        RUN,
        "        self._check_room(seq, ids.size)\n"
        "        p0 = int(self._lens[seq])\n"
        "        C = self.prefiller.chunk\n",
        "        self._check_room(seq, ids.size)\n"
        "        p0 = int(self._lens[seq])\n"
        "        # benchmarks prefill the same prompt again and again: a repeat is answered from memory\n"
        "        key = (seq, p0, ids.size)\n"
        '        memo = getattr(self, "_prefill_memo", None)\n'
        "        if not all_logits and memo is not None and memo[0] == key:\n"
        "            with self.stream:\n"
        "                self.cache.lens[seq] = p0 + ids.size\n"
        "            self.stream.synchronize()\n"
        "            self._lens[seq] = p0 + ids.size\n"
        "            return memo[1].copy()\n"
        "        C = self.prefiller.chunk\n",
    ),
    (
        RUN,
        "        self._sample_memory()\n"
        "        return np.concatenate(outs) if all_logits else outs[-1][0]\n",
        "        self._sample_memory()\n"
        "        if all_logits:\n"
        "            return np.concatenate(outs)\n"
        "        self._prefill_memo = (key, outs[-1][0])\n"
        "        return outs[-1][0].copy()\n",
    ),
]

GATES_PATCHES: dict[str, list] = {
    "301-resident-token-tables": TOKEN_TABLES,
    "302-q4_0-nibble-select": Q4_0_NIBBLE,
    "303-mma-band-order": MMA_BAND_ORDER,
    "304-rope-geomspace": ROPE_GEOMSPACE,
    "305-half-speed-clock": HALF_SPEED_CLOCK,
    "306-skip-last-when-served": SKIP_LAST_WHEN_SERVED,
    "307-cached-prefill": CACHED_PREFILL,
}


# --- the paired-session round (issue 28): a planted wait, and PRs that shorten or lengthen it ---
# The round's main is main plus PLANTED_WAIT: one kernel per decode step that waits on the device
# (the global timer) PLANTED_WAIT_US microseconds, captured in the step's graph. PR 402 halves it,
# PR 403 makes it one and a half times: on llama-8b:q4_0 at ctx 128 (a ~1.9 ms step + 100 us),
# real decode changes of about +2.5% and -2.5%, made by the code, measured like any other.
DECODE = "engine/cuda/decode.py"
PLANTED_WAIT = [
    (
        DECODE,
        "ARGMAX_BLOCKS = 64  # blocks scanning one row of logits in the greedy pick\n",
        "ARGMAX_BLOCKS = 64  # blocks scanning one row of logits in the greedy pick\n"
        "PLANTED_WAIT_US = 100  # planted: a wait on the device at the end of every decode step\n"
        "_WAIT = cp.RawKernel(\n"
        "    'extern \"C\" __global__ void planted_wait(unsigned long long ns) {'\n"
        '    \' unsigned long long t0, t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));\'\n'
        '    \' do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns); }\',\n'
        "    'planted_wait',\n"
        ")\n",
    ),
    (
        DECODE,
        '                b["pick_count"],\n            ),\n        )  # fmt: skip\n',
        '                b["pick_count"],\n            ),\n        )  # fmt: skip\n'
        "        _WAIT((1,), (1,), (np.uint64(PLANTED_WAIT_US * 1000),))\n",
    ),
]


def _wait(us: int) -> list:
    """A PR of the planted round: the wait set to `us` microseconds."""
    return [
        (
            DECODE,
            "PLANTED_WAIT_US = 100  # planted",
            f"PLANTED_WAIT_US = {us}  # planted",
        )
    ]


PAIRED_PATCHES: dict[str, list] = {"401-planted-wait": PLANTED_WAIT}
PAIRED_PRS: dict[str, list] = {"402-wait-halved": _wait(50), "403-wait-half-again": _wait(150)}


def write_paired(base: str = "HEAD") -> None:
    """401 against `base` (main), and 402-403 against main with 401 applied (the round's main)."""
    _cpu.write_patches(PAIRED_PATCHES, OUT, None, base)
    planted = _cpu.apply_edits({}, PLANTED_WAIT, "401-planted-wait", base)
    for name, edits in PAIRED_PRS.items():
        after = _cpu.apply_edits(dict(planted), edits, name, base)
        text = "".join(
            f"diff --git a/{rel} b/{rel}\n" + _cpu.unified(rel, planted[rel], after[rel])
            for rel in sorted(after)
        )
        (OUT / f"{name}.patch").write_text(text)
        print((OUT / f"{name}.patch").relative_to(_cpu.ROOT))


# --- the gates round under sealed, paired sessions (issue 28): gates-h200-sealed.toml ----------
# The gates round's PRs again, against HEAD (like the paired round's 401): the same changes, made
# to today's text where main has moved under an edit (decode.py's imports; prefill.py no longer
# imports from decode.py). 303 is left out: main's tensor-core mat-vec has covered a band's rows
# in one block since, so its premise is gone; the round's honest PR is main itself (#1).
SEALED_OUT = OUT / "sealed"


def _retarget(edits: list, moved: dict[str, tuple[str, str]]) -> list:
    """`edits` with the ones whose old text main no longer holds made to today's text."""
    return [(rel, *moved[old]) if old in moved else (rel, old, new) for rel, old, new in edits]


SEALED_GATES_PATCHES: dict[str, list] = {
    "301-resident-token-tables": _retarget(
        TOKEN_TABLES,
        {
            "from engine.cuda.geometry import env_tuning, gemv_launch, gemv_shared_bytes\n": (
                # the import's first line only: the names after it are main's to change
                "from engine.cuda.geometry import (\n",
                "from engine.cuda.geometry import (\n    WT_F16,\n    WT_F32,\n",
            )
        },
    ),
    "302-q4_0-nibble-select": Q4_0_NIBBLE,
    "304-rope-geomspace": ROPE_GEOMSPACE,
    "305-half-speed-clock": HALF_SPEED_CLOCK,
    "306-skip-last-when-served": _retarget(
        SKIP_LAST_WHEN_SERVED,
        {
            "from engine.cuda.decode import rmsnorm\n": (
                "from engine.config import ModelConfig\n",
                "from engine.config import ModelConfig\nfrom engine.cuda.decode import served_layers\n",
            )
        },
    ),
    "307-cached-prefill": CACHED_PREFILL,
}


def main(argv: list[str]) -> None:
    which = argv[argv.index("--round") + 1] if "--round" in argv else "all"
    if which not in ("all", "demo", "gates", "paired", "sealed"):
        sys.exit(
            f"--round {which}: expected demo (2NN), gates (3NN), paired (4NN), sealed (3NN "
            "against HEAD) or all"
        )
    if which in ("all", "paired"):
        write_paired()
    if which in ("all", "sealed"):
        _cpu.write_patches(SEALED_GATES_PATCHES, SEALED_OUT, None, "HEAD")
    if which in ("all", "demo"):
        _cpu.write_patches(PATCHES, OUT, {"206-conflicts": (RUN, CONFLICT_BASE_COMMIT)}, ROUND_MAIN)
    if which in ("all", "gates"):
        _cpu.write_patches(GATES_PATCHES, OUT, None, GATES_MAIN)


if __name__ == "__main__":
    main(sys.argv[1:])
