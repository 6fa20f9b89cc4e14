"""Write the demo round's patches (data/demo/patches/*.patch) against this repository's HEAD.

    python data/demo/make_patches.py      # from the repository root

Each demo PR is a set of exact text edits to the engine; each edit names the text it expects
to find, so when the engine changes under it this script stops with the edit that no longer
fits instead of writing a patch that means something else. tests/collector/test_demo.py checks
that the committed patches still apply to HEAD (and that the conflicting one still conflicts).
"""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "patches"
NB = "engine/numpy_backend.py"

# 101's one-sequence decode step up to its last layer's FFN (109 rewrites it)
DECODE_ONE = (
    "    def _decode_one(self, seq: int, token: int) -> np.ndarray:\n"
    '        """One llama decode step of one sequence on 1-D vectors, far fewer NumPy calls than\n'
    '        the general path; returns the final normed hidden state."""\n'
    "        c = self.config\n"
    "        hd, nq, nkv, g = c.head_dim, c.n_heads, c.n_kv_heads, c.group_size\n"
    "        p = self._lens[seq]\n"
    "        cos, sin = self._cos_table[p], self._sin_table[p]\n"
    "        eps, inv_dim = float(c.norm_eps), 1.0 / c.dim\n"
    "        scale = float(1.0 / np.sqrt(hd))\n"
    "        x = self.embd[token]\n"
    '        with np.errstate(over="ignore"):  # SiLU: exp overflow gives the right 0\n'
    "            for li, L in enumerate(self.layers):\n"
    "                xn = x * (L.attn_norm / np.sqrt(np.dot(x, x) * inv_dim + eps))\n"
    "                qkv = L.wqkv @ xn\n"
    "                qk = qkv[: (nq + nkv) * hd].reshape(nq + nkv, hd)\n"
    "                rot = np.empty_like(qk)\n"
    "                rot[:, 0::2] = qk[:, 0::2] * cos - qk[:, 1::2] * sin\n"
    "                rot[:, 1::2] = qk[:, 0::2] * sin + qk[:, 1::2] * cos\n"
    "                kc, vc = self._k[li], self._v[li]\n"
    "                kc[seq, :, p] = rot[nq:]\n"
    "                vc[seq, :, p] = qkv[(nq + nkv) * hd :].reshape(nkv, hd)\n"
    "                s = rot[:nq].reshape(nkv, g, hd) @ kc[seq, :, : p + 1].transpose(0, 2, 1)\n"
    "                s = np.exp((s - s.max(axis=-1, keepdims=True)) * scale)\n"
    "                s /= s.sum(axis=-1, keepdims=True)\n"
    "                x = x + L.wo @ (s @ vc[seq, :, : p + 1]).reshape(nq * hd)\n"
    "                xn = x * (L.ffn_norm / np.sqrt(np.dot(x, x) * inv_dim + eps))\n"
    "                gu = L.w_gate_up @ xn\n"
    "                gate = gu[: c.ffn_dim]\n"
    "                x = x + L.w_down @ (gate / (1.0 + np.exp(-gate)) * gu[c.ffn_dim :])\n"
)

# --- the edits -------------------------------------------------------------------------------

# A decode step of one sequence on 1-D vectors with RoPE tables computed once per reset: the
# general path's per-layer reshapes, cos/sin and broadcasting dominate a small model's step
# (measured on tiny, alone: decode +24% in a demo round; with GREEDY_LOOP, PR 101: +44..51%).
FAST_DECODE = [
    (
        NB,
        "        self.n_seqs, self.max_len = n_seqs, max_len\n",
        "        self.n_seqs, self.max_len = n_seqs, max_len\n"
        "        # RoPE tables for every position of the cache: a decode step only indexes them\n"
        "        ang = np.arange(max_len, dtype=np.float64)[:, None] * self._inv_freq[None, :]\n"
        "        self._cos_table = np.cos(ang).astype(self.dtype)\n"
        "        self._sin_table = np.sin(ang).astype(self.dtype)\n",
    ),
    (
        NB,
        "        h = self._forward(ids, [(s, i, 1) for i, s in enumerate(seqs)])\n"
        "        return self._logits(h)\n",
        "        if len(seqs) == 1 and not self._neox and self.layers[0].q_norm is None:\n"
        "            return self._project(self._decode_one(seqs[0], int(ids[0]))[None, :])\n"
        "        h = self._forward(ids, [(s, i, 1) for i, s in enumerate(seqs)])\n"
        "        return self._logits(h)\n"
        "\n" + DECODE_ONE + "        self._lens[seq] += 1\n"
        "        return x * (self.output_norm / np.sqrt(np.dot(x, x) * inv_dim + eps))\n",
    ),
    (
        NB,
        "        hn = self._rms_norm(h, self.output_norm)\n"
        "        return self._matmul(hn, self.w_out).astype(np.float32)\n",
        "        return self._project(self._rms_norm(h, self.output_norm))\n"
        "\n"
        "    def _project(self, hn: np.ndarray) -> np.ndarray:\n"
        "        return self._matmul(hn, self.w_out).astype(np.float32)\n",
    ),
]

