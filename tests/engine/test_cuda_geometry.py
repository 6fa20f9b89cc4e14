"""Launch geometry of the mat-vec kernels and the tuning macros behind it (engine/cuda/geometry.py:
pure Python, so it is checked here without a GPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.cuda.geometry import (
    DEFINES_ENV,
    GEMV_MODES,
    GEOMETRY_DEFAULTS,
    MMA_M,
    MMA_N,
    MMA_NAMES,
    PYTHON_ONLY,
    WT_F16,
    WT_F32,
    WT_Q4_0,
    WT_Q4_1,
    WT_Q8_0,
    Geometry,
    env_carveout,
    env_flag,
    env_tuning,
    kernel_defines,
    one_split_positions,
)


def test_defines_parse_names_and_integers() -> None:
    assert kernel_defines({}) == {}
    assert kernel_defines({DEFINES_ENV: "GEMV_NR1_Q=2, MMA_WARPS=8 GEMV_MMA=0"}) == {
        "GEMV_NR1_Q": 2,
        "MMA_WARPS": 8,
        "GEMV_MMA": 0,
    }
    for bad in ("GEMV_U=eight", "gemv_u=8", "GEMV_U", "GEMV_U=8;rm"):
        with pytest.raises(ValueError, match=DEFINES_ENV):
            kernel_defines({DEFINES_ENV: bad})


def test_defines_reach_nvrtc_and_the_launch_geometry() -> None:
    geo = Geometry({"GEMV_NR1_Q": 2, "MMA_WARPS": 8})
    assert geo.nvrtc_options == ("--std=c++17", "-DGEMV_NR1_Q=2", "-DMMA_WARPS=8")
    name, grid, block = geo.launch(WT_Q4_1, 4096, 4096, 1, "store")
    # 4 warps in 2 row groups (GEMV_KSPLIT 2) x 2 rows
    assert (name, grid, block) == ("gemv_q4_1_r1_store", (1024, 1), (128,))
    assert geo.launch(WT_F16, 4096, 4096, 1, "add")[2] == (256,)
    assert Geometry({}).nvrtc_options == ("--std=c++17",)


def test_warps_that_split_k_share_one_row_group() -> None:
    geo = Geometry({"GEMV_KSPLIT": 4})
    assert geo.launch(WT_Q4_1, 4096, 4096, 1, "store")[1:] == ((1024, 1), (128,))  # 4 rows
    assert Geometry({"GEMV_KSPLIT": 2}).launch(WT_Q4_1, 4096, 4096, 8, "add")[1] == (512, 1)
    with pytest.raises(ValueError, match="multiple of GEMV_KSPLIT"):
        Geometry({"GEMV_KSPLIT": 3})
    with pytest.raises(ValueError, match="GEMV_KSPLIT=0"):
        Geometry({"GEMV_KSPLIT": 0})


def test_float16_takes_the_tensor_core_mat_vec_at_every_width() -> None:
    geo = Geometry({})
    names = {geo.launch(WT_F16, 2048, 8192, rows, "add")[0] for rows in range(1, 9)}
    assert names == {"gemv_mma_f16_add"}  # one tile of 8 rows per block
    # wider batches multiply each weight fragment into 2 or 4 tiles (the same mmas per column:
    # bit-identical to one row, tests/gpu), so a band leaves DRAM once per 16 or 32 rows
    wide = {rows: geo.launch(WT_F16, 2048, 8192, rows, "add") for rows in (9, 16, 17, 32, 33)}
    assert [wide[r][0] for r in (9, 16)] == ["gemv_mma_f16_add_n16"] * 2
    assert [wide[r][0] for r in (17, 32, 33)] == ["gemv_mma_f16_add_n32"] * 3
    assert wide[32][1] == (128, 1) and wide[33][1] == (128, 2)
    assert geo.launch(WT_F16, 300, 576, 11, "glu")[1:] == ((19, 1), (512,))  # 16 x 16 tiles
    narrow = Geometry({"MMA_NT_MAX": 1})  # the old launch: a block per 8 rows
    assert narrow.launch(WT_F16, 300, 576, 11, "glu")[:2] == ("gemv_mma_f16_glu", (19, 2))
    assert Geometry({"MMA_NT_MAX": 2}).launch(WT_F16, 64, 576, 32, "add")[:2] == (
        "gemv_mma_f16_add_n16",
        (4, 2),
    )
    with pytest.raises(ValueError, match="MMA_NT_MAX"):
        Geometry({"MMA_NT_MAX": 3})


def test_the_wide_plain_store_takes_several_bands_per_block() -> None:
    """MMA_MB_WIDE (4 by default): the output head's wide kernel multiplies each activation
    fragment into that many 16-row bands (fewer blocks, each re-reading the activations);
    gate|up's `_n32` kernels take MMA_MB_GLU (2); every other kernel keeps one band, so the
    2,048-row matrices keep their 128 blocks."""
    assert Geometry({}).launch(WT_F16, 128256, 2048, 32, "store")[1] == (2004, 1)
    assert Geometry({}).shared_bytes("gemv_mma_f16_store_n32") == 16 * (4 * MMA_M + 1) * 32 * 4
    geo = Geometry({"MMA_MB_WIDE": 2})
    assert geo.launch(WT_F16, 128256, 2048, 32, "store")[:2] == (
        "gemv_mma_f16_store_n32",
        (4008, 1),
    )
    assert geo.launch(WT_F16, 300, 576, 16, "store")[1] == (10, 1)  # 19 bands, the last alone
    assert geo.launch(WT_F16, 128256, 2048, 8, "store")[1] == (8016, 1)  # one tile: one band
    for mode, norm in (("store", True), ("add", False)):
        assert geo.launch(WT_F16, 2048, 2048, 32, mode, norm=norm)[1] == (128, 1)
    for norm in (False, True):  # two bands at 32 rows, one at 16
        assert geo.launch(WT_F16, 8192, 2048, 32, "glu", norm=norm)[1] == (256, 1)
        assert geo.launch(WT_F16, 8192, 2048, 16, "glu", norm=norm)[1] == (512, 1)
    assert Geometry({"MMA_MB_GLU": 1}).launch(WT_F16, 8192, 2048, 32, "glu")[1] == (512, 1)
    # partial tiles of 2 bands and the sums outgrow the ring of 2 bands (16 * 2 * 2 KB)
    assert geo.shared_bytes("gemv_mma_f16_store_n32") == 16 * (2 * MMA_M + 1) * 32 * 4
    assert geo.shared_bytes("gemv_mma_f16_store_norm_n32") == Geometry({}).shared_bytes(
        "gemv_mma_f16_store_norm_n32"
    )
    # rows that are not whole 32-wide blocks, F32, and GEMV_MMA=0 keep the float loop
    assert geo.launch(WT_F16, 300, 584, 1, "store")[0] == "gemv_f16_r1_store"
    assert geo.launch(WT_F32, 300, 576, 8, "store")[0] == "gemv_f32_r8_store"
    assert Geometry({"GEMV_MMA": 0}).launch(WT_F16, 300, 576, 3, "store")[0] == "gemv_f16_r4_store"


def test_large_matrices_take_the_banded_n32_kernels() -> None:
    """At 32 rows the add and norm-store mat-vecs take MMA_MB_N32 (2) bands a block (`_n32b`)
    where the banded grid keeps MMA_MB_N32_MIN (128) blocks: llama-8b's o, down (4,096 rows)
    and q|k|v (6,144), not llama-1b's 2,048 and 3,072."""
    geo = Geometry({})
    assert geo.launch(WT_F16, 4096, 14336, 32, "add")[:2] == ("gemv_mma_f16_add_n32b", (128, 1))
    assert geo.launch(WT_F16, 6144, 4096, 32, "store", norm=True)[:2] == (
        "gemv_mma_f16_store_norm_n32b",
        (192, 1),
    )
    assert geo.launch(WT_F16, 4096, 4096, 40, "add", norm=True)[1] == (128, 2)
    assert geo.launch(WT_F16, 2048, 8192, 32, "add")[:2] == ("gemv_mma_f16_add_n32", (128, 1))
    assert geo.launch(WT_F16, 3072, 2048, 32, "store", norm=True)[0] == (
        "gemv_mma_f16_store_norm_n32"
    )
    assert geo.launch(WT_F16, 4096, 4096, 16, "add")[0] == "gemv_mma_f16_add_n16"
    assert geo.launch(WT_F16, 14336 * 2, 4096, 32, "glu")[0] == "gemv_mma_f16_glu_n32"
    assert geo.launch(WT_F16, 128256, 4096, 32, "store")[0] == "gemv_mma_f16_store_n32"
    assert geo.shared_bytes("gemv_mma_f16_add_n32b") == 16 * (2 * MMA_M + 1) * 32 * 4
    assert geo.shared_bytes("gemv_mma_f16_add_n32") == 16 * (MMA_M + 1) * 32 * 4
    forced = Geometry({"MMA_MB_N32_MIN": 1})
    assert forced.launch(WT_F16, 300, 576, 32, "add")[:2] == ("gemv_mma_f16_add_n32b", (10, 1))
    one_band = Geometry({"MMA_MB_N32": 1})
    assert one_band.launch(WT_F16, 4096, 14336, 32, "add")[:2] == (
        "gemv_mma_f16_add_n32",
        (256, 1),
    )


