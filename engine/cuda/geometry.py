"""Launch geometry of the mat-vec kernels, and the tuning macros it follows (no CuPy needed).

The .cu files read their tuning macros (GEMV_WARPS, GEMV_NR1_Q, MMA_WARPS, ...) with defaults;
SPARKBOARD_KERNEL_DEFINES="GEMV_NR1_Q=2 GEMV_MMA=0" compiles them with other values, and the
grids and block sizes below follow the same values: a developer's A/B of one process against
another on the same card (engine/PERF.md). Nothing in a measured round sets it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

BASE_OPTIONS = ("--std=c++17",)
DEFINES_ENV = "SPARKBOARD_KERNEL_DEFINES"
# The macros the Python side needs too, with the defaults the .cu files use. Read by the Python
# side only (PYTHON_ONLY): GEMV_MMA=0 keeps float16 weights off the tensor cores, GEMV_MMA_Q=0
# Q4_0 weights; GEMV_QX=0 puts every quantized mat-vec behind a quantize_q8 launch, and
# GEMV_QX_MAX bounds the block quantizations a `_qx` launch may repeat (quantizes_in_mv);
# MMA_MB_N32_MIN is the fewest blocks a banded `_n32b` launch may have (banded_n32).
GEOMETRY_DEFAULTS = {
    "GEMV_WARPS": 4,
    "GEMV_KSPLIT": 2,
    "GEMV_NR1": 1,
    "GEMV_NR1_Q": 4,
    "MMA_WARPS": 16,
    "MMA_S": 2,
    "MMA_S_GLU": 2,
    "MMAQ_S": 2,
    "GEMV_MMA": 1,
    "GEMV_MMA_Q": 0,
    "GEMV_QX": 1,
    "GEMV_QX_MAX": 1 << 13,
    "MMA_NT_MAX": 4,
    "MMA_WARPS_WIDE": 16,
    "MMA_S_WIDE": 0,
    "MMA_MB_WIDE": 4,
    "MMA_MB_GLU": 2,
    "MMA_MB_N32": 2,
    "MMA_MB_N32_MIN": 128,
    "ATT_STAGES": 2,
    "ATT_WARPS": 8,
    "PF_WARPS": 4,
}

MAX_BLOCK_SHARED = 227 * 1024  # dynamic shared memory one block may ask for on sm_90
PYTHON_ONLY = ("GEMV_MMA", "GEMV_MMA_Q", "GEMV_QX", "GEMV_QX_MAX", "MMA_MB_N32_MIN")

# Weight storage types: the WT_* numbers in kernels/common.cuh.
WT_F32, WT_F16, WT_Q8_0, WT_Q4_0, WT_Q4_1 = 0, 1, 2, 3, 4
WT_NAMES = {WT_F32: "f32", WT_F16: "f16", WT_Q8_0: "q8_0", WT_Q4_0: "q4_0", WT_Q4_1: "q4_1"}
QUANTIZED = (WT_Q8_0, WT_Q4_0, WT_Q4_1)  # read as int8 dp4a dot products
GEMV_ROW_BLOCKS = (1, 2, 4, 8)  # activation rows one mat-vec launch reads each weight for
QX_ROW_BLOCKS = (1,)  # the row blocks with `_qx` kernels (float input, quantized in the lanes)
GEMV_MODES = ("store", "add", "glu")
NORM_MODES = ("store", "glu")  # the modes with a `_norm` kernel
# n-tiles of 8 activation rows one float16 tensor-core block multiplies each weight fragment
# into, and their kernel-name suffixes (kernels/gemv_mma.cu, GEMV_MMA_NT)
MMA_TILES = {1: "", 2: "_n16", 4: "_n32"}
BANDED_N32 = ("add", "add_norm", "store_norm")  # the `_n32b` kernels: _n32 with MMA_MB_N32 bands
MMA_NAMES = (
    tuple(
        f"gemv_mma_f16_{m}{n}{sfx}"
        for m in GEMV_MODES
        for n in ("", "_norm")
        for sfx in MMA_TILES.values()
    )
    + tuple(f"gemv_mma_f16_{k}_n32b" for k in BANDED_N32)
    + tuple(f"gemv_mma_q4_0_{m}" for m in GEMV_MODES)
)
MMA_M, MMA_N = 16, 8  # output rows x activation rows of one tensor-core n-tile
MMA_SLOT_BYTES = 1024  # one K block of 16 rows per weight matrix in a warp's cp.async ring
MMAQ_SLOT_BYTES = 768  # Q4_0: two K blocks of 16 rows (512 bytes of nibbles, 256 of scales)
# decode attention (kernels/attention.cu): query heads per kv head at most, positions of one
# warp's sub-tile (its warps a block are the ATT_WARPS define: Geometry.attn_block)
ATT_GMAX, ATT_SUB = 8, 16
ROPE_WARPS = 8  # prefill's rope_kv: warps per block, one block per row (kernels/layers.cu)
PF_BK = 64  # keys per tile of the prefill attention (attention.cu)


def kernel_defines(environ: Mapping[str, str] = os.environ) -> dict[str, int]:
    """NAME=integer pairs from SPARKBOARD_KERNEL_DEFINES (space- or comma-separated)."""
    out: dict[str, int] = {}
    for item in environ.get(DEFINES_ENV, "").replace(",", " ").split():
        m = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(-?[0-9]+)", item)
        if not m:
            raise ValueError(f"{DEFINES_ENV}: {item!r} is not NAME=integer")
        out[m.group(1)] = int(m.group(2))
    return out


def one_split_positions(one_split: int, head_dim: int) -> int:
    """The longest row that is one decode-attention split at this head dim (whole tiles of 32;
    0: none), from SPARKBOARD_ATTN_ONE_SPLIT's positions at head dim 64.

    A one-split block's work is positions x head dim, so the limit halves at head dim 128.
    With 8 warps a block, llama-8b's hd-128 rows of up to 256 positions gain as one block per
    kv head (+0.5-1.2%), up to 512 lose 0.5-0.8% (engine/PERF.md)."""
    return one_split * 64 // head_dim // 32 * 32


def env_tuning(
    name: str,
    default: int,
    multiple_of: int = 1,
    environ: Mapping[str, str] = os.environ,
    zero: bool = False,
) -> int:
    """A runner tuning knob from the environment (SPARKBOARD_ATTN_SPLITS, ...): a developer's
    A/B, like the defines above; a positive multiple of `multiple_of` (or 0 where `zero`)."""
    raw = environ.get(name, str(default)).strip()
    if not raw.isdigit() or int(raw) % multiple_of or (int(raw) == 0 and not zero):
        what = "0 or a positive" if zero else "a positive"
        raise ValueError(f"{name}={raw!r}: expected {what} multiple of {multiple_of}")
    return int(raw)


def env_carveout(environ: Mapping[str, str] = os.environ) -> int | None:
    """SPARKBOARD_SMEM_CARVEOUT: the share of each SM's L1 (percent, 0-100) every kernel
    prefers as shared memory, a developer's A/B like the knobs above; unset, the driver picks
    per kernel. An SM runs blocks of one shared-memory configuration at a time."""
    raw = environ.get("SPARKBOARD_SMEM_CARVEOUT")
    if raw is None:
        return None
    if not raw.strip().isdigit() or int(raw) > 100:
        raise ValueError(f"SPARKBOARD_SMEM_CARVEOUT={raw!r}: expected a percent, 0 to 100")
    return int(raw)


def env_flag(name: str, default: bool, environ: Mapping[str, str] = os.environ) -> bool:
    """A runner switch from the environment (SPARKBOARD_NORM_IN_MV, ...): 0 or 1."""
    raw = environ.get(name, "1" if default else "0").strip()
    if raw not in ("0", "1"):
        raise ValueError(f"{name}={raw!r}: expected 0 or 1")
    return raw == "1"


class Geometry:
    """Mat-vec launch shapes for one set of tuning macros."""

    def __init__(self, defines: Mapping[str, int]) -> None:
        self.defines = dict(defines)
        self.values = {k: int(self.defines.get(k, v)) for k, v in GEOMETRY_DEFAULTS.items()}
        for name in (
            "GEMV_WARPS", "GEMV_KSPLIT", "MMA_WARPS", "MMA_S", "MMA_S_GLU", "MMAQ_S", "MMA_WARPS_WIDE",
            "MMA_MB_WIDE", "MMA_MB_GLU", "MMA_MB_N32", "PF_WARPS",
        ):  # fmt: skip
            if self.values[name] < 1:
                raise ValueError(f"{DEFINES_ENV}: {name}={self.values[name]} must be at least 1")
        if not 1 <= self.values["ATT_WARPS"] <= 32:
            raise ValueError(f"{DEFINES_ENV}: ATT_WARPS must be 1 to 32")
        if self.values["ATT_STAGES"] < 2:
            raise ValueError(f"{DEFINES_ENV}: ATT_STAGES must be at least 2")
        if self.values["MMA_NT_MAX"] not in MMA_TILES:
            raise ValueError(f"{DEFINES_ENV}: MMA_NT_MAX must be one of {sorted(MMA_TILES)}")
        if self.values["GEMV_WARPS"] % self.values["GEMV_KSPLIT"]:
            raise ValueError(f"{DEFINES_ENV}: GEMV_WARPS must be a multiple of GEMV_KSPLIT")
        shared = {name: self.shared_bytes(name) for name in MMA_NAMES}
        shared["attn_split_128"] = self.attn_shared_bytes(128)  # the largest decode split
        worst = max(shared, key=shared.__getitem__)
        if shared[worst] > MAX_BLOCK_SHARED:
            raise ValueError(
                f"{DEFINES_ENV}: {worst} would need {shared[worst]:,} bytes of shared memory a "
                f"block; the card grants at most {MAX_BLOCK_SHARED:,}"
            )
        self.nvrtc_options = BASE_OPTIONS + tuple(
            f"-D{k}={v}" for k, v in sorted(self.defines.items())
        )

    def rows_per_warp(self, row_block: int, wt: int) -> int:
        """Output rows one row group (GEMV_KSPLIT warps) of the float/dp4a mat-vec computes
        (GEMV_NR in gemv_simt.cu)."""
        if row_block >= 4:
            return 4
        if row_block == 2:
            return 2
        return self.values["GEMV_NR1_Q"] if wt >= WT_Q8_0 else self.values["GEMV_NR1"]

    def uses_mma(self, wt: int, cols: int) -> bool:
        """Float16 weights whose rows are whole 32-wide blocks, and Q4_0 weights whose rows
        are whole 64-wide steps, take the tensor-core mat-vecs, at every row count, so a
        sequence's result never depends on its batch."""
        if wt == WT_F16:
            return bool(self.values["GEMV_MMA"]) and cols % 32 == 0
        return wt == WT_Q4_0 and bool(self.values["GEMV_MMA_Q"]) and cols % 64 == 0

    def mma_tiles(self, wt: int, rows: int) -> int:
        """n-tiles per tensor-core block: the fewest that cover `rows` (at most MMA_NT_MAX),
        so 16 or 32 sequences read each weight band once, not once per 8. Float16 only."""
        if wt != WT_F16:
            return 1
        cap = self.values["MMA_NT_MAX"]
        return next(nt for nt in sorted(MMA_TILES) if nt * MMA_N >= rows or nt == cap)

    def mma_warps(self, nt: int) -> int:
        """Warps per tensor-core block: MMA_WARPS, or MMA_WARPS_WIDE for 2 and 4 n-tiles."""
        return self.values["MMA_WARPS" if nt == 1 else "MMA_WARPS_WIDE"]

    def mma_bands(self, mode: str, nt: int, norm: bool) -> int:
        """16-row bands per tensor-core block: MMA_MB_WIDE for the wide plain-store kernels (the
        output head's: each activation fragment a warp loads multiplies that many weight
        tiles), MMA_MB_GLU for gate|up at 4 n-tiles, else 1."""
        if nt > 1 and mode == "store" and not norm:
            return self.values["MMA_MB_WIDE"]
        return self.values["MMA_MB_GLU"] if nt == 4 and mode == "glu" else 1

    def banded_n32(self, mode: str, nt: int, norm: bool, n_out: int) -> bool:
        """Whether an add or norm-store mat-vec of 4 n-tiles takes the `_n32b` kernel
        (MMA_MB_N32 bands a block, each activation fragment feeding that many weight tiles):
        where its grid keeps MMA_MB_N32_MIN blocks (128: one a SM of the 132 on the H100
        and H200). Measured at width 32 (engine/PERF.md): llama-8b:f16's 4,096- and 6,144-row
        matrices (128 and 192 blocks) +6%; llama-1b's 2,048 and 3,072 (64 and 96) -5%."""
        kind = f"{mode}_norm" if norm else mode
        if nt != 4 or kind not in BANDED_N32:
            return False
        bands = self.values["MMA_MB_N32"]
        return bands > 1 and -(-n_out // (MMA_M * bands)) >= self.values["MMA_MB_N32_MIN"]

    def norm_in_mv(self, wt: int, cols: int) -> bool:
        """Whether the mat-vec of this weight can apply RMSNorm itself: the float16
        tensor-core kernel, and the dp4a kernels of quantized weights."""
        if wt == WT_F16:
            return self.uses_mma(wt, cols)
        return wt in QUANTIZED and not self.uses_mma(wt, cols)

    def quantizes_in_mv(self, wt: int, n_out: int, cols: int, rows: int) -> bool:
        """Whether the dp4a mat-vec of an [n_out, cols] quantized weight on `rows` rows should
        take float input and quantize it in its lanes (the `_qx` kernels) rather than after a
        quantize_q8 launch. Every row group of the launch quantizes each 32-column block of
        each row again (and the `_qx` kernels hold more registers). Measured on an H100
        (engine/PERF.md): llama-1b:q4_1's q|k|v, 49,152 such blocks, lost 6% of the step (~4 us
        a launch more, not the ~2 us saved); SmolLM2's mat-vecs, 4,320-6,912 blocks, gained
        2.6%. GEMV_QX_MAX (8,192) keeps the extra work well under a launch's cost."""
        if not self.values["GEMV_QX"] or wt not in QUANTIZED or self.uses_mma(wt, cols):
            return False
        rb = row_block(rows)
        if rb not in QX_ROW_BLOCKS:
            return False
        groups = -(-n_out // self.rows_per_warp(rb, wt))
        return groups * (cols // 32) * rows <= self.values["GEMV_QX_MAX"]

    def launch(
        self,
        wt: int,
        n_out: int,
        cols: int,
        rows: int,
        mode: str,
        norm: bool = False,
        qx: bool = False,
    ) -> tuple[str, tuple, tuple]:
        """(kernel name, grid, block) of the mat-vec of an [n_out, cols] weight on `rows` rows.

        norm: the kernel that applies RMSNorm itself: the float16 tensor-core kernel takes
        the raw residual, then the norm weight and eps; a quantized weight's kernel (store and
        glu only) takes the int8 planes of x * g (quantize_q8 with g), then eps.
        qx: a quantized weight's `_qx` kernel, which takes the float32 input (the raw residual
        with norm, then the norm weight and eps) and quantizes it itself."""
        if mode not in GEMV_MODES:
            raise ValueError(f"mat-vec mode {mode!r} is not one of {GEMV_MODES}")
        if norm and not self.norm_in_mv(wt, cols):
            raise ValueError(f"the {WT_NAMES[wt]} mat-vec of {cols} columns has no RMSNorm kernel")
        if norm and wt in QUANTIZED and mode not in NORM_MODES:
            raise ValueError(f"the quantized mat-vecs apply RMSNorm in {NORM_MODES} modes only")
        if qx and (wt not in QUANTIZED or self.uses_mma(wt, cols)):
            raise ValueError(
                f"the {WT_NAMES[wt]} mat-vec of {cols} columns has no float-input kernel"
            )
        if qx and row_block(rows) not in QX_ROW_BLOCKS:
            raise ValueError(f"no float-input quantized mat-vec for {rows} rows")
        if self.uses_mma(wt, cols):
            nt = self.mma_tiles(wt, rows)
            bands, suffix = self.mma_bands(mode, nt, norm), MMA_TILES[nt]
            if self.banded_n32(mode, nt, norm, n_out):
                bands, suffix = self.values["MMA_MB_N32"], "_n32b"
            grid = (-(-n_out // (MMA_M * bands)), -(-rows // (MMA_N * nt)))
            name = f"gemv_mma_{WT_NAMES[wt]}_{mode}" + ("_norm" if norm else "") + suffix
            return name, grid, (self.mma_warps(nt) * 32,)
        rb = row_block(rows)
        groups = self.values["GEMV_WARPS"] // self.values["GEMV_KSPLIT"]  # row groups per block
        per_block = groups * self.rows_per_warp(rb, wt)
        grid = (-(-n_out // per_block), -(-rows // rb))
        name = gemv_name(wt, rb, mode) + ("_norm" if norm else "") + ("_qx" if qx else "")
        return name, grid, (self.values["GEMV_WARPS"] * 32,)

    def shared_bytes(self, name: str) -> int:
        """Dynamic shared memory of a mat-vec kernel: the tensor-core kernels' per-warp rings
        (float16: MMA_S slots, MMA_S_GLU for gate|up, whose slots hold both matrices; Q4_0:
        MMAQ_S slots), or the partial tiles and sums of squares that replace them after the
        loop, whichever is larger; 0 for the rest."""
        if not name.startswith("gemv_mma_"):
            return 0
        glu = "_glu" in name
        mats = 2 if glu else 1
        banded = name.endswith("_n32b")  # an `_n32` kernel of MMA_MB_N32 bands
        nt = next((n for n, sfx in MMA_TILES.items() if sfx and sfx in name), 1)
        if name.startswith("gemv_mma_q4_0_"):
            slots, slot_bytes = self.values["MMAQ_S"], MMAQ_SLOT_BYTES
        elif nt > 1 and self.values["MMA_S_WIDE"]:
            slots, slot_bytes = self.values["MMA_S_WIDE"], MMA_SLOT_BYTES
        else:
            slots, slot_bytes = self.values["MMA_S_GLU" if glu else "MMA_S"], MMA_SLOT_BYTES
        warps = self.mma_warps(nt)
        plain_store = name == "gemv_mma_f16_store" + MMA_TILES[nt]
        if banded:
            bands = self.values["MMA_MB_N32"]
        else:
            bands = self.mma_bands("store" if plain_store else "glu" if glu else "", nt, False)
        ring = warps * slots * mats * bands * slot_bytes
        partials = warps * (mats * MMA_M * bands + 1) * MMA_N * nt * 4  # tiles + sums of squares
        return max(ring, partials)

    def attn_shared_bytes(self, head_dim: int) -> int:
        """Dynamic shared memory of a decode attention split (attn_split_<head_dim>): each
        warp's ring of ATT_STAGES K and as many V sub-tiles (rows padded by 8 halves), or the
        warps' partial outputs, maxima and sums that replace them after the loop."""
        warps = self.values["ATT_WARPS"]
        ring = warps * self.values["ATT_STAGES"] * 2 * ATT_SUB * (head_dim + 8) * 2
        partials = warps * ATT_GMAX * (head_dim + 2) * 4
        return max(ring, partials)

    def attn_block(self) -> tuple[int]:
        """Threads of a decode attention split block (ATT_WARPS warps)."""
        return (self.values["ATT_WARPS"] * 32,)

    def prefill_attention(self, head_dim: int, n: int, n_heads: int) -> tuple[tuple, tuple, int]:
        """(grid, block, dynamic shared bytes) of attn_prefill_<head_dim> over n queries: a block
        per 16 * PF_WARPS queries of a head; two stages of a K and a V tile of PF_BK keys (rows
        padded by 8 halves)."""
        warps = self.values["PF_WARPS"]
        grid = (-(-n // (16 * warps)), n_heads)
        return grid, (warps * 32,), self.prefill_shared_bytes(head_dim)

    def prefill_shared_bytes(self, head_dim: int) -> int:
        """Dynamic shared memory of attn_prefill_<head_dim>: two stages of a K and a V tile."""
        return 2 * 2 * PF_BK * (head_dim + 8) * 2


def row_block(rows: int) -> int:
    """The float/dp4a mat-vec's activation rows per launch row: the fewest of
    GEMV_ROW_BLOCKS that hold `rows`, at most 8 (more rows: more launch rows)."""
    return next((rb for rb in GEMV_ROW_BLOCKS if rb >= rows), GEMV_ROW_BLOCKS[-1])


def gemv_name(wt: int, row_block: int, mode: str) -> str:
    return f"gemv_{WT_NAMES[wt]}_r{row_block}_{mode}"


# The process's geometry: what the kernels are compiled with and launched by.
GEOMETRY = Geometry(kernel_defines())
NVRTC_OPTIONS = GEOMETRY.nvrtc_options
gemv_launch = GEOMETRY.launch
quantizes_in_mv = GEOMETRY.quantizes_in_mv
gemv_shared_bytes = GEOMETRY.shared_bytes
attn_shared_bytes = GEOMETRY.attn_shared_bytes
attn_block = GEOMETRY.attn_block
prefill_attention = GEOMETRY.prefill_attention
prefill_shared_bytes = GEOMETRY.prefill_shared_bytes