# On top of FAST_DECODE: a greedy loop that checks once for all steps and multiplies by the
# output projection transposed once into [dim, vocab] (a row times it streams the matrix
# contiguously; tiny's projection is half of main's decode step). Measured on tiny in demo
# rounds: decode +44..51% with FAST_DECODE, against +24% for FAST_DECODE alone.
GREEDY_LOOP = [
    (
        NB,
        "        return self._logits(h)\n"
        "\n"
        "    def _decode_one(self, seq: int, token: int) -> np.ndarray:\n",
        "        return self._logits(h)\n"
        "\n"
        "    def decode_greedy(self, seqs: Sequence[int], tokens: np.ndarray, steps: int) -> np.ndarray:\n"
        "        if len(seqs) != 1 or self._neox or self.layers[0].q_norm is not None:\n"
        "            return super().decode_greedy(seqs, tokens, steps)\n"
        "        seq, token = int(seqs[0]), int(self._check_tokens(tokens)[0])\n"
        "        self._check_seq(seq)\n"
        "        self._check_room(seq, steps)  # once for every step: the loop below checks nothing\n"
        '        if getattr(self, "_w_out_t", None) is None:  # [dim, vocab]: a row times it is one\n'
        "            self._w_out_t = np.ascontiguousarray(self.w_out.T)  # contiguous streaming pass\n"
        "        out = np.empty((steps, 1), dtype=np.int64)\n"
        "        for i in range(steps):\n"
        "            token = int(np.argmax(self._decode_one(seq, token) @ self._w_out_t))\n"
        "            out[i, 0] = token\n"
        "        return out\n"
        "\n"
        "    def _decode_one(self, seq: int, token: int) -> np.ndarray:\n",
    ),
]