def test_which_mat_vecs_apply_rmsnorm_themselves() -> None:
    geo = Geometry({})
    assert geo.launch(WT_F16, 2048, 2048, 3, "glu", norm=True)[0] == "gemv_mma_f16_glu_norm"
    assert geo.launch(WT_F16, 2048, 2048, 3, "glu")[0] == "gemv_mma_f16_glu"
    # quantized weights: the dp4a kernels' store and glu modes
    assert geo.launch(WT_Q4_0, 2048, 2048, 1, "store", norm=True)[0] == "gemv_q4_0_r1_store_norm"
    assert geo.launch(WT_Q4_1, 2048, 2048, 5, "glu", norm=True)[0] == "gemv_q4_1_r8_glu_norm"
    with pytest.raises(ValueError, match="RMSNorm in"):
        geo.launch(WT_Q4_0, 2048, 2048, 1, "add", norm=True)
    for wt, cols, g in (
        (WT_F32, 2048, geo),
        (WT_F16, 584, geo),
        (WT_F16, 2048, Geometry({"GEMV_MMA": 0})),
        (WT_Q4_0, 2048, Geometry({"GEMV_MMA_Q": 1})),  # the int8 tensor-core kernel has none
    ):
        with pytest.raises(ValueError, match="RMSNorm"):
            g.launch(wt, 2048, cols, 1, "store", norm=True)


