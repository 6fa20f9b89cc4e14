"""The GPU demo rounds and the H200 A/A rounds in data/demo/gpu: the manifests are valid, every
patch applies at the main commit its round pins (the conflicting one conflicts) and is what
make_patches.py writes, and the A/A rounds measure main against itself. The rounds themselves run
on the H200 (data/demo/gpu/README.md); the published ones are checked where they are published
(tests/collector/test_published.py)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "data" / "demo" / "gpu"
DEMO = GPU / "gpu.toml"
GATES = GPU / "gates-h200.toml"  # round 2026-12-01-h200-gates: PRs 301-307, not measured yet
SEALED = GPU / "gates-h200-sealed.toml"  # the gates round's PRs against HEAD, sealed sessions
SEALED_AGAIN = GPU / "gates-h100-sealed.toml"  # the same, measured again under later sessions
AA = sorted(GPU.glob("aa-h200-*.toml"))
GPU_MODELS = {"llama-1b:f16", "llama-8b:q4_0", "smollm2-135m"}


def changed_files(patch: Path) -> list[str]:
    return [
        line.split(" b/", 1)[1]
        for line in patch.read_text().splitlines()
        if line.startswith("diff --git ")
    ]


def test_gpu_demo_covers_every_case_on_the_gpu_profile() -> None:
    loaded = load_manifest(DEMO)
    m = loaded.manifest
    assert m.profile == "gpu" and all(p.expect for p in m.pr)
    expects = [p.expect for p in m.pr]
    for label in ("REJECT", "harness-touched", "needs-rebase", "none"):
        assert label in expects
    assert any(e in ("XS", "S", "M", "L", "XL") for e in expects), "a genuine speedup"
    targets = {t for p in m.pr for t in p.targets}
    assert targets >= GPU_MODELS
    assert set(loaded.patches) == {p.number for p in m.pr}


def test_gpu_patches_change_the_cuda_backend_and_apply_at_the_round_main(applies_to_head) -> None:  # noqa: ANN001
    loaded = load_manifest(DEMO)
    main_commit = loaded.manifest.base_ref
    assert len(main_commit) == 40, "the published round is pinned to the main it was measured at"
    for p in loaded.manifest.pr:
        patch = loaded.patches[p.number]
        ok, why = applies_to_head(patch, main_commit)
        if p.expect == "needs-rebase":
            assert not ok, f"PR #{p.number} should conflict with main but applies"
            continue
        assert ok, f"PR #{p.number}: {why} (run data/demo/gpu/make_patches.py)"
        files = changed_files(patch)
        if p.expect != "harness-touched":
            assert all(f.startswith(("kernels/", "engine/cuda/")) for f in files), files


def test_gates_round_covers_the_new_gates_on_the_gpu_profile() -> None:
    loaded = load_manifest(GATES)
    m = loaded.manifest
    assert m.profile == "gpu" and m.kind == "round" and m.round == "2026-12-01-h200-gates"
    assert [p.number for p in m.pr] == list(range(301, 308))
    assert all(p.expect for p in m.pr), "every PR says the verdict it should get"
    expects = [p.expect for p in m.pr]
    assert expects.count("REJECT") == 6
    assert any(e in ("XS", "S", "M", "L", "XL") for e in expects), "a legitimate speedup"
    for p in m.pr:  # llama-1b:f16 targeted, so the other two gpu models are the guards
        assert p.targets == ["llama-1b:f16"], p.number
    assert set(loaded.patches) == {p.number for p in m.pr}


def test_gates_patches_touch_only_cuda_and_apply_at_their_main(applies_to_head) -> None:  # noqa: ANN001
    loaded = load_manifest(GATES)
    main_commit = loaded.manifest.base_ref
    assert len(main_commit) == 40, "the patches are written against one pinned main commit"
    r = subprocess.run(["git", "cat-file", "-e", f"{main_commit}^{{commit}}"], cwd=ROOT)
    assert r.returncode == 0, f"{main_commit} is not a commit of this repository"
    for p in loaded.manifest.pr:
        patch = loaded.patches[p.number]
        ok, why = applies_to_head(patch, main_commit)
        assert ok, f"PR #{p.number}: {why} (run data/demo/gpu/make_patches.py --round gates)"
        files = changed_files(patch)
        assert files and all(f.startswith(("kernels/", "engine/cuda/")) for f in files), files


def test_committed_gpu_patches_are_what_make_patches_writes() -> None:
    spec = importlib.util.spec_from_file_location("gpu_demo_patches", GPU / "make_patches.py")
    assert spec and spec.loader
    mp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mp)
    older = {"206-conflicts": (mp.RUN, mp.CONFLICT_BASE_COMMIT)}
    for patches, base in ((mp.PATCHES, mp.ROUND_MAIN), (mp.GATES_PATCHES, mp.GATES_MAIN)):
        for name, edits in patches.items():
            written = mp._cpu.make(name, edits, older.get(name), base)
            assert (GPU / "patches" / f"{name}.patch").read_text() == written, name


def test_sealed_gates_round_is_the_gates_prs_against_head_and_main_itself() -> None:
    """gates-h200-sealed.toml: the gates round's PRs but 303, each patch what make_patches.py
    writes against HEAD (so an edit main has moved under fails here, not on the device), each
    touching the CUDA backend only; main itself (#1) is the honest PR every gate must pass."""
    spec = importlib.util.spec_from_file_location("gpu_demo_patches", GPU / "make_patches.py")
    assert spec and spec.loader
    mp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mp)
    loaded = load_manifest(SEALED)
    m = loaded.manifest
    assert m.profile == "gpu" and m.kind == "round" and m.base_ref == "HEAD"
    assert [p.number for p in m.pr] == [1, 301, 302, 304, 305, 306, 307]
    assert [p.expect for p in m.pr] == ["none"] + ["REJECT"] * 6
    assert all(p.targets == ["llama-1b:f16"] for p in m.pr)
    assert set(loaded.patches) == {p.number for p in m.pr if p.number != 1}
    for name, edits in mp.SEALED_GATES_PATCHES.items():
        written = mp._cpu.make(name, edits, None, "HEAD")
        path = GPU / "patches" / "sealed" / f"{name}.patch"
        assert path.read_text() == written, f"{name}: run make_patches.py --round sealed"
        files = changed_files(path)
        assert files and all(f.startswith(("kernels/", "engine/cuda/")) for f in files), files
    # its re-run under a new round id (gates-h100-sealed.toml) is the same round, word for word
    again = load_manifest(SEALED_AGAIN).manifest
    assert again.round != m.round
    assert again.model_dump(exclude={"round"}) == m.model_dump(exclude={"round"})


@pytest.mark.parametrize("path", [DEMO, GATES, SEALED, SEALED_AGAIN, *AA], ids=lambda p: p.name)
def test_manifest_check_command(path: Path) -> None:
    res = CliRunner().invoke(main, ["manifest", "check", str(path)])
    assert res.exit_code == 0, res.output


def test_aa_rounds_of_main_against_itself_cover_every_gpu_model() -> None:
    assert len(AA) >= 3
    rounds = set()
    for path in AA:
        m = load_manifest(path).manifest
        rounds.add(m.round)
        assert m.profile == "gpu" and m.kind == "aa"
        (pr,) = m.pr
        assert pr.ref == m.base_ref and pr.expect == "none"
        # every gpu model targeted, or (aa4) targeted and guarded: all measured
        assert set(pr.targets) <= GPU_MODELS and pr.targets
    assert len(rounds) == len(AA)