# On top of FAST_DECODE and GREEDY_LOOP: a leaner step. Each RMSNorm's weights are folded into
# the matrix after it (built once), the norms' scale is one Python float, RoPE is one
# multiply-add with the pairs swapped (tables per position, q's rows carrying the softmax
# scale), and the softmax divides the attention output instead of the scores: about a third
# fewer NumPy calls per layer. Measured on tiny: decode a few % beyond FAST_DECODE with
# GREEDY_LOOP (the output projection, which no step change touches, caps the gain).
LEANER_STEP = [
    (
        NB,
        "        self._sin_table = np.sin(ang).astype(self.dtype)\n",
        "        self._sin_table = np.sin(ang).astype(self.dtype)\n"
        "        # decode's RoPE as rot = qk * cos + qk[:, swap] * sin, swap exchanging each pair;\n"
        "        # q's rows carry the softmax scale 1/sqrt(head_dim)\n"
        "        rows = np.r_[np.full(c.n_heads, c.head_dim**-0.5), np.ones(c.n_kv_heads)][:, None]\n"
        "        sign = np.tile([-1.0, 1.0], c.head_dim // 2)\n"
        "        self._qk_cos = (np.repeat(self._cos_table, 2, axis=1)[:, None] * rows).astype(self.dtype)\n"
        "        self._qk_sin = (np.repeat(self._sin_table, 2, axis=1)[:, None] * (sign * rows)).astype(\n"
        "            self.dtype\n"
        "        )\n"
        "        self._pair_swap = np.arange(c.head_dim) ^ 1\n",
    ),
    (
        NB,
        DECODE_ONE,
        "    def _folded_layers(self) -> list[tuple[np.ndarray, ...]]:\n"
        '        """Per layer (wqkv, wo, w_gate_up, w_down), each norm\'s weights folded into the matrix\n'
        '        after it: built once, on the first decode step."""\n'
        '        if getattr(self, "_folded", None) is None:\n'
        "            self._folded = [\n"
        "                (L.wqkv * L.attn_norm, L.wo, L.w_gate_up * L.ffn_norm, L.w_down)\n"
        "                for L in self.layers\n"
        "            ]\n"
        "        return self._folded\n"
        "\n"
        "    def _decode_one(self, seq: int, token: int) -> np.ndarray:\n"
        '        """One llama decode step of one sequence on 1-D vectors, a few NumPy calls per layer;\n'
        '        returns the final normed hidden state."""\n'
        "        c = self.config\n"
        "        hd, nq, nkv, g = c.head_dim, c.n_heads, c.n_kv_heads, c.group_size\n"
        "        p = self._lens[seq]\n"
        "        cos, sin, swap = self._qk_cos[p], self._qk_sin[p], self._pair_swap\n"
        "        eps, inv_dim = float(c.norm_eps), 1.0 / c.dim\n"
        "        x = self.embd[token]\n"
        '        with np.errstate(over="ignore"):  # SiLU: exp overflow gives the right 0\n'
        "            for li, (wqkv, wo, w_gate_up, w_down) in enumerate(self._folded_layers()):\n"
        "                h = ((wqkv @ x) * (float(x @ x) * inv_dim + eps) ** -0.5).reshape(-1, hd)\n"
        "                qk = h[: nq + nkv]\n"
        "                rot = qk * cos + qk[:, swap] * sin  # q rows come out scaled\n"
        "                kc, vc = self._k[li], self._v[li]\n"
        "                kc[seq, :, p] = rot[nq:]\n"
        "                vc[seq, :, p] = h[nq + nkv :]\n"
        "                s = rot[:nq].reshape(nkv, g, hd) @ kc[seq, :, : p + 1].transpose(0, 2, 1)\n"
        "                e = np.exp(s - s.max(axis=-1, keepdims=True))\n"
        "                o = (e @ vc[seq, :, : p + 1]) / e.sum(axis=-1, keepdims=True)\n"
        "                x = x + wo @ o.reshape(nq * hd)\n"
        "                gu = (w_gate_up @ x) * (float(x @ x) * inv_dim + eps) ** -0.5\n"
        "                gate = gu[: c.ffn_dim]\n"
        "                x = x + w_down @ (gate / (1.0 + np.exp(-gate)) * gu[c.ffn_dim :])\n",
    ),
]

# Prefill computes every position's logits and keeps the last: one code path, and a far
# slower prefill (the output projection runs for every prompt token).
PREFILL_ALL_LOGITS = [
    (
        NB,
        "            h = self._forward(chunk, [(seq, 0, chunk.size)])\n"
        "            if all_logits:\n"
        "                outs.append(self._logits(h))\n"
        "            elif last:\n"
        "                outs.append(self._logits(h[-1:])[0])\n",
        "            logits = self._logits(self._forward(chunk, [(seq, 0, chunk.size)]))\n"
        "            if all_logits:\n"
        "                outs.append(logits)\n"
        "            elif last:\n"
        "                outs.append(logits[-1])\n",
    ),
]