def test_q4_0_takes_the_int8_tensor_core_mat_vec_when_asked_and_rows_are_whole_steps() -> None:
    # opt-in (GEMV_MMA_Q=1): slower than dp4a at one row, faster at eight (engine/PERF.md)
    assert Geometry({}).launch(WT_Q4_0, 300, 576, 1, "store")[0] == "gemv_q4_0_r1_store"
    geo = Geometry({"GEMV_MMA_Q": 1})
    names = {geo.launch(WT_Q4_0, 4096, 14336, rows, "add")[0] for rows in range(1, 33)}
    assert names == {"gemv_mma_q4_0_add"}  # one kernel at every width
    assert geo.launch(WT_Q4_0, 300, 576, 11, "glu")[1:] == ((19, 2), (512,))
    assert geo.launch(WT_Q4_0, 300, 544, 1, "store")[0] == "gemv_q4_0_r1_store"  # 544 % 64
    assert geo.launch(WT_Q4_1, 300, 576, 1, "store")[0] == "gemv_q4_1_r1_store"
    assert geo.shared_bytes("gemv_mma_q4_0_store") == 16 * 2 * 768
    assert geo.shared_bytes("gemv_mma_q4_0_glu") == 16 * 2 * 2 * 768
    for g in (geo, Geometry({"MMAQ_S": 1})):  # the partial tiles fit the ring
        assert g.shared_bytes("gemv_mma_q4_0_glu") >= 16 * 2 * MMA_M * MMA_N * 4
        assert g.shared_bytes("gemv_mma_q4_0_add") >= 16 * MMA_M * MMA_N * 4


