"""The mat-vec bench's variant names (engine/tools/gemvbench.py): a developer tool, but a
typo in a variant must fail before minutes of compiling, not measure the wrong kernels."""

from __future__ import annotations

import click
import pytest

from engine.tools.gemvbench import VARIANTS, _defines


def test_named_variants_and_define_lists() -> None:
    assert _defines("base") == {}
    assert _defines("k1") == VARIANTS["k1"]
    assert _defines("GEMV_KSPLIT=4+GEMV_WARPS=8") == {"GEMV_KSPLIT": 4, "GEMV_WARPS": 8}


@pytest.mark.parametrize("bad", ["bogus", "GEMV_KSPLIT", "GEMV_KSPLIT=", "GEMV_KSPLIT=-1", "1X=2"])
def test_an_unknown_variant_is_refused(bad: str) -> None:
    with pytest.raises(click.BadParameter, match="variant"):
        _defines(bad)
