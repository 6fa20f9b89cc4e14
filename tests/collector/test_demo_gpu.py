"""The GPU demo round and the H200 A/A rounds in data/demo/gpu: the manifests are valid, every
patch applies at the main commit the round was measured at (the conflicting one conflicts), and
the A/A rounds measure main against itself. The rounds themselves run on the H200 (data/demo/gpu/README.md); their results
are checked where they are published (tests/collector/test_published.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.manifest import load_manifest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "data" / "demo" / "gpu"
DEMO = GPU / "gpu.toml"
AA = sorted(GPU.glob("aa-h200-*.toml"))


def test_gpu_demo_covers_every_case_on_the_gpu_profile() -> None:
    loaded = load_manifest(DEMO)
    m = loaded.manifest
    assert m.profile == "gpu" and all(p.expect for p in m.pr)
    expects = [p.expect for p in m.pr]
    for label in ("REJECT", "harness-touched", "needs-rebase", "none"):
        assert label in expects
    assert any(e in ("XS", "S", "M", "L", "XL") for e in expects), "a genuine speedup"
    targets = {t for p in m.pr for t in p.targets}
    assert {"llama-1b:f16", "llama-8b:q4_0", "smollm2-135m"} <= targets
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
        files = [
            line.split(" b/", 1)[1]
            for line in patch.read_text().splitlines()
            if line.startswith("diff --git ")
        ]
        if p.expect != "harness-touched":
            assert all(f.startswith(("kernels/", "engine/cuda/")) for f in files), files


@pytest.mark.parametrize("path", [DEMO, *AA], ids=lambda p: p.name)
def test_manifest_check_command(path: Path) -> None:
    res = CliRunner().invoke(main, ["manifest", "check", str(path)])
    assert res.exit_code == 0, res.output


def test_aa_rounds_of_main_against_itself_cover_every_gpu_model() -> None:
    assert len(AA) >= 3
    rounds = set()
    gpu_models = {"llama-1b:f16", "llama-8b:q4_0", "smollm2-135m"}
    for path in AA:
        m = load_manifest(path).manifest
        rounds.add(m.round)
        assert m.profile == "gpu" and m.kind == "aa"
        (pr,) = m.pr
        assert pr.ref == m.base_ref and pr.expect == "none"
        # every gpu model targeted, or (aa4) targeted and guarded: all measured
        assert set(pr.targets) <= gpu_models and pr.targets
    assert len(rounds) == len(AA)