def test_tensor_core_rings_size_the_dynamic_shared_memory() -> None:
    """Each warp's cp.async ring: MMA_S slots of 1 KB per weight matrix (gate|up has two);
    the other mat-vecs need none. The ring also holds the partial tiles after the loop."""
    geo = Geometry({})
    assert geo.shared_bytes("gemv_mma_f16_store") == 16 * 2 * 1024
    assert geo.shared_bytes("gemv_mma_f16_add") == 16 * 2 * 1024
    assert geo.shared_bytes("gemv_mma_f16_glu") == 16 * 2 * 2 * 1024
    assert geo.shared_bytes("gemv_q4_0_r1_glu") == 0
    deep = Geometry({"MMA_WARPS": 8, "MMA_S": 6, "MMA_S_GLU": 3, "MMA_S_WIDE": 2})
    assert deep.shared_bytes("gemv_mma_f16_store") == 8 * 6 * 1024
    assert deep.shared_bytes("gemv_mma_f16_glu") == 8 * 3 * 2 * 1024
    # the H200 grants at most 227 KB per block; the defaults must stay within it
    assert max(geo.shared_bytes(f"gemv_mma_f16_{m}") for m in GEMV_MODES) <= 227 * 1024
    for g in (geo, deep, Geometry({"MMA_S": 1, "MMA_S_GLU": 1})):
        for mode, mats in (("store", 1), ("glu", 2)):  # partial tiles and sums fit the ring
            warps = g.values["MMA_WARPS"]
            tiles = warps * (mats * MMA_M * MMA_N + MMA_N) * 4
            assert g.shared_bytes(f"gemv_mma_f16_{mode}") >= tiles
            assert g.shared_bytes(f"gemv_mma_f16_{mode}_norm") >= tiles
    assert geo.shared_bytes("gemv_mma_f16_glu_norm") == geo.shared_bytes("gemv_mma_f16_glu")
    # 4 n-tiles: the partial tiles and sums outgrow the ring, and size the memory instead
    assert geo.shared_bytes("gemv_mma_f16_add_n32") == 16 * (MMA_M + 1) * 32 * 4
    assert geo.shared_bytes("gemv_mma_f16_glu_norm_n32") == 16 * (2 * 2 * MMA_M + 1) * 32 * 4
    # a geometry whose kernels would need more than a block may have fails up front
    with pytest.raises(ValueError, match="shared memory"):
        Geometry({"MMA_MB_GLU": 4})
    assert geo.shared_bytes("gemv_mma_f16_glu_n16") == geo.shared_bytes("gemv_mma_f16_glu")
    assert max(geo.shared_bytes(n) for n in MMA_NAMES) <= 227 * 1024
    with pytest.raises(ValueError, match="MMA_S=0"):
        Geometry({"MMA_S": 0})


def test_python_defaults_match_the_kernel_sources() -> None:
    """The grids and shared memory sizes follow GEOMETRY_DEFAULTS; the kernels compile with
    the #define defaults in the kernel sources (kernels/*.cu). The two must agree, and each
    default is defined in one file only."""
    kernels = Path(__file__).resolve().parents[2] / "kernels"
    src = "\n".join(p.read_text() for p in sorted(kernels.glob("*.cu")))
    for name, value in GEOMETRY_DEFAULTS.items():
        if name in PYTHON_ONLY:
            continue
        found = re.findall(rf"#ifndef {name}\n#define {name} (\d+)", src)
        assert len(found) == 1, f"{name}: {len(found)} #ifndef defaults in kernels/*.cu"
        assert int(found[0]) == value, name


