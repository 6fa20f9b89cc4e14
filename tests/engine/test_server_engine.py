"""Served engines (`bench sweep|concurrent --server llama.cpp`): main's server beside the PR's,
each in its sandbox, spoken to over a Unix socket, turn by turn, the PR's outputs held against
main's server. The servers here are tests/support/fake_llama_server.py (llama-server's API, a
hash for a model); `test_a_real_llama_server_...` runs llama.cpp's own where a build is given."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import REPO

from collector.judge.forgery import idle_problem, output_problem
from collector.policy import load_policy
from engine.cli_common import EXIT_BAD_OUTPUT, EXIT_BASELINE, EXIT_HARNESS
from engine.errors import EngineOutputError
from engine.harness.common import config_of
from engine.harness.protocol import (
    ConcurrentResult,
    LongContextResult,
    SweepResult,
    VerificationReport,
    parse_document,
)
from engine.harness.sandbox import Sandbox
from engine.harness.server_engine import ServerEngine, aligned_top_logprobs, server_kind
from engine.harness.server_verify import (
    PROBE_MIN,
    PROBE_PROMPTS,
    PROBE_TOKENS,
    decode_path_kl,
    probe_prompts,
)
from engine.harness.speed_session import joined_reports
from engine.harness.timing import EngineSpec, Sample

FAKE = REPO / "tests" / "support" / "fake_llama_server.py"
# the fakes run in the sandbox, which binds the system's folders: the system's python3
SYSTEM_PYTHON = Path("/usr/bin/python3")
pytestmark = pytest.mark.skipif(
    not SYSTEM_PYTHON.is_file(), reason="the fake servers need the system's /usr/bin/python3"
)
ENV = {"PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}


def fake_build(tmp_path: Path, name: str, mode: str = "honest", link: str = "") -> Path:
    """A "build" whose bin/llama-server is the fake server behaving as `mode` (`link`: a
    socket it links in place of its own)."""
    build = tmp_path / name
    (build / "bin").mkdir(parents=True)
    shutil.copy(FAKE, build / "bin" / "fake_llama_server.py")
    server = build / "bin" / "llama-server"
    server.write_text(
        "#!/bin/sh\n"
        f"SPARKBOARD_FAKE_MODE={mode} SPARKBOARD_FAKE_LINK={link} exec /usr/bin/python3 "
        '"$(dirname "$0")/fake_llama_server.py" "$@"\n'
    )
    server.chmod(0o755)
    return build


def served(
    tmp_path: Path,
    command: str,
    pr: Path,
    main: Path,
    sandbox: str,
    *args: str,
    model: str = "tiny",
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "engine.harness.bench", command, "--model", model]
    argv += ["--backend", "numpy", "--min-time", "0.01", "--server", "llama.cpp"]
    argv += ["--engine-checkout", str(pr), "--baseline-checkout", str(main), "--sandbox", sandbox]
    argv += [*args, "--out", str(tmp_path / "out.json")]
    return subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)


def sweep(tmp_path: Path, pr: Path, main: Path, sandbox: str) -> SweepResult:
    args = ("--ctx", "16,40", "--tokens", "4", "--reps", "2", "--prefill-tokens", "32")
    res = served(tmp_path, "sweep", pr, main, sandbox, *args)
    assert res.returncode == 0, res.stderr[-3000:]
    return parse_document((tmp_path / "out.json").read_bytes(), "sweep")  # type: ignore[return-value]


def test_a_served_engine_is_timed_beside_mains_and_verified_against_it(
    tmp_path: Path, sandbox_kind: str
) -> None:
    main, pr = fake_build(tmp_path, "main"), fake_build(tmp_path, "pr")
    doc = sweep(tmp_path, pr, main, sandbox_kind)
    base, m = doc.baseline, doc.measured
    assert base is not None and m.verification is not None
    for side in (doc, base):
        assert [c.ctx for c in side.contexts] == [16, 40]
        assert all(len(c.decode_tok_s) == len(c.prefill_tok_s) == 2 for c in side.contexts)
        assert all(v > 0 for c in side.contexts for v in c.decode_tok_s + c.prefill_tok_s)
    # every timed operation a region, labelled with its shape; the server's own figure beside it
    groups = set(m.timing.groups)
    assert {"prefill n=16 x2", "prefill n=40", "decode ctx=16 w=1", "decode ctx=40 w=1"} <= groups
    assert all(0 < own <= parent for parent, own in m.timing.regions)
    # the same model: every kept token and first token is main's greedy pick
    v = m.verification
    assert v.reference.startswith("main's server")
    assert v.decode_margins and set(v.decode_margins) == {0.0}
    assert v.prefill_margins and set(v.prefill_margins) == {0.0}
    assert max(v.prefill_kl) < 1e-9
    # the decode path of both servers, a few timed prompts continued one sequence at a time
    assert len(v.decode_kl) >= 2 and max(v.decode_kl) < 1e-9
    # main's own outputs of the session held against its server the same way (the judge's
    # reference of how far the procedure disagrees with itself)
    assert len(v.baseline_decode_margins) == len(v.decode_margins)
    assert set(v.baseline_decode_margins) == set(v.baseline_prefill_margins) == {0.0}
    # stopped between turns: an honest server uses nothing then
    assert len(m.idle.after_answer_s) > 8 and max(m.idle.while_stopped_s) < 0.005
    assert m.memory is not None and m.memory.host_peak > 0
    # verified beside main's server, before the engines stop: the phases still read in order
    names = ["engine_loaded", "warmed", "measured", "engine_stopped", "verified"]
    assert m.phases is not None and list(m.phases) == names
    ends = [m.phases[n] for n in names]
    assert ends == sorted(ends) and ends[-1] > ends[2]
    assert (m.sandbox == "none") if sandbox_kind == "none" else m.sandbox.startswith("bubblewrap")


def test_a_server_that_computes_something_else_shows_in_its_margins(tmp_path: Path) -> None:
    main, pr = fake_build(tmp_path, "main"), fake_build(tmp_path, "pr", mode="wrong")
    v = sweep(tmp_path, pr, main, "none").measured.verification
    assert v is not None
    # each token is off main's pick by more than any tie: one margin per token, each large
    assert v.decode_margins and min(v.decode_margins) > 1.0
    assert v.prefill_margins and min(v.prefill_margins) > 1.0


def test_a_numerics_bug_in_the_decode_path_alone_shows_in_its_kl(tmp_path: Path) -> None:
    """A server whose decode path (past a request's first token) computes other log-probs but
    the same greedy tokens: every timed token is main's pick and every prefill digest main's,
    so only the decode path's KL against main's server tells it, and the judge calls it so."""
    main, pr = fake_build(tmp_path, "main"), fake_build(tmp_path, "pr", mode="decodebug")
    doc = sweep(tmp_path, pr, main, "none")
    v = doc.measured.verification
    assert v is not None
    assert set(v.decode_margins) == {0.0} and set(v.prefill_margins) == {0.0}
    assert max(v.prefill_kl) < 1e-9
    assert v.decode_kl and min(v.decode_kl) > 1e-3 and sum(v.decode_kl) / len(v.decode_kl) > 0.05
    why = output_problem(doc, 0.995, 0.006, load_policy().forgery)
    assert why and "decode-path logits KL" in why and "prefill" not in why


def test_the_decode_probe_takes_timed_decodes_prompts_that_fit_their_slot() -> None:
    """Prompts of timed decodes only (a prefill's digest is checked as it is), each once, and
    only those whose slot has room to continue them: a server is never asked past its slot."""
    short, long = np.arange(20), np.arange(60)
    made = np.arange(4)
    groups = [
        [Sample(prompt=short, argmax=1)],
        [Sample(prompt=long, first=1, ids=made), Sample(prompt=short, first=2, ids=made)],
        [Sample(prompt=short, first=3, ids=made)],
    ]
    assert probe_prompts(groups, 60 + PROBE_MIN) == [list(short)]
    assert probe_prompts(groups, 61 + PROBE_MIN) == [list(long), list(short)]
    many = [[Sample(prompt=np.arange(i, i + 8), first=1, ids=made)] for i in range(9)]
    assert len(probe_prompts(many, 100)) == PROBE_PROMPTS


def test_the_decode_probe_compares_steps_of_one_context_and_log_probs_are_not_withheld() -> None:
    """Steps past the first while both continuations share their context; a step whose log-probs
    main's server sends for the same token is the PR's failure if its server withholds them or
    sends fewer (a way past the check otherwise); another token's withheld ones are skipped."""
    top = [(1, -0.1), (2, -2.5), (3, -4.0)]
    other = [(1, -0.3), (2, -1.5), (3, -4.0)]
    mains = [([5, 1, 1, 1], [top, top, top, top])]
    assert decode_path_kl(mains, [([5, 1, 1, 1], [top, top, top, top])]) == [0.0, 0.0, 0.0]
    kls = decode_path_kl(mains, [([5, 1, 2, 1], [top, other, top, top])])
    assert len(kls) == 2 and kls[0] > 0.01  # steps 1 and 2 compared; then the contexts part
    assert decode_path_kl(mains, [([5, 1, 7, 1], [top, top, None, top])]) == [0.0]
    for cut in (None, top[:1]):
        with pytest.raises(EngineOutputError, match="withheld or cut short"):
            decode_path_kl(mains, [([5, 1, 1, 1], [top, top, cut, top])])


def test_a_probability_of_zero_written_as_null_is_a_floor_not_a_failure(tmp_path: Path) -> None:
    main, pr = fake_build(tmp_path, "main"), fake_build(tmp_path, "pr", mode="nullprob")
    v = sweep(tmp_path, pr, main, "none").measured.verification
    assert v is not None and set(v.decode_margins) == {0.0} and set(v.prefill_margins) == {0.0}


def test_log_probs_withheld_inside_a_character_are_aligned_from_the_end() -> None:
    """llama-server sends no log-probs for a token that ends inside a UTF-8 character; the rows
    it sends belong to the tokens that complete one, matched from the last token back."""

    def row(i: int) -> dict:
        return {"id": i, "top_logprobs": [{"id": i, "logprob": -0.1}, {"id": 3, "logprob": None}]}

    # 11 and 22 end inside a character; 5 completes the first one, 7 the text; 22 at the end
    out = aligned_top_logprobs([11, 5, 22, 11, 7, 22], [row(5), row(7)], 100)
    assert [o is not None for o in out] == [False, True, False, False, True, False]
    assert out[1] == [(5, -0.1), (3, -1e4)]
    # a byte token twice in a row, the second completing it: the row is the second's
    assert [o is not None for o in aligned_top_logprobs([9, 9], [row(9)], 100)] == [False, True]
    assert aligned_top_logprobs([11], [], 100) == [None]
    for rows in ([row(8)], [row(5), row(5), row(5)], "x", [{"id": 5}], [{**row(5), "id": 5.0}]):
        with pytest.raises(ValueError):
            aligned_top_logprobs([11, 5], rows, 100)


def test_a_digest_is_withheld_only_where_mains_server_withholds_it(tmp_path: Path) -> None:
    """The fake servers withhold a byte token's log-probs as llama-server does: where main's does
    too, an honest PR's session verifies; a PR's server that sends none where main's sends them
    fails its session, and one that sends them where main's withholds them is held to main's
    token."""
    main = fake_build(tmp_path, "main")
    pr = fake_build(tmp_path, "allprobs", "allprobs")
    v = sweep(tmp_path, pr, main, "none").measured.verification
    assert v is not None and set(v.decode_margins) == {0.0} and set(v.prefill_margins) == {0.0}
    pr = fake_build(tmp_path, "noprobs", "noprobs")
    res = served(tmp_path, "sweep", pr, main, "none", "--ctx", "16", "--tokens", "2", "--reps", "1")
    assert res.returncode == EXIT_BAD_OUTPUT, res.stderr[-2000:]
    assert "withheld the log-probs of a first token that main's server sends" in res.stderr


@pytest.mark.timed
def test_a_server_that_works_when_not_its_turn_is_forged(tmp_path: Path) -> None:
    """Timed: the rule holds its CPU against the time it was watched idle (2 ms a turn), which
    only a core of its own makes the same on every box (tests/run_suite.py); honest beside it."""
    main, pr = fake_build(tmp_path, "main"), fake_build(tmp_path, "pr", mode="busy")
    rules = load_policy().forgery
    busy = sweep(tmp_path, pr, main, "none")
    why = idle_problem(busy, rules)
    assert why is not None and "it works while it is not its turn" in why
    honest = sweep(tmp_path, fake_build(tmp_path, "pr2"), main, "none")
    assert idle_problem(honest, rules) is None


def test_a_socket_linked_elsewhere_is_never_spoken_to(tmp_path: Path, sandbox_kind: str) -> None:
    """A PR's server that puts a link to another socket of the box (a daemon's, which may speak
    HTTP) in place of its own: the parent, root outside the sandbox, must not talk to it."""
    heard: list[bytes] = []
    decoy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    decoy.bind(str(tmp_path / "decoy.sock"))
    decoy.listen(8)
    decoy.settimeout(0.2)

    def listen() -> None:
        while not stop.is_set():
            try:
                conn, _ = decoy.accept()
            except OSError:
                continue
            conn.settimeout(1.0)
            with contextlib.suppress(OSError):
                heard.append(conn.recv(4096))
            conn.close()

    stop = threading.Event()
    t = threading.Thread(target=listen, daemon=True)
    t.start()
    try:
        main = fake_build(tmp_path, "main")
        pr = fake_build(tmp_path, "pr", link=str(tmp_path / "decoy.sock"))
        res = served(tmp_path, "sweep", pr, main, sandbox_kind, "--ctx", "16", "--reps", "1")
    finally:
        stop.set()
        t.join()
        decoy.close()
    assert res.returncode == EXIT_BAD_OUTPUT
    assert "put another process's socket in its place" in res.stderr
    assert not any(heard), heard  # connected, found out, closed: not a byte sent


def test_concurrent_requests_are_in_flight_together(tmp_path: Path) -> None:
    main, pr = fake_build(tmp_path, "main"), fake_build(tmp_path, "pr")
    args = ("--widths", "2,3", "--tokens", "3", "--runs", "2", "--prompt-len", "12")
    res = served(tmp_path, "concurrent", pr, main, "none", *args)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = parse_document((tmp_path / "out.json").read_bytes(), "concurrent")
    assert isinstance(doc, ConcurrentResult) and doc.baseline is not None
    assert [w.width for w in doc.widths] == [2, 3]
    assert {"decode ctx=12 w=2", "decode ctx=12 w=3"} <= set(doc.measured.timing.groups)
    v = doc.measured.verification
    assert v is not None and v.decode_margins and set(v.decode_margins) == {0.0}
    # the decode path probed one sequence at a time (4 prompts), then 3 at once (the slots;
    # the fake withholds the log-probs of 1 token in 11)
    assert 0 < len(v.decode_kl) <= PROBE_PROMPTS * (PROBE_TOKENS - 1)
    assert 0 < len(v.batched_decode_kl) <= 3 * (PROBE_TOKENS - 1)
    assert max(v.decode_kl) < 1e-9 and max(v.batched_decode_kl) < 1e-9


def test_unusable_answers_are_the_prs_and_a_missing_server_is_said(tmp_path: Path) -> None:
    main, pr = fake_build(tmp_path, "main"), fake_build(tmp_path, "pr", mode="garbage")
    res = served(tmp_path, "sweep", pr, main, "none", "--ctx", "16", "--tokens", "2", "--reps", "1")
    assert res.returncode == EXIT_BAD_OUTPUT
    assert "the server produced ids outside the vocabulary" in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = served(tmp_path, "sweep", empty, main, "none", "--ctx", "16", "--reps", "1")
    assert res.returncode == EXIT_BAD_OUTPUT
    assert "has no bin/llama-server in its build" in res.stderr
    argv = [sys.executable, "-m", "engine.harness.bench", "sweep", "--model", "tiny"]
    argv += ["--server", "llama.cpp", "--out", str(tmp_path / "x.json")]
    res = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=60)
    assert res.returncode == EXIT_HARNESS or res.returncode == 2
    assert "--server needs --engine-checkout and --baseline-checkout" in res.stderr
    argv = [sys.executable, "-m", "engine.harness.bench", "longctx", "--model", "tiny"]
    argv += ["--ctx", "64", "--memory-budget", "99999999", "--server", "llama.cpp"]
    argv += ["--engine-checkout", str(pr), "--out", str(tmp_path / "x.json")]
    res = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--server needs --engine-checkout and --baseline" in res.stderr


def test_the_long_context_check_of_a_served_engine(tmp_path: Path) -> None:
    """`bench longctx --server`: the PR's server alone under the budget (its data segment), one
    slot at the long context, then its outputs held against main's server; a server that holds
    more than the budget at that context dies, and the check fails (not the session)."""
    main = fake_build(tmp_path, "main")

    def longctx(pr: Path, budget_mib: int) -> LongContextResult:
        out = tmp_path / f"longctx-{pr.name}.json"
        argv = [sys.executable, "-m", "engine.harness.bench", "longctx", "--model", "tiny"]
        argv += ["--ctx", "300", "--tokens", "4", "--memory-budget", str(budget_mib * 2**20)]
        argv += ["--server", "llama.cpp", "--engine-checkout", str(pr), "--baseline-checkout"]
        argv += [str(main), "--sandbox", "none", "--out", str(out)]
        res = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        return parse_document(out.read_bytes(), "longctx")  # type: ignore[return-value]

    honest = longctx(fake_build(tmp_path, "honest"), 512)
    assert honest.completed and honest.failure is None and honest.prefill_tok_s
    v = honest.measured.verification if honest.measured else None
    assert v is not None and v.decode_margins == [0.0] * 4 and v.reference.startswith("main's")
    assert honest.measured and honest.measured.memory.host_peak  # read from outside
    hog = longctx(fake_build(tmp_path, "memhog", "memhog"), 512)
    assert not hog.completed and "within 512 MiB" in (hog.failure or "")
    assert "killed by signal" in hog.failure or "exited with code" in hog.failure


def _first_token_prompt(multiple_of_5: bool) -> list[int]:
    """A prompt whose greedy first token under the fake's model is (or is not) a multiple of 5:
    the fake `startbug` server fails (or answers) its generation."""
    spec = importlib.util.spec_from_file_location("fake_llama_server", FAKE)
    fake = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(fake)  # type: ignore[union-attr]
    for k in range(1, 1000):
        if (fake.log_probs([3, 1, 4, k], 1)[0] % 5 == 0) == multiple_of_5:
            return [3, 1, 4, k]
    raise AssertionError("no such prompt")


def test_a_failure_mains_server_shares_is_mains_and_one_of_its_own_is_the_prs(
    tmp_path: Path,
) -> None:
    """A request the PR's server answers unusably is asked of main's server too: where main's
    fails it as well (a bug both builds carry, which a fresh challenge happened to reach, as
    llama-server 0.3.35's chat parser and a generation that is not UTF-8), the failure is main's
    and the session is measured again; where main's answers, it is the PR's."""
    vocab = config_of("tiny").vocab_size
    buggy, honest = fake_build(tmp_path, "buggy", "startbug"), fake_build(tmp_path, "honest")

    def server(build: Path, baseline: bool) -> ServerEngine:
        home = tmp_path / f"home-{build.name}-{baseline}"
        home.mkdir()
        spec = EngineSpec(build, Sandbox("none"), home)
        kind, models = server_kind("llama.cpp"), tmp_path / "models"
        s = ServerEngine(spec, "tiny", kind, 1, 64, 1, baseline=baseline, models=models)
        s.connect(vocab)
        return s

    failing, answered = _first_token_prompt(True), _first_token_prompt(False)
    pr, mains = server(buggy, False), [server(buggy, True), server(honest, True)]
    try:
        pr.reset(1, 64)
        pr.prefill([0], [np.asarray(answered)], timed=False)  # answered: nothing to replay
        with pytest.raises(EngineOutputError, match="status 500"):
            pr.prefill([0], [np.asarray(failing)], timed=False)
        assert pr.asked is not None and pr.asked[0][0][1]["prompt"][-4:] == failing
        shared, own = (m.fails_too(pr.asked) for m in mains)
        assert shared is not None and "main's server answered unusably" in shared
        assert own is None
    finally:
        for s in (pr, *mains):
            s.close()


def test_a_session_ends_as_mains_failure_when_the_builds_share_the_bug(tmp_path: Path) -> None:
    """The whole session: both builds with the bug end it as main's (measured again, exit
    EXIT_BASELINE: the PR's when it reaches the bug first, main's own turn otherwise), the PR's
    build alone with it as the PR's (EXIT_BAD_OUTPUT)."""
    args = ("--ctx", "16,40", "--tokens", "4", "--reps", "2")
    both = fake_build(tmp_path, "main", "startbug"), fake_build(tmp_path, "pr", "startbug")
    res = served(tmp_path, "sweep", both[1], both[0], "none", *args)
    assert res.returncode == EXIT_BASELINE, res.stderr[-2000:]
    assert "main's server answered unusably" in res.stderr
    honest = fake_build(tmp_path, "honest")
    res = served(tmp_path, "sweep", both[1], honest, "none", *args)
    assert res.returncode == EXIT_BAD_OUTPUT, res.stderr[-2000:]
    assert "the server answered unusably" in res.stderr and "main's server" not in res.stderr


@pytest.mark.skipif(
    not os.environ.get("SPARKBOARD_LLAMA_BUILD"),
    reason="SPARKBOARD_LLAMA_BUILD (a llama.cpp build with bin/llama-server) is not set",
)
def test_a_real_llama_server_beside_itself(tmp_path: Path) -> None:
    build = Path(os.environ["SPARKBOARD_LLAMA_BUILD"])
    model = os.environ.get("SPARKBOARD_LLAMA_MODEL", "smollm2-135m")
    args = ("--ctx", "32,128", "--tokens", "8", "--reps", "2", "--server-threads", "1")
    res = served(tmp_path, "sweep", build, build, "bwrap", *args, model=model)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = parse_document((tmp_path / "out.json").read_bytes(), "sweep")
    v = doc.measured.verification
    assert v is not None and v.decode_margins and v.prefill_margins
    # main against itself: every token main's pick but a near-tie or two (another batch shape
    # or KV cell order sums in another order: collector/README.md), never another token
    ties = [m for m in v.decode_margins if m > 0]
    assert len(ties) <= 0.05 * len(v.decode_margins) and max(v.decode_margins) < 0.5
    assert max(v.prefill_margins) == 0.0 and max(v.prefill_kl) < 1e-6
    # one sequence at a time, the decode path computes what main's does, step for step
    assert v.decode_kl and max(v.decode_kl) < 1e-6
    # and several at once, each prompt first into its slot alone: the batched decode's steps too
    args = ("--widths", "2,4", "--tokens", "8", "--runs", "2", "--server-threads", "1")
    res = served(tmp_path, "concurrent", build, build, "bwrap", *args, model=model)
    assert res.returncode == 0, res.stderr[-3000:]
    v = parse_document((tmp_path / "out.json").read_bytes(), "concurrent").measured.verification
    assert v is not None and v.decode_kl and v.batched_decode_kl
    assert max(v.decode_kl) < 1e-6 and max(v.batched_decode_kl) < 1e-6


def fake_tools(tmp_path: Path, name: str, mode: str = "honest") -> Path:
    """A "build" whose bin/llama-perplexity is the fake tool behaving as `mode`."""
    build = tmp_path / name
    (build / "bin").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "support" / "fake_llama_perplexity.py", build / "bin")
    tool = build / "bin" / "llama-perplexity"
    tool.write_text(
        "#!/bin/sh\n"
        f"SPARKBOARD_FAKE_MODE={mode} exec /usr/bin/python3 "
        '"$(dirname "$0")/fake_llama_perplexity.py" "$@"\n'
    )
    tool.chmod(0o755)
    return build


