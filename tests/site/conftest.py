"""A small synthetic database and the site built from it, shared by the site tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import synthetic_round as synthetic
from sitegen.build import build_site


@pytest.fixture(scope="session")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic.generate(
        tmp_path_factory.mktemp("db") / "sb.duckdb", prs=60, rounds=3, aa_rounds=2
    )


@pytest.fixture(scope="session")
def built(small_db: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(docs folder, site folder) of one build of `small_db`."""
    base = tmp_path_factory.mktemp("site")
    docs, out = base / "docs", base / "out"
    build_site(small_db, out, docs_dir=docs, log=lambda _msg: None)
    return docs, out