def test_quantized_rows_per_warp_and_row_blocks() -> None:
    geo = Geometry({})  # 2 row groups per block (4 warps, GEMV_KSPLIT 2)
    assert geo.launch(WT_Q8_0, 4096, 4096, 1, "glu")[:2] == ("gemv_q8_0_r1_glu", (512, 1))
    assert geo.launch(WT_Q4_1, 4096, 4096, 2, "store")[:2] == ("gemv_q4_1_r2_store", (1024, 1))
    assert geo.launch(WT_Q4_1, 4096, 4096, 11, "store")[:2] == ("gemv_q4_1_r8_store", (512, 2))
    for mode in GEMV_MODES:
        assert geo.launch(WT_Q4_1, 10, 64, 1, mode)[1] == (2, 1)  # 8 rows a block
    with pytest.raises(ValueError, match="mode"):
        geo.launch(WT_Q4_1, 10, 64, 1, "mul")


@pytest.mark.parametrize("wt", [WT_Q4_0, WT_Q4_1, WT_Q8_0])
def test_only_the_launch_bound_model_shapes_take_the_qx_kernels(wt: int) -> None:
    """The `_qx` kernels also trigger their dependants right after the PDL wait
    (gemv_simt.cu, GEMV_TRIGGER 2), which paid on SmolLM2's shape and cost llama-8b:q4_0 4% at
    32k when every mat-vec did it (engine/PERF.md). So that trigger must stay where it was
    measured to pay: every layer mat-vec of a decode step at SmolLM2's shape takes `_qx`, and
    no mat-vec of the 1B and 8B shapes does."""
    from engine.dummy import DUMMY_MODELS

    geo = Geometry({})

    def layer_matrices(name: str) -> list[tuple[int, int]]:
        c = DUMMY_MODELS[name].config
        q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        return [(q + 2 * kv, c.dim), (c.dim, q), (c.ffn_dim, c.dim), (c.dim, c.ffn_dim)]

    assert all(geo.quantizes_in_mv(wt, n, k, 1) for n, k in layer_matrices("llama-135m"))
    for name in ("llama-1b", "llama-8b", "qwen3-8b"):
        c = DUMMY_MODELS[name].config
        shapes = layer_matrices(name) + [(c.vocab_size, c.dim)]
        assert not any(geo.quantizes_in_mv(wt, n, k, 1) for n, k in shapes), name
    source = (Path(__file__).resolve().parents[2] / "kernels" / "gemv_simt.cu").read_text()
    assert "#define GEMV_TRIGGER 2 " in source


def test_small_quantized_mat_vecs_quantize_their_own_input() -> None:
    """A dp4a mat-vec of one row whose blocks would repeat few block quantizations (SmolLM2's)
    takes float input (`_qx`) and saves the decode step a quantize_q8 launch; larger ones,
    wider launches, float weights and the tensor-core kernels keep the planes."""
    geo = Geometry({})
    # SmolLM2: q|k|v 960 x 576, gate|up 1,536 x 576, down 576 x 1,536 (4 rows a row group)
    for n_out, cols in ((960, 576), (1536, 576), (576, 1536)):
        assert geo.quantizes_in_mv(WT_Q4_1, n_out, cols, 1)
        assert geo.quantizes_in_mv(WT_Q8_0, n_out, cols, 1)
        assert not geo.quantizes_in_mv(WT_Q4_1, n_out, cols, 2)  # no `_qx` kernel for 2 rows
    assert not geo.quantizes_in_mv(WT_Q4_0, 6144, 4096, 1)  # llama-8b's q|k|v: 196,608 blocks
    assert not geo.quantizes_in_mv(WT_Q4_1, 3072, 2048, 1)  # llama-1b's: 49,152 (6% slower)
    assert geo.quantizes_in_mv(WT_Q4_0, 1024, 1024, 1)  # 256 row groups x 32 blocks = 8,192
    assert not geo.quantizes_in_mv(WT_Q4_0, 1028, 1024, 1)
    assert not geo.quantizes_in_mv(WT_F16, 960, 576, 1)
    assert not Geometry({"GEMV_MMA_Q": 1}).quantizes_in_mv(WT_Q4_0, 960, 576, 1)
    assert not Geometry({"GEMV_QX": 0}).quantizes_in_mv(WT_Q4_1, 960, 576, 1)
    assert not Geometry({"GEMV_QX_MAX": 4000}).quantizes_in_mv(WT_Q4_1, 960, 576, 1)
    assert Geometry({"GEMV_QX_MAX": 50000}).quantizes_in_mv(WT_Q4_1, 3072, 2048, 1)
    assert geo.launch(WT_Q4_1, 960, 576, 1, "store", norm=True, qx=True)[0] == (
        "gemv_q4_1_r1_store_norm_qx"
    )
    assert geo.launch(WT_Q8_0, 576, 1536, 1, "add", qx=True)[:2] == ("gemv_q8_0_r1_add_qx", (72, 1))
    for wt, rows in ((WT_F16, 1), (WT_Q4_1, 2)):
        with pytest.raises(ValueError, match="float-input"):
            geo.launch(wt, 960, 576, rows, "store", qx=True)
    with pytest.raises(ValueError, match="RMSNorm in"):
        geo.launch(WT_Q4_1, 960, 576, 1, "add", norm=True, qx=True)