def kld(
    tmp_path: Path, pr: Path, main: Path, sandbox: str, device: str = "cpu"
) -> subprocess.CompletedProcess[str]:
    text = REPO / "data" / "corpus.txt"
    model = tmp_path / "models" / "m.gguf"  # the fake tool reads no model
    model.parent.mkdir(exist_ok=True)
    model.write_bytes(b"GGUF")
    argv = [sys.executable, "-m", "engine.harness.server_score", "kld", "--model", str(model)]
    argv += ["--text-file", str(text), "--ctx", "16", "--chunks", "3", "--sandbox", sandbox]
    argv += ["--engine-checkout", str(pr), "--baseline-checkout", str(main)]
    argv += ["--device", device, "--out", str(tmp_path / "kld.json")]
    return subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)


def test_accuracy_with_the_servers_own_tool_held_against_mains(
    tmp_path: Path, sandbox_kind: str
) -> None:
    main = fake_tools(tmp_path, "main")
    res = kld(tmp_path, fake_tools(tmp_path, "same"), main, sandbox_kind)
    assert res.returncode == 0, res.stderr[-2000:]
    same = json.loads((tmp_path / "kld.json").read_text())
    assert (same["tokens"], same["same_top"], same["ppl_ratio"]) == (3 * 7, 1.0, 1.0)
    assert same["kl_max"] < 1e-9 and same["device"]["backend"] == "numpy"
    res = kld(tmp_path, fake_tools(tmp_path, "wrong", "wrong"), main, sandbox_kind)
    assert res.returncode == 0, res.stderr[-2000:]
    wrong = json.loads((tmp_path / "kld.json").read_text())
    assert wrong["kl_mean"] > 0.01 and wrong["same_top"] < 0.5