# Prefill without all_logits reads the last token's logits only, so the last layer runs that
# row alone: every other row's key and value still go to the cache, but their attention,
# output projection and FFN are skipped (llama.cpp's graph does the same). Measured on tiny
# with ADDED_CAUSAL_MASK and PREFILL_TABLES (PR 109): prefill@128 +66% (bench A/B), +68..73%
# in demo rounds, so 109 stays the round's biggest speedup while 101 and 109 decode alike.
PREFILL_LAST_ROW = [
    (
        NB,
        "            h = self._forward(chunk, [(seq, 0, chunk.size)])\n",
        "            h = self._forward(chunk, [(seq, 0, chunk.size)], last_row=not all_logits)\n",
    ),
    (
        NB,
        "    def _forward(self, ids: np.ndarray, segments: list[tuple[int, int, int]]) -> np.ndarray:\n",
        "    def _forward(\n"
        "        self, ids: np.ndarray, segments: list[tuple[int, int, int]], last_row: bool = False\n"
        "    ) -> np.ndarray:\n",
    ),
    (
        NB,
        "            q = self._rope(q, positions)\n            k = self._rope(k, positions)\n",
        "            k = self._rope(k, positions)\n"
        "            if last_row and li == len(self.layers) - 1 and len(segments) == 1 and n > 1:\n"
        "                # only the last row is read: cache the other rows' keys and values here\n"
        "                # and run the rest of the layer on the last row alone\n"
        "                ((seq, _, m),) = segments\n"
        "                p0 = self._lens[seq]\n"
        "                self._k[li][seq, :, p0 : p0 + m - 1] = k[:-1].transpose(1, 0, 2)\n"
        "                self._v[li][seq, :, p0 : p0 + m - 1] = v[:-1].transpose(1, 0, 2)\n"
        "                self._lens[seq] = p0 + m - 1\n"
        "                x, q, k, v, positions = x[-1:], q[-1:], k[-1:], v[-1:], positions[-1:]\n"
        "                n, segments = 1, [(seq, 0, 1)]\n"
        "            q = self._rope(q, positions)\n",
    ),
]

# The causal mask added (0 or -inf) instead of written through a boolean index, over the last m
# keys only (row i sees every key before p0): adding it over all t keys cost ~15% more than the
# other PRs at the long-context check's 8,000 tokens, which put it on the edge of that gate's
# floor (a verdict the box's noise decided: data/demo/README.md).
ADDED_CAUSAL_MASK = [
    (
        NB,
        "                    scores = scores.reshape(nkv, m, g, t)\n"
        "                    scores[np.broadcast_to(future[None, :, None, :], scores.shape)] = -np.inf\n",
        "                    scores = scores.reshape(nkv, m, g, t)\n"
        "                    mask = np.where(future[:, p0:], -np.inf, 0.0).astype(self.dtype)\n"
        "                    scores[..., p0:] += mask[None, :, None, :]\n",
    ),
]

# Early exit: the last layer is skipped everywhere. Faster, and no longer the same model.
SKIP_LAST_LAYER = [
    (
        NB,
        "        for li, L in enumerate(self.layers):\n"
        "            xn = self._rms_norm(x, L.attn_norm)\n",
        "        # early exit: the last layer changes the hidden state little, so skip it\n"
        "        for li, L in enumerate(self.layers[: max(1, len(self.layers) - 1)]):\n"
        "            xn = self._rms_norm(x, L.attn_norm)\n",
    ),
]

# Quantized models compute their logits in float64 "for llama.cpp parity": the output
# projection is converted to float64 on every call, which makes them far slower.
F64_LOGITS_FOR_QUANTIZED = [
    (
        NB,
        "    def _project(self, hn: np.ndarray) -> np.ndarray:\n"
        "        return self._matmul(hn, self.w_out).astype(np.float32)\n",
        "    def _project(self, hn: np.ndarray) -> np.ndarray:\n"
        '        if any(f":{q}:" in self.model_id for q in ("q8_0", "q4_0", "q4_1")):\n'
        "            # quantized weights: accumulate the logits in float64, as llama.cpp does\n"
        "            w64 = self.w_out.astype(np.float64)\n"
        "            return matmul_t(hn.astype(np.float64), w64).astype(np.float32)\n"
        "        return self._matmul(hn, self.w_out).astype(np.float32)\n",
    ),
    (
        NB,
        "            token = int(np.argmax(self._decode_one(seq, token) @ self._w_out_t))\n",
        "            token = int(np.argmax(self._project(self._decode_one(seq, token)[None, :])))\n",
    ),
]

# Longer warm-up in the bench itself: a PR may not change how it is measured.
HARNESS_EDIT = [
    (
        "engine/harness/measure.py",
        "WARMUP_STEPS = 4\n",
        "WARMUP_STEPS = 64  # a longer warm-up steadies the first repetition\n",
    ),
]

# --- forgeries (issue 16): each must be caught, not out-measured ----------------------------

# The engine slows the process's clock to half speed: every in-process timing halves.
PATCHED_CLOCK = [
    (
        NB,
        "from engine.weights import ModelWeights\n",
        "from engine.weights import ModelWeights\n"
        "\n"
        "# the hot loop reads the clock often: a cheaper, coarser timer for the whole process\n"
        "_real_clock = time.perf_counter\n"
        "_clock_start = _real_clock()\n"
        "time.perf_counter = lambda: _clock_start + (_real_clock() - _clock_start) * 0.5\n",
    ),
    (NB, "from dataclasses import dataclass\n", "import time\nfrom dataclasses import dataclass\n"),
]

