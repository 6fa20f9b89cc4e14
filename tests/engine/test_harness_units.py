"""The bench-protocol measurement logic against small fake runners (no model, no subprocess)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np
import pytest

from engine.config import ModelConfig
from engine.errors import EngineError
from engine.harness import common as harness_io
from engine.harness.common import cycled, parse_int_list, write_document
from engine.harness.protocol import parse_document
from engine.harness.score import check_prefix, log_softmax, read_tokens_file, score_tokens
from engine.runner import Runner

VOCAB = 40
DIM = 8


class FakeRunner(Runner):
    """A deterministic toy model: a decaying sum of token embeddings, projected to logits.

    Logits at a position depend on every token before it, so feeding tokens in a different
    order or at the wrong offset changes them. Both paths compute each position with the same
    float32 recurrence, so a correct runner agrees with itself exactly.
    """

    backend = "numpy"

    def __init__(self, max_context: int = 512) -> None:
        self.config = ModelConfig(
            arch="llama", n_layers=1, dim=DIM, ffn_dim=DIM, n_heads=1, n_kv_heads=1,
            head_dim=DIM, vocab_size=VOCAB, max_context=max_context, rope_base=1e4,
            norm_eps=1e-5, tied_embeddings=False, qk_norm=False,
        )  # fmt: skip
        rng = np.random.default_rng(0)
        self.embed = rng.standard_normal((VOCAB, DIM)).astype(np.float32)
        self.out = (rng.standard_normal((DIM, VOCAB)) * 2.0).astype(np.float32)
        self.seqs: list[list[int]] = []
        self.state: list[np.ndarray] = []
        self.max_len = 0

    def reset(self, n_seqs: int, max_len: int) -> None:
        self.seqs = [[] for _ in range(n_seqs)]
        self.state = [np.zeros(DIM, dtype=np.float32) for _ in range(n_seqs)]
        self.max_len = max_len

    def seq_len(self, seq: int) -> int:
        return len(self.seqs[seq])

    def truncate(self, seq: int, length: int) -> None:
        kept = self.seqs[seq][:length]
        self.reset_seq(seq)
        for t in kept:
            self._step(seq, t)

    def reset_seq(self, seq: int) -> None:
        self.seqs[seq] = []
        self.state[seq] = np.zeros(DIM, dtype=np.float32)

    def _step(self, seq: int, token: int) -> np.ndarray:
        assert len(self.seqs[seq]) < self.max_len, "KV cache overflow"
        self.seqs[seq].append(int(token))
        self.state[seq] = np.float32(0.7) * self.state[seq] + self.embed[int(token)]
        return self.state[seq] @ self.out

    def prefill(self, seq: int, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray:
        rows = np.stack([self._step(seq, int(t)) for t in tokens])
        return rows if all_logits else rows[-1]

    def decode(self, seqs: Sequence[int], tokens: np.ndarray) -> np.ndarray:
        return np.stack([self._step(s, int(t)) for s, t in zip(seqs, tokens, strict=True)])


class OffByOnePrefill(FakeRunner):
    """A broken batched path: every row of all_logits is the previous position's."""

    def prefill(self, seq: int, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray:
        rows = super().prefill(seq, tokens, all_logits=True)
        shifted = np.concatenate([rows[:1], rows[:-1]])
        return shifted if all_logits else rows[-1]


class LosesTokens(FakeRunner):
    """Concurrent decode that stops sequence 0 early and reports -1 for the missing ids."""

    def decode_greedy(self, seqs: Sequence[int], tokens: np.ndarray, steps: int) -> np.ndarray:
        out = super().decode_greedy(seqs, tokens, steps)
        out[steps // 2 :, 0] = -1
        return out


def corpus(n: int = 300) -> list[int]:
    return [int(x) for x in np.random.default_rng(1).integers(0, VOCAB, n)]


# --- sweep and concurrent ------------------------------------------------------------------


def test_score_positions_match_a_direct_teacher_forced_pass() -> None:
    runner = FakeRunner()
    tokens = corpus(30)
    positions = score_tokens(runner, tokens, topk=5, chunk=7)  # several chunks
    assert len(positions) == len(tokens) - 1
    ref = FakeRunner()
    ref.reset(1, 64)
    expected = log_softmax(ref.prefill(0, np.array(tokens[:-1]), all_logits=True), "ref")
    for i, p in enumerate(positions):
        assert p.argmax == int(np.argmax(expected[i]))
        assert p.target_logprob == pytest.approx(expected[i][tokens[i + 1]], abs=1e-12)
        lps = [lp for _, lp in p.topk]
        assert lps == sorted(lps, reverse=True) and len(p.topk) == 5
        assert all(lp <= 0 for lp in lps)
        assert p.topk[0][0] == p.argmax
        if tokens[i + 1] == p.argmax:
            assert p.target_logprob == p.topk[0][1]
    assert score_tokens(FakeRunner(), tokens, topk=5, chunk=256) == positions


def test_log_softmax_refuses_non_finite_logits() -> None:
    with pytest.raises(harness_io.EngineOutputError):
        log_softmax(np.array([[0.0, np.nan]]), "here")
    lp = log_softmax(np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32), "x")
    assert np.all(lp <= 0) and np.exp(lp).sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2", "not valid JSON"),
        ('{"a": 1}', "JSON list of integer"),
        ("[1, 2.5]", "JSON list of integer"),
        ("[true, 2]", "JSON list of integer"),
        ("[3]", "at least 2"),
    ],
)
def test_tokens_file_must_be_a_list_of_ids(tmp_path, content: str, message: str) -> None:
    f = tmp_path / "t.json"
    f.write_text(content)
    with pytest.raises(EngineError, match=message):
        read_tokens_file(str(f))