@pytest.mark.gpu
def test_the_tools_document_names_the_gpu_they_ran_on(tmp_path: Path) -> None:
    """With `--device gpu` (a cupy profile's round) the document names the card, as a timed
    session's does: the round's device is never the CPU of its scoring sessions."""
    main = fake_tools(tmp_path, "main")
    res = kld(tmp_path, fake_tools(tmp_path, "same"), main, "none", "gpu")
    assert res.returncode == 0, res.stderr[-2000:]
    device = json.loads((tmp_path / "kld.json").read_text())["device"]
    assert device["backend"] == "cupy" and device["driver"]


def test_a_tool_that_fails_or_writes_a_bad_file_is_the_builds_own(tmp_path: Path) -> None:
    main = fake_tools(tmp_path, "main")
    res = kld(tmp_path, fake_tools(tmp_path, "short", "short"), main, "none")
    assert res.returncode == EXIT_BAD_OUTPUT and "the PR's build: logits.bin" in res.stderr
    res = kld(tmp_path, fake_tools(tmp_path, "fail", "fail"), main, "none")
    assert res.returncode == EXIT_BAD_OUTPUT
    assert "exited with 1: error: failed to load model" in res.stderr
    res = kld(tmp_path, main, fake_tools(tmp_path, "main-fails", "fail"), "none")
    assert res.returncode == 3 and "main's build" in res.stderr