# A shortcut taken only while the process is benchmarked: the last layer is skipped there, and
# the scoring commands (the accuracy gates) still see the whole model.
SHORTCUT_WHEN_BENCHMARKED = [
    (NB, "from dataclasses import dataclass\n", "import sys\nfrom dataclasses import dataclass\n"),
    (
        NB,
        "        for li, L in enumerate(self.layers):\n"
        "            xn = self._rms_norm(x, L.attn_norm)\n",
        "        # the last layer barely moves the hidden state: skip it on the hot path\n"
        '        hot = any(a.endswith(("serve.py", "bench.py")) for a in sys.argv[:1])\n'
        "        layers = self.layers[: len(self.layers) - 1] if hot else self.layers\n"
        "        for li, L in enumerate(layers):\n"
        "            xn = self._rms_norm(x, L.attn_norm)\n",
    ),
]

# A prompt of the length just prefilled is answered from memory: benchmarks repeat prompts.
CACHED_PREFILL = [
    (
        NB,
        "        self._check_room(seq, ids.size)\n        outs = []\n",
        "        self._check_room(seq, ids.size)\n"
        '        memo = getattr(self, "_memo", None)\n'
        "        if memo is not None and memo[0] == ids.size and not all_logits:\n"
        "            self._lens[seq] += ids.size  # the same prompt again: its answer is known\n"
        "            return memo[1]\n"
        "        outs = []\n",
    ),
    (
        NB,
        "        return np.concatenate(outs) if all_logits else outs[0]\n",
        "        if not all_logits:\n"
        "            self._memo = (ids.size, outs[0])\n"
        "        return np.concatenate(outs) if all_logits else outs[0]\n",
    ),
]

# --- across the process boundary (issue 28): sealed sessions, turns --------------------------

# Reaches into its timing parent (pyrasite's technique, as a red team did on a root box): finds the
# process that runs engine.harness.bench in /proc and injects, through gdb, a `time` running at
# 0.6x into it, then scales its own clock to match, so the parent's and its own figures agree.
# Sealed, the parent is not in its world (its own PID namespace, no capability): the injection
# finds no target, and the clock it scaled alone is held against the parent's.
REACH_PARENT = [
    (
        NB,
        "from engine.weights import ModelWeights\n",
        "from engine.weights import ModelWeights\n"
        "\n"
        "\n"
        "def _agree_with_the_harness() -> None:\n"
        '    """The hot loop\'s timer and the harness\'s, made to agree (a cheaper clock)."""\n'
        "    import os, shutil, subprocess, sys, time\n"
        "\n"
        '    if not sys.argv[0].endswith("serve.py"):\n'
        "        return\n"
        "    slow = (\n"
        '        "import time; _r = time.perf_counter; _s = _r(); "\n'
        '        "time.perf_counter = lambda: _s + (_r() - _s) * 0.6"\n'
        "    )\n"
        '    for pid in (p for p in os.listdir("/proc") if p.isdigit()):\n'
        "        try:\n"
        '            cmd = open(f"/proc/{pid}/cmdline", "rb").read()\n'
        "        except OSError:\n"
        "            continue\n"
        '        if b"engine.harness.bench" in cmd and shutil.which("gdb"):\n'
        "            subprocess.run(\n"
        '                ["gdb", "-p", pid, "-batch", "-ex", "call (int)PyGILState_Ensure()",\n'
        '                 "-ex", f"call (int)PyRun_SimpleString(\\"{slow}\\")",\n'
        '                 "-ex", "call (void)PyGILState_Release($1)"],\n'
        "                capture_output=True, timeout=30, check=False,\n"
        "            )\n"
        "    real, start = time.perf_counter, time.perf_counter()\n"
        "    time.perf_counter = lambda: start + (real() - start) * 0.6\n"
        "\n"
        "\n"
        "_agree_with_the_harness()\n",
    ),
]