def test_tokens_file_missing(tmp_path) -> None:
    with pytest.raises(EngineError, match="cannot read"):
        read_tokens_file(str(tmp_path / "absent.json"))


# --- prefill-check -------------------------------------------------------------------------


def test_prefill_check_of_a_consistent_runner_agrees() -> None:
    check = check_prefix(FakeRunner(), cycled(corpus(), 40), prefix=24, positions=16)
    assert check.top1 == 1.0
    assert check.kl_mean == pytest.approx(0.0, abs=1e-9) and check.kl_max < 1e-9


def test_prefill_check_catches_a_wrong_batched_path() -> None:
    check = check_prefix(OffByOnePrefill(), cycled(corpus(), 40), prefix=24, positions=16)
    assert check.top1 < 0.5
    assert check.kl_mean > 0.5


def test_prefill_check_compares_the_positions_right_after_the_prefix() -> None:
    """Only rows prefix..prefix+positions-1 count: a path wrong before them is not blamed,
    one wrong at the first compared row is."""

    class WrongRow(FakeRunner):
        def __init__(self, row: int) -> None:
            super().__init__()
            self.row = row

        def prefill(self, seq: int, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray:
            rows = super().prefill(seq, tokens, all_logits=True).copy()
            rows[self.row] = rows[self.row][::-1]
            return rows if all_logits else rows[-1]

    ids = cycled(corpus(), 30)
    assert check_prefix(WrongRow(19), ids, prefix=20, positions=10).kl_max < 1e-9
    assert check_prefix(WrongRow(20), ids, prefix=20, positions=10).kl_max > 0.1
    assert check_prefix(WrongRow(29), ids, prefix=20, positions=10).kl_max > 0.1


# --- plumbing ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "128,", "a,2", "0,4", "-1", "4,4", " , "])
def test_bad_int_lists_are_refused(text: str) -> None:
    with pytest.raises(EngineError, match="bad ctx list"):
        parse_int_list(text, "ctx")


def test_int_lists() -> None:
    assert parse_int_list("128, 512,4096", "ctx") == [128, 512, 4096]


def test_cycled_wraps_and_offsets() -> None:
    assert cycled([1, 2, 3], 7).tolist() == [1, 2, 3, 1, 2, 3, 1]
    assert cycled([1, 2, 3], 4, offset=2).tolist() == [3, 1, 2, 3]


def _sample_document():
    from engine.harness.protocol import PrefillCheckResult, PrefixCheck

    return PrefillCheckResult(
        model="tiny",
        model_id="fake",
        engine_commit="unknown",
        device=harness_io.describe_device("numpy"),
        started_at=harness_io.utc_now_iso(),
        wall_s=0.5,
        prefixes=[PrefixCheck(prefix=8, positions=4, top1=1.0, kl_mean=0.0, kl_max=0.0)],
    )


def test_write_document_round_trips(tmp_path) -> None:
    out = tmp_path / "doc.json"
    write_document(_sample_document(), str(out))
    assert parse_document(out.read_text(), "prefill-check") == _sample_document().model_copy(
        update={"started_at": json.loads(out.read_text())["started_at"]}
    )
    assert os.listdir(tmp_path) == ["doc.json"]


def test_a_failed_write_leaves_no_partial_file(tmp_path, monkeypatch) -> None:
    out = tmp_path / "doc.json"
    out.write_text("previous complete document")

    def crash(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(harness_io.os, "fsync", crash)
    with pytest.raises(EngineError, match="disk full"):
        write_document(_sample_document(), str(out))
    assert out.read_text() == "previous complete document"
    assert os.listdir(tmp_path) == ["doc.json"]


def test_engine_commit_is_a_hash_or_unknown() -> None:
    commit = harness_io.engine_commit()
    assert commit == "unknown" or (len(commit) == 40 and int(commit, 16) >= 0)


def test_device_info_on_the_cpu() -> None:
    info = harness_io.describe_device("numpy")
    assert info.backend == "numpy" and info.name
    assert info.runtime == f"numpy {np.__version__}"


def test_extra_bench_commands_register_when_their_module_imports(monkeypatch) -> None:
    import sys
    import types

    import click

    from engine.harness import bench as bench_module

    with_register = types.ModuleType("fake_roofline")

    @click.command(name="roofline")
    def roofline() -> None:
        """Fake."""

    with_register.register = lambda group: group.add_command(roofline)
    plain = types.ModuleType("fake_peers")

    @click.command(name="peers")
    def peers() -> None:
        """Fake."""

    peers.callback.__module__ = "fake_peers"
    plain.peers = peers
    monkeypatch.setitem(sys.modules, "fake_roofline", with_register)
    monkeypatch.setitem(sys.modules, "fake_peers", plain)
    monkeypatch.setattr(
        bench_module,
        "EXTRA_COMMAND_MODULES",
        ("fake_roofline", "fake_peers", "engine.no_such_module_here"),
    )
    group = click.Group(name="g")
    bench_module._register_extra_commands(group)
    assert sorted(group.commands) == ["peers", "roofline"]


def test_nvidia_driver_version_is_read_from_proc(tmp_path) -> None:
    from engine.harness.device_info import cpu_model_name, nvidia_kernel_driver

    f = tmp_path / "version"
    f.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.82.07  Release Build  "
        "(dvs-builder@U22)  Wed Jul 23 2025\nGCC version:  gcc version 12.3.0\n"
    )
    assert nvidia_kernel_driver(f) == "580.82.07"
    f.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 2024\n")
    assert nvidia_kernel_driver(f) == "550.54.15"
    assert nvidia_kernel_driver(tmp_path / "absent") is None
    cpu = tmp_path / "cpuinfo"
    cpu.write_text("processor\t: 0\nmodel name\t: AMD EPYC   9654 96-Core Processor\n")
    assert cpu_model_name(cpu) == "AMD EPYC 9654 96-Core Processor"


def test_score_rows_ties_and_a_topk_as_large_as_the_vocab() -> None:
    from engine.harness.score import score_rows

    logits = np.array([[1.0, 3.0, 3.0, -2.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    rows = score_rows(logits, [2, 3], topk=4, where="test")
    ref = log_softmax(logits, "ref")
    assert rows[0].argmax == 1  # the smaller id among equal maxima
    assert [i for i, _ in rows[0].topk] == [1, 2, 0, 3]
    assert rows[0].target_logprob == pytest.approx(ref[0, 2], abs=1e-15)
    assert [i for i, _ in rows[1].topk] == [0, 1, 2, 3]
    assert rows[1].target_logprob == pytest.approx(np.log(0.25), abs=1e-15)
    assert [lp for _, lp in rows[1].topk] == pytest.approx([np.log(0.25)] * 4, abs=1e-15)


def test_score_rows_in_row_blocks_match_each_row_alone_in_either_memory_order() -> None:
    """score_rows works LSE_ROWS rows at a time in reused buffers: every row's log-probs equal
    the log-softmax of that row alone, bit for bit, for row- and column-major logits and a
    block count that does not divide the rows."""
    from engine.harness.score import LSE_ROWS, score_rows

    rng = np.random.default_rng(5)
    n = 2 * LSE_ROWS + 3
    logits = (rng.standard_normal((n, 3000)) * 6).astype(np.float32)
    targets = [int(t) for t in rng.integers(0, 3000, n)]
    got = score_rows(logits, targets, topk=8, where="test")
    assert score_rows(np.asfortranarray(logits), targets, topk=8, where="test") == got
    for r in (0, LSE_ROWS, n - 1):
        alone = log_softmax(logits[r : r + 1], "ref")[0]
        assert got[r].target_logprob == min(float(alone[targets[r]]), 0.0)
        assert [lp for _, lp in got[r].topk] == [float(alone[i]) for i, _ in got[r].topk]


def test_the_engine_sends_a_prefills_digests_only_when_the_parent_asks() -> None:
    """serve.py answers a prefill with its argmax, then waits for `more` before it computes the
    digests: on a core it shares with the parent it must not work while the parent reads its
    clock. Anything but `more` there breaks the protocol."""
    import select
    import threading

    from engine.harness.serve import Server
    from engine.harness.wire import pack_ids, recv, send

    def serving() -> tuple[int, int, threading.Thread, list]:
        ctl_r, ctl_w = os.pipe()
        rep_r, rep_w = os.pipe()
        errors: list = []

        def run() -> None:
            try:
                Server(FakeRunner(), ctl_r, rep_w).serve()
            except Exception as e:  # noqa: BLE001 (the test reads it)
                errors.append(e)
            finally:
                os.close(rep_w)  # the parent's read ends instead of waiting

        t = threading.Thread(target=run, daemon=True)
        t.start()
        assert recv(rep_r)["vocab"] == VOCAB
        send(ctl_w, {"op": "reset", "n_seqs": 2, "max_len": 8})
        assert recv(rep_r) == {"ok": True}
        ids = np.arange(2 * 5, dtype=np.int64) % VOCAB
        send(ctl_w, {"op": "prefill", "seqs": [0, 1], "ids": pack_ids(ids), "n": 5})
        assert len(recv(rep_r)["argmax"]) == 2
        return ctl_w, rep_r, t, errors

    ctl_w, rep_r, t, errors = serving()
    assert select.select([rep_r], [], [], 0.3)[0] == []  # nothing more until asked
    send(ctl_w, {"op": "more"})
    assert len(recv(rep_r)["topk"]) == 2
    send(ctl_w, {"op": "quit"})
    assert recv(rep_r) == {"ok": True}
    t.join(5)

    ctl_w, rep_r, t, errors = serving()
    send(ctl_w, {"op": "reset", "n_seqs": 1, "max_len": 8})
    t.join(5)
    assert not t.is_alive() and "expected the parent's 'more'" in str(errors[0]), errors
