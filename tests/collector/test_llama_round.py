"""A round of a built, served engine (Profile.engine = "llama.cpp"), end to end on fakes: a CMake
project standing in for llama.cpp (tests/collector/fake_llama/: one real C file, and the suite's
fake llama-server and llama-perplexity as its "build"), its main and four PRs built sealed by
`collect` (main's build first, filling the compiler cache), timed through their servers beside
main's, scored with their own tool against main's build, and judged by the same rules. Real
llama.cpp trees: the demo round and the H200's (issue 30)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fake_repo import HERE, REPO_ROOT, git

from collector.run import sandbox
from collector.run.collect import collect
from collector.store import open_store

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None
    or shutil.which("cc") is None
    or not Path("/usr/bin/python3").is_file(),
    reason="needs cmake, cc and the system's python3 (the fakes run in the sandbox)",
)

POLICY = """extends = "default"

[failures]
# the box's speed flips (collector/policy.toml's canary_limit): a session it moved is measured
# again after the product's waits (2, then 4 s), not at once into the same phase
infra_retries = 2
retry_wait_s = 2.0
min_free_disk_mb = 1
stop_after = ["forged", "diverged"]

[profiles.llama-cpu]
backend = "numpy"
engine = "llama.cpp"
server_threads = 1
models = ["smollm2-135m"]
contexts = [16, 40]
guard_ctx = 16
guard_widths = []
tokens = 4
reps = 2
min_time = 0.01
warmup = 0
widths = [2]
concurrent_in_sweep = true
concurrent_tokens = 4
concurrent_runs = 2
prompt_len = 16
prefill_prefixes = [16]
prefill_positions = 4
confirm_sessions = 0
one_core = true
canary_limit = 0.60
# the fakes' speeds carry the box's noise only, and no PR here changes them: a wide floor
min_noise = 0.5
kld_ctx = 16
kld_chunks = 3
timeouts = { sweep = 120, score = 60, guard = 120 }

[profiles.llama-cpu.build]
targets = ["llama-server", "llama-perplexity"]
jobs = 1
timeout_s = 120
"""


def llama_repo(root: Path) -> Path:
    repo = root / "llama-repo"
    shutil.copytree(HERE / "fake_llama", repo)
    for name in ("fake_llama_server.py", "fake_llama_perplexity.py"):
        shutil.copy(REPO_ROOT / "tests" / "support" / name, repo / "tools" / name)
    (repo / "policy.toml").write_text(POLICY)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "fake llama.cpp")
    return repo


def branch(repo: Path, name: str, path: str, text: str) -> None:
    git(repo, "checkout", "-q", "-b", name, "main")
    (repo / path).write_text(text)
    git(repo, "commit", "-qam", name)
    git(repo, "checkout", "-q", "main")


def test_a_round_of_a_built_served_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = Path(sandbox.__file__).parent  # the box guard walks sparkboard's own code only
    monkeypatch.setattr("collector.run.sandbox.trusted_roots", lambda: [own])
    repo = llama_repo(tmp_path)
    branch(repo, "honest", "check.c", "/* reworded */\nint main(void) { return 0; }\n")
    branch(repo, "broken", "check.c", "int main(void) { return undeclared_name; }\n")
    branch(repo, "wrong", "mode.txt", "wrong\n")
    branch(repo, "busy", "mode.txt", "busy\n")
    prs = [(1, "honest"), (2, "broken"), (3, "wrong"), (4, "busy")]
    lines = [
        'round = "llama-fake"',
        'engine_repo = "."',
        'base_ref = "main"',
        'policy = "policy.toml"',
        'profile = "llama-cpu"',
    ]
    for n, ref in prs:
        lines += ["[[pr]]", f"number = {n}", f'title = "{ref}"', 'author = "a"']
        lines += ['targets = ["smollm2-135m"]', f'ref = "{ref}"']
    manifest = repo / "round.toml"
    manifest.write_text("\n".join(lines) + "\n")
    db = tmp_path / "round.duckdb"
    log: list[str] = []
    assert collect(manifest, db, progress=False, log=log.append) == 0, "\n".join(log)

    store = open_store(db)
    try:
        verdicts = {
            r["pr"]: r
            for r in store.query_dicts("SELECT * FROM verdicts WHERE round_id = ?", ["llama-fake"])
        }
        gates = {
            (r["pr"], r["gate"]): r
            for r in store.query_dicts("SELECT * FROM gates WHERE round_id = ?", ["llama-fake"])
        }
        sessions = store.query_dicts(
            "SELECT pr, side, kind, status, detail FROM sessions WHERE round_id = ?", ["llama-fake"]
        )
        accuracy = {
            r["pr"]: r
            for r in store.query_dicts("SELECT * FROM accuracy WHERE round_id = ?", ["llama-fake"])
        }
    finally:
        store.close()
    text = "\n".join(log)
    # main built first, filling the cache; each measurable PR's build read it
    assert text.index("building main") < text.index("building pr-1")
    # the honest PR: timed beside main's server, its build scored within every bar
    assert verdicts[1]["label"] == "none", verdicts[1]
    assert gates[(1, "accuracy:smollm2-135m")]["status"] == "pass"
    assert gates[(1, "prefill-path:smollm2-135m")]["status"] == "skip"
    assert "not applicable" in gates[(1, "prefill-path:smollm2-135m")]["reason"]
    ok = [s for s in sessions if s["pr"] == 1]
    assert {s["kind"] for s in ok} == {"score", "sweep"} and {s["status"] for s in ok} == {"ok"}
    # main's build held against itself: the accuracy of pr 0
    assert accuracy[0]["kl"] == 0.0 and accuracy[0]["top1"] == 1.0
    # the build the compiler refused: its own first error line on the page, nothing measured
    assert verdicts[2]["label"] == "REJECT"
    assert gates[(2, "build")]["status"] == "fail"
    assert "check.c" in gates[(2, "build")]["reason"] and "undeclared_name" in verdicts[2]["reason"]
    assert not [s for s in sessions if s["pr"] == 2]
    # a numerics bug: its tool's log-probs off main's, its server's tokens not main's
    assert verdicts[3]["label"] == "REJECT"
    assert gates[(3, "accuracy:smollm2-135m")]["status"] == "fail"
    assert any(s["pr"] == 3 and s["status"] == "diverged" for s in sessions), sessions
    # a server that works while it is not its turn
    assert verdicts[4]["label"] == "REJECT"
    assert any(s["pr"] == 4 and s["status"] == "forged" for s in sessions), sessions