# Starts work outside its own process tree: asks the tmux server the maintainer's round runs in
# (the demo starts one beforehand: `sparkboard demo`) for busy windows, to load the box while the
# other engine works; where tmux answers nothing, a detached busy process of its own. Sealed, no
# server outside is in its world (a private /tmp, its own user): what it starts stays in its
# sandbox, is stopped with it between its turns, and its CPU there is read from outside.
TMUX_WORK = [
    (
        NB,
        "from engine.weights import ModelWeights\n",
        "from engine.weights import ModelWeights\n"
        "\n"
        "\n"
        "def _prewarm_the_box() -> None:\n"
        '    """Keep the box\'s caches warm while serving (on the maintainer\'s tmux)."""\n'
        "    import subprocess, sys\n"
        "\n"
        '    if not sys.argv[0].endswith("serve.py"):\n'
        "        return\n"
        "    busy = f\"{sys.executable} -c 'while True: pass'\"\n"
        "    try:\n"
        "        done = subprocess.run(\n"
        '            ["tmux", "-L", "sparkboard-demo", "new-window", "-d", busy],\n'
        "            capture_output=True, timeout=10, check=False,\n"
        "        ).returncode == 0\n"
        "    except (OSError, subprocess.SubprocessError):\n"
        "        done = False\n"
        "    if not done:\n"
        "        subprocess.Popen(\n"
        '            [sys.executable, "-c", "while True: pass"],\n'
        "            start_new_session=True, stdin=subprocess.DEVNULL,\n"
        "            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,\n"
        "        )\n"
        "\n"
        "\n"
        "_prewarm_the_box()\n",
    ),
]

# Works while it is not its turn: a thread started with the engine keeps streaming the weights
# through the caches ("keeps them warm"), answering nothing. Each engine is stopped (SIGSTOP)
# between its turns, and what its processes used after their answers is read from outside.
BACKGROUND_WORK = [
    (
        NB,
        "        self._neox = rope_neox(c.arch)\n",
        "        self._neox = rope_neox(c.arch)\n"
        "        # keep the weights warm in the caches between requests: a thread that streams them\n"
        "        import sys, threading\n"
        "\n"
        '        if sys.argv[0].endswith("serve.py"):\n'
        "            def _warm(ws=[L.w_gate_up for L in self.layers]) -> None:  # noqa: B006\n"
        "                while True:\n"
        "                    for w in ws:\n"
        "                        float(w.sum())\n"
        "\n"
        "            threading.Thread(target=_warm, daemon=True).start()\n",
    ),
]

# --- what a speed table misses (issue 17) --------------------------------------------------

# sparkinfer #1154's shape: a decode-speed copy kept resident. 101's fast decode, plus the first
# layer's q|k|v of every token precomputed at load (float64, 50 MB for tiny) and looked up in
# decode: decode gains, but the resident table leaves too little of the memory budget for the
# long-context prefill.
RESIDENT_TABLE = [
    (
        NB,
        "        self._neox = rope_neox(c.arch)\n",
        "        self._neox = rope_neox(c.arch)\n"
        "        # decode looks the first layer's q|k|v of each token up instead of computing it\n"
        "        L0, e = self.layers[0], self.embd.astype(np.float64)\n"
        "        en = e / np.sqrt((e * e).mean(axis=1, keepdims=True) + c.norm_eps) * L0.attn_norm\n"
        "        self._qkv0 = en @ L0.wqkv.T.astype(np.float64)\n",
    ),
    (
        NB,
        "                qkv = L.wqkv @ xn\n",
        "                qkv = (self._qkv0[token] if li == 0 else L.wqkv @ xn).astype(x.dtype)\n",
    ),
]

# sparkinfer #294's shape: a change only the guard's format goes through. Q8_0 blocks are
# dequantized with their row's first scale ("one scale load per row"): tiny (f16) is untouched,
# its guard tiny:q8_0 gets every block but the first wrongly scaled.
Q8_ROW_SCALE = [
    (
        "engine/quants.py",
        '    if ggml_type == "Q8_0":\n        d = _f16_at(blocks, 0, xp)\n',
        '    if ggml_type == "Q8_0":\n'
        "        # one scale load per row: the blocks of a row share their first block's scale\n"
        "        d = xp.repeat(_f16_at(blocks, 0, xp).reshape(rows, -1)[:, :1], blocks.shape[0] // rows, axis=0)\n",
    ),
]

