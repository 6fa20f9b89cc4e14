"""The phase-boundary probe (engine/tools/phasebench.py) refuses what it cannot run before it
touches the GPU: a developer tool, but a bad argument must not cost a device call."""

from __future__ import annotations

import sys

from click.testing import CliRunner

from engine.tools.phasebench import main


def test_bad_arguments_are_refused_before_cupy_is_imported(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setitem(sys.modules, "cupy", None)  # importing it would fail loudly
    runner = CliRunner()
    for args in (["--layers", "0"], ["--type", "f16"], ["--reps", "0"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
    # a malformed define is a usage error too, not a traceback from the compiler's options
    monkeypatch.setenv("SPARKBOARD_KERNEL_DEFINES", "GEMV_KSPLIT=two")
    result = runner.invoke(main, [])
    assert result.exit_code == 2
    assert "SPARKBOARD_KERNEL_DEFINES" in result.output