def test_runner_switches_from_the_environment() -> None:
    assert env_flag("SPARKBOARD_NORM_IN_MV", False, {}) is False
    assert env_flag("SPARKBOARD_NORM_IN_MV", False, {"SPARKBOARD_NORM_IN_MV": "1"}) is True
    assert env_flag("X", True, {"X": " 0 "}) is False
    with pytest.raises(ValueError, match="expected 0 or 1"):
        env_flag("SPARKBOARD_NORM_IN_MV", False, {"SPARKBOARD_NORM_IN_MV": "yes"})


def test_shared_memory_carveout_from_the_environment() -> None:
    assert env_carveout({}) is None  # the driver's choice per kernel
    assert env_carveout({"SPARKBOARD_SMEM_CARVEOUT": "0"}) == 0
    assert env_carveout({"SPARKBOARD_SMEM_CARVEOUT": " 100 "}) == 100
    for bad in ("101", "-1", "max", ""):
        with pytest.raises(ValueError, match="percent"):
            env_carveout({"SPARKBOARD_SMEM_CARVEOUT": bad})


def test_runner_tuning_knobs_from_the_environment() -> None:
    assert env_tuning("SPARKBOARD_ATTN_MIN_CHUNK", 32, 32, {}) == 32
    assert (
        env_tuning("SPARKBOARD_ATTN_MIN_CHUNK", 32, 32, {"SPARKBOARD_ATTN_MIN_CHUNK": "128"}) == 128
    )
    for bad in ("0", "48", "-32", "lots", ""):
        with pytest.raises(ValueError, match="SPARKBOARD_ATTN_MIN_CHUNK"):
            env_tuning("SPARKBOARD_ATTN_MIN_CHUNK", 32, 32, {"SPARKBOARD_ATTN_MIN_CHUNK": bad})
    one = "SPARKBOARD_ATTN_ONE_SPLIT"  # 0 turns the short step off
    assert env_tuning(one, 256, 32, {one: "0"}, zero=True) == 0
    assert env_tuning(one, 256, 32, {}, zero=True) == 256
    for bad in ("-1", "100", "x"):
        with pytest.raises(ValueError, match="0 or a positive multiple of 32"):
            env_tuning(one, 256, 32, {one: bad}, zero=True)


def test_one_split_rows_scale_with_the_head_dim() -> None:
    """A one-split block's work is positions x head dim: the knob holds at head dim 64."""
    assert [one_split_positions(256, hd) for hd in (16, 32, 64, 128)] == [1024, 512, 256, 128]
    assert one_split_positions(0, 64) == 0  # the knob's off switch
    assert one_split_positions(32, 128) == 0  # half a tile rounds down: no row is short