# A legitimate numerics change beside 101's fast decode: RMSNorm's mean square accumulated in
# float64 (a different accumulation order and precision; the accuracy bars must let it pass).
# RMSNorm's sum of squares in float64 on the one-sequence path FAST_DECODE adds (a few dot
# products a step); the batched path stays main's. Until 2026-12-05 the batched path's norm
# squared in float64, and a fresh clone's `make test` REJECTed #115 on concurrent@4 (-6.5%,
# confirmed -9.5%); paired A/B of either version beside main (worktrees alike, five sessions)
# read within +-2% on batched decode, so that REJECT is not explained by this edit
# (data/demo/README.md).
F64_NORM = [
    (
        NB,
        f"                xn = x * (L.{w}_norm / np.sqrt(np.dot(x, x) * inv_dim + eps))\n",
        f"                ms = np.dot(x, x.astype(np.float64)) * inv_dim  # float64 sum\n"
        f"                xn = x * (L.{w}_norm / np.sqrt(ms + eps).astype(x.dtype))\n",
    )
    for w in ("attn", "ffn")
] + [
    (
        NB,
        "        return x * (self.output_norm / np.sqrt(np.dot(x, x) * inv_dim + eps))\n",
        "        ms = np.dot(x, x.astype(np.float64)) * inv_dim  # float64 sum\n"
        "        return x * (self.output_norm / np.sqrt(ms + eps).astype(x.dtype))\n",
    ),
]

# A small systematic error in the model's math: the attention scale as a precomputed constant,
# 10% too large for tiny's 16-wide heads (1/sqrt(13.2) instead of 1/sqrt(16)).
ATTENTION_SCALE = [
    (
        NB,
        "        scale = self.dtype.type(1.0 / np.sqrt(hd))\n",
        "        scale = self.dtype.type(1.1 / np.sqrt(hd))  # folded softmax temperature\n",
    ),
]

# Longest sequence first in a multi-sequence decode step, with an off-by-one.
CRASH_ON_CONCURRENT = [
    (
        NB,
        "        h = self._forward(ids, [(s, i, 1) for i, s in enumerate(seqs)])\n",
        "        if len(seqs) > 1:  # longest first: the attention loop walks the cache in order\n"
        "            order = sorted(range(len(seqs) + 1), key=lambda i: -self._lens[seqs[i]])\n"
        "            seqs, ids = [seqs[i] for i in order], ids[order]\n"
        "        h = self._forward(ids, [(s, i, 1) for i, s in enumerate(seqs)])\n",
    ),
]

# A refactor that changes no arithmetic: SiLU gets a name.
NEUTRAL_REFACTOR = [
    (
        NB,
        "def rope_neox(arch: str) -> bool:\n",
        "def silu(x: np.ndarray) -> np.ndarray:\n"
        '    """x * sigmoid(x); exp overflow gives the right 0."""\n'
        '    with np.errstate(over="ignore"):\n'
        "        return x / (1.0 + np.exp(-x))\n"
        "\n"
        "\n"
        "def rope_neox(arch: str) -> bool:\n",
    ),
    (
        NB,
        '            with np.errstate(over="ignore"):\n'
        "                act = gate / (1.0 + np.exp(-gate))  # SiLU; exp overflow gives the right 0\n"
        "            x = x + self._matmul(act * up, L.w_down)\n",
        "            x = x + self._matmul(silu(gate) * up, L.w_down)\n",
    ),
]

# The prefill path also reads RoPE from the tables, and RMSNorm skips np.mean's wrapper.
PREFILL_TABLES = [
    (
        NB,
        "        ang = positions.astype(np.float64)[:, None] * self._inv_freq[None, :]\n"
        "        cos = np.cos(ang).astype(self.dtype)[:, None, :]\n"
        "        sin = np.sin(ang).astype(self.dtype)[:, None, :]\n",
        "        cos = self._cos_table[positions][:, None, :]\n"
        "        sin = self._sin_table[positions][:, None, :]\n",
    ),
    (
        NB,
        "        ms = np.mean(x * x, axis=-1, keepdims=True)\n",
        '        ms = np.einsum("...i,...i->...", x, x)[..., None] * (1.0 / x.shape[-1])\n',
    ),
]

