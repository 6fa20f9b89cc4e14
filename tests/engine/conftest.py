"""Engine test fixtures: the real SmolLM2 file, its tokenizer, the evaluation corpus."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "data" / "corpus.txt"


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    from engine.models import smollm2_path

    return smollm2_path()  # an EngineError with the install command when missing


@pytest.fixture(scope="session")
def smollm2_weights(smollm2_path: Path):  # noqa: ANN201
    from engine.models import load_weights

    return load_weights("smollm2-135m")


@pytest.fixture(scope="session")
def smollm2_runner(smollm2_weights):  # noqa: ANN001, ANN201
    from engine.numpy_backend import NumpyRunner

    return NumpyRunner(smollm2_weights)


@pytest.fixture(scope="session")
def tokenizer(smollm2_path: Path):  # noqa: ANN201
    from engine.models import open_tokenizer

    return open_tokenizer("smollm2-135m")


@pytest.fixture(scope="session")
def corpus_ids(tokenizer) -> np.ndarray:  # noqa: ANN001
    """Token ids of the evaluation corpus (or of a fallback text while it is absent)."""
    if CORPUS.exists():
        text = CORPUS.read_text(encoding="utf-8")
    else:
        text = (REPO / "engine" / "README.md").read_text(encoding="utf-8")
    return np.asarray(tokenizer.encode(text), dtype=np.int64)


@pytest.fixture(params=["none", "bwrap"])
def sandbox_kind(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each sandbox kind an engine runs in: unsealed, and bubblewrap where the box can make one."""
    from engine.harness.sandbox import Sandbox, SandboxError, probe

    if request.param == "bwrap":
        try:
            probe(Sandbox("bwrap"), tmp_path / "probe")
        except SandboxError as e:
            pytest.skip(f"this box cannot make a sandbox: {e}")
    return request.param