def test_attention_ring_shared_bytes() -> None:
    """A decode attention split's dynamic shared memory: per warp (ATT_WARPS, 8 by default),
    ATT_STAGES K and V sub-tiles of 16 positions, rows padded by 8 halves, which the warps'
    partials (8 heads at most) reuse; a ring needs two stages at least, and a block that would
    need more shared memory than the card grants is refused."""
    assert Geometry({}).attn_shared_bytes(128) == 8 * 2 * 2 * 16 * 136 * 2
    assert Geometry({}).attn_block() == (8 * 32,)
    assert Geometry({"ATT_WARPS": 4}).attn_shared_bytes(64) == 4 * 2 * 2 * 16 * 72 * 2
    assert Geometry({"ATT_WARPS": 4}).attn_block() == (128,)
    for warps in (1, 4, 8):
        for hd in (16, 32, 64, 128):  # the partials fit where the rings were
            g = Geometry({"ATT_WARPS": warps})
            assert g.attn_shared_bytes(hd) >= warps * 8 * (hd + 2) * 4
    assert Geometry({"ATT_WARPS": 4, "ATT_STAGES": 4}).attn_shared_bytes(128) <= 227 * 1024
    with pytest.raises(ValueError, match="attn_split_128 would need"):
        Geometry({"ATT_STAGES": 4})  # 8 warps of 4 stages at head dim 128: 272 KiB
    with pytest.raises(ValueError, match="ATT_STAGES"):
        Geometry({"ATT_STAGES": 1})
    for warps in (0, 33):
        with pytest.raises(ValueError, match="ATT_WARPS"):
            Geometry({"ATT_WARPS": warps})


def test_attention_constants_match_the_kernel_source() -> None:
    """The decode attention's shared-memory size and rope_kv's block follow geometry's copies
    of the kernels' constants (ATT_WARPS, a tuning define, is checked with the other defaults
    by test_python_defaults_match_the_kernel_sources)."""
    from engine.cuda import geometry

    kernels = Path(__file__).resolve().parents[2] / "kernels"
    for file, name, cu_name in [
        ("attention.cu", "ATT_GMAX", "GMAX"), ("attention.cu", "ATT_SUB", "ATT_SUB"),
        ("layers.cu", "ROPE_WARPS", "ROPE_WARPS"),
    ]:  # fmt: skip
        found = re.findall(rf"#define {cu_name} (\d+)", (kernels / file).read_text())
        assert found == [str(getattr(geometry, name))], name


def test_prefill_attention_geometry() -> None:
    """A block per 16 * PF_WARPS queries of a head, two stages of a K and a V tile of 64
    padded rows in dynamic shared memory."""
    grid, block, shared = Geometry({}).prefill_attention(128, 4096, 32)
    assert (grid, block, shared) == ((64, 32), (128,), 2 * 2 * 64 * 136 * 2)
    grid, block, _ = Geometry({"PF_WARPS": 8}).prefill_attention(64, 200, 9)
    assert (grid, block) == ((2, 9), (256,))


def test_every_kernel_triggers_its_dependants_only_after_its_own_wait() -> None:
    """The decode attention reads the step's constants (lengths, earlier cache positions)
    before griddepcontrol.wait, which is safe only while every kernel of a decode step
    triggers its successor after its own wait: then, when a kernel starts, every kernel but
    its predecessor has completed (kernels/common.cuh). A trigger moved before a wait would
    let those reads race the previous step's writes. Checked per top-level definition of the
    sources, in text order (a kernel's body function included)."""
    kernels = Path(__file__).resolve().parents[2] / "kernels"
    starts = re.compile(r"^(?:template\b|extern \"C\"|__global__|__device__)", re.M)
    checked = 0
    for path in sorted(kernels.glob("*.cu")):
        text = re.sub(r"//[^\n]*", "", path.read_text())  # comments name them too
        bounds = [m.start() for m in starts.finditer(text)] + [len(text)]
        for a, b in zip(bounds, bounds[1:], strict=False):
            chunk = text[a:b]
            trigger = chunk.find("pdl_trigger()")
            if trigger < 0:
                continue
            wait = chunk.find("pdl_wait()")
            assert 0 <= wait < trigger, f"{path.name}: {chunk[:80]!r} triggers before it waits"
            checked += 1
    assert checked >= 8  # the decode step's kernels: mat-vecs, norms, attention, argmax, ...
