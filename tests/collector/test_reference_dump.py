"""The committed llama.cpp reference dump (data/reference/) is a score document over the engine's
own token ids of the evaluation corpus, at the policy's top-k. Reads the file; runs no model."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.policy import load_policy
from engine.harness.common import DEFAULT_CORPUS, encode_text, read_text_file
from engine.harness.protocol import ScoreResult, parse_document
from engine.models import model_id, open_tokenizer

REFERENCE = (
    Path(__file__).resolve().parents[2] / "data" / "reference" / "smollm2-135m.llama-cpp.json"
)
MAX_BYTES = 2_000_000


@pytest.fixture(scope="module")
def reference() -> ScoreResult:
    doc = parse_document(REFERENCE.read_bytes(), "score")
    assert isinstance(doc, ScoreResult)
    return doc


def test_small_enough_to_commit() -> None:
    assert REFERENCE.stat().st_size < MAX_BYTES


def test_scores_the_engines_ids_of_the_corpus(reference: ScoreResult) -> None:
    ids = encode_text(open_tokenizer("smollm2-135m"), read_text_file(DEFAULT_CORPUS))
    assert reference.tokens == ids
    assert len(reference.positions) == len(ids) - 1


def test_says_it_is_llama_cpp_on_the_same_weights(reference: ScoreResult) -> None:
    assert reference.model == "smollm2-135m"
    assert reference.model_id.startswith(model_id("smollm2-135m"))
    assert "llama" in reference.model_id and "llama" in reference.engine_commit
    assert "llama.cpp" in reference.device.name


def test_topk_is_the_policys_and_ordered(reference: ScoreResult) -> None:
    assert reference.topk == load_policy().accuracy.topk
    for p in reference.positions:
        assert len(p.topk) == reference.topk
        lps = [lp for _, lp in p.topk]
        assert lps == sorted(lps, reverse=True)
        assert p.topk[0][0] == p.argmax  # argmax and top-k break ties the same way