@pytest.mark.parametrize(("gpu", "layers"), [(False, "0"), (True, "999")])
def test_a_server_computes_where_its_sandbox_binds_the_gpu(
    tmp_path: Path, gpu: bool, layers: str
) -> None:
    """The profile's backend gives the sandbox the GPU (cupy) or not; the server then offloads
    every layer there or none (`--n-gpu-layers`), whatever the build: a CUDA build's server in a
    sandbox without the GPU computes on the CPU as a CPU build's does."""
    build, home = fake_build(tmp_path, "build"), tmp_path / "home"
    home.mkdir()
    spec = EngineSpec(build, Sandbox("none", gpu=gpu), home)
    s = ServerEngine(spec, "tiny", server_kind("llama.cpp"), 1, 64, 1, models=tmp_path / "m")
    try:
        s.connect(config_of("tiny").vocab_size)
        argv = list(s.proc.args)
        assert argv[argv.index("--n-gpu-layers") + 1] == layers
    finally:
        s.close()


def test_a_sessions_legs_verifications_join_every_list() -> None:
    """Each leg's report, joined leg after leg: no list of the report is dropped."""
    lists = [n for n in VerificationReport.model_fields if n != "reference"]
    legs = [
        VerificationReport(reference="main's server", **{n: [float(i)] for n in lists})
        for i in (1, 2)
    ]
    joined = joined_reports(legs)
    assert joined.reference == "main's server"
    assert all(getattr(joined, n) == [1.0, 2.0] for n in lists)