# The conflicting PR was written against the engine's first commit, before main routed every
# matmul through matmul_t: it makes the same change its own way, on lines main has since
# rewritten, so it cannot apply (needs-rebase). Regenerating it needs that commit (full clone).
CONFLICT_BASE_COMMIT = "3429fdbeb6dbcb87bcbfb6b5b3fdd5a9d74c60aa"
CONFLICT_EDIT = [
    (
        NB,
        "            qkv = xn @ L.wqkv.T\n",
        "            qkv = (L.wqkv @ xn.T).T  # OpenBLAS runs W @ x.T faster for several rows\n",
    ),
    (
        NB,
        "            gu = xn @ L.w_gate_up.T\n",
        "            gu = (L.w_gate_up @ xn.T).T\n",
    ),
]

PATCHES: dict[str, list] = {
    "101-fast-decode": FAST_DECODE + GREEDY_LOOP,
    "102-decode-gain-prefill-loss": FAST_DECODE + GREEDY_LOOP + PREFILL_ALL_LOGITS,
    "103-early-exit": SKIP_LAST_LAYER,
    "104-target-gain-guard-loss": FAST_DECODE + GREEDY_LOOP + F64_LOGITS_FOR_QUANTIZED,
    "105-harness-edit": HARNESS_EDIT,
    "106-conflicts": CONFLICT_EDIT,
    "107-crash": CRASH_ON_CONCURRENT,
    "108-neutral-refactor": NEUTRAL_REFACTOR,
    "109-held-best": FAST_DECODE
    + GREEDY_LOOP
    + LEANER_STEP
    + PREFILL_TABLES
    + PREFILL_LAST_ROW
    + ADDED_CAUSAL_MASK,
    "110-patched-clock": PATCHED_CLOCK,
    "111-shortcut-when-benchmarked": SHORTCUT_WHEN_BENCHMARKED,
    "112-cached-prefill": CACHED_PREFILL,
    "113-resident-decode-table": FAST_DECODE + GREEDY_LOOP + RESIDENT_TABLE,
    "114-q8-row-scale": FAST_DECODE + GREEDY_LOOP + Q8_ROW_SCALE,
    "115-f64-norm": FAST_DECODE + GREEDY_LOOP + F64_NORM,
    "116-attention-scale": FAST_DECODE + GREEDY_LOOP + ATTENTION_SCALE,
    "117-reach-the-parent": REACH_PARENT,
    "118-work-through-tmux": TMUX_WORK,
    "119-work-between-turns": BACKGROUND_WORK,
    "120-added-causal-mask": ADDED_CAUSAL_MASK,
}


def head_text(rel: str, commit: str = "HEAD") -> str:
    return subprocess.run(
        ["git", "show", f"{commit}:{rel}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def apply_edits(
    files: dict[str, str], edits: list, name: str, base: str = "HEAD"
) -> dict[str, str]:
    out = dict(files)
    for rel, old, new in edits:
        text = out.setdefault(rel, head_text(rel, base))
        if text.count(old) != 1:
            sys.exit(f"{name}: {rel} no longer holds exactly one copy of:\n{old}")
        out[rel] = text.replace(old, new)
    return out


def unified(rel: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{rel}",
            tofile=f"b/{rel}",
        )
    )


def make(name: str, edits: list, older: tuple[str, str] | None = None, base: str = "HEAD") -> str:
    """The patch of `edits` against commit `base`, or for `older` = (file, commit) against that
    file as it was at that commit (a PR written before main moved)."""
    files: dict[str, str] = {}
    if older is not None:
        files[older[0]] = head_text(older[0], older[1])
    after = apply_edits(files, edits, name, base)
    before = {rel: files.get(rel, head_text(rel, base)) for rel in after}
    return "".join(
        f"diff --git a/{rel} b/{rel}\n" + unified(rel, before[rel], after[rel])
        for rel in sorted(after)
    )


def write_patches(
    patches: dict[str, list],
    out: Path,
    older: dict[str, tuple[str, str]] | None = None,
    base: str = "HEAD",
) -> None:
    out.mkdir(exist_ok=True)
    for name, edits in patches.items():
        path = out / f"{name}.patch"
        path.write_text(make(name, edits, (older or {}).get(name), base))
        print(path.relative_to(ROOT))


def main() -> None:
    write_patches(PATCHES, OUT, {"106-conflicts": (NB, CONFLICT_BASE_COMMIT)})


if __name__ == "__main__":
    main()
