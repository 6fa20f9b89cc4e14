"""One harness subprocess, sealed: environment, output limits, and what outcome.judge makes of
each way it can end."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from collector.policy import load_policy, resolve
from collector.run.outcome import judge
from collector.run.runner import Place, Request, load_cores, run_request, session_core
from collector.schedule import Task
from engine.harness.turns import LOAD_CORES_ENV

DOC = {
    "schema_version": 3,
    "model": "tiny",
    "model_id": "fake",
    "engine_commit": "unknown",
    "device": {"backend": "numpy", "name": "cpu"},
    "started_at": "2026-11-30T00:00:00Z",
    "wall_s": 0.1,
    "kind": "sweep",
    "tokens": 4,
    "reps": 1,
    "contexts": [
        {"ctx": 32, "decode_tokens": 4, "decode_tok_s": [100.0], "prefill_tok_s": [900.0]}
    ],
    "measured": {"seed": 1, "timing": {"regions": [[0.01, 0.0099]]}},
}


POLICY = resolve(load_policy(), "cpu")
POLICY = POLICY.model_copy(
    update={
        "failures": POLICY.failures.model_copy(
            update={"infra_patterns": [r"no space left on device"], "max_document_mb": 1}
        )
    }
)
TASK = Task("r/pr/1/1/score/tiny", "pr", 1, 1, "score", "tiny")


def run(
    tmp_path: Path, body: str, timeout: float = 20, backend: str = "numpy", env=(), one_core=False
) -> object:  # type: ignore[no-untyped-def]
    """`body` as an untimed harness command in the sandbox, judged as a PR's session."""
    script = tmp_path / "h.py"
    script.write_text(
        "import json, os, sys, time\nout = sys.argv[sys.argv.index('--out') + 1]\n"
        f"DOC = json.loads({json.dumps(json.dumps(DOC))})\n" + body
    )
    req = Request(
        "sweep",
        "tiny",
        [sys.executable, str(script)],
        timeout,
        contexts=(32,),
        reps=1,
        backend=backend,
        env=env,
        one_core=one_core,
    )
    place = Place(tmp_path / "main", tmp_path / "work", "bwrap")
    r = run_request(req, tmp_path, place, 1, 1)
    return judge(TASK, req, r, POLICY)


WRITE = "open(out, 'w').write(json.dumps(DOC))\n"


def test_ok_and_the_profile_environment(tmp_path: Path) -> None:
    o = run(
        tmp_path,
        "assert os.environ['OPENBLAS_NUM_THREADS'] == '1'\n" + WRITE,
        env=(("OPENBLAS_NUM_THREADS", "1"),),
    )
    assert o.status == "ok" and o.document is not None, o.detail  # type: ignore[attr-defined]


def test_a_one_core_profile_runs_every_process_of_a_session_on_one_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Profile.one_core: the command and whatever it starts, on the collector's last core."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    last = max(os.sched_getaffinity(0))
    check = (
        "import subprocess\n"
        f"assert os.sched_getaffinity(0) == {{{last}}}, os.sched_getaffinity(0)\n"
        "child = [sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))']\n"
        f"assert subprocess.run(child, capture_output=True, text=True).stdout.strip() == '[{last}]'\n"
    )
    o = run(tmp_path, check + WRITE, one_core=True)
    assert o.status == "ok", o.detail  # type: ignore[attr-defined]
    if len(os.sched_getaffinity(0)) > 1:  # and a profile without it leaves them free
        o = run(tmp_path, "assert len(os.sched_getaffinity(0)) > 1\n" + WRITE)
        assert o.status == "ok", o.detail  # type: ignore[attr-defined]


def test_shards_on_one_hosts_gpus_pin_their_sessions_to_cores_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each shard of a clustered round runs with its GPU's index first in CUDA_VISIBLE_DEVICES:
    its one-core sessions go one core further down per index, so no two GPUs' sessions share."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)))
    cores = []
    for env in ("", "0", "1", "2,3", "7", "GPU-1b2c"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
        cores.append(session_core())
    assert cores == [15, 15, 14, 13, 8, 15]
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert session_core() == 0  # more GPUs than cores: around again


def test_a_one_core_sessions_engines_load_on_cores_of_their_own_never_a_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Profile.load_cores: a timed one-core session's harness is told the cores its engines load
    on (the collector's first, never one of the last eight, a host's shards' session cores); on a
    box of eight cores or fewer, none; an untimed command, or a profile without it, is told
    nothing."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)))
    assert load_cores(4) == [0, 1, 2, 3] and load_cores(12) == list(range(8))
    assert load_cores(0) == []
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))
    assert load_cores(4) == []
    monkeypatch.undo()
    script = tmp_path / "h.py"
    script.write_text(
        "import json, os, sys\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        f"json.dump(os.environ.get({LOAD_CORES_ENV!r}), open(out, 'w'))\n"
    )
    place = Place(tmp_path / "main", tmp_path / "work", "none")
    (tmp_path / "main").mkdir()
    told = {}
    monkeypatch.setattr("collector.run.runner.load_cores", lambda n: [0, 1, 2][:n])
    for name, timed, n in (("timed", True, 2), ("untimed", False, 2), ("without", True, 0)):
        argv = [sys.executable, str(script)]
        req = Request("sweep", "tiny", argv, 20, timed=timed, one_core=True, load_cores=n)
        run_request(req, tmp_path, place, 1, 1)
        told[name] = json.loads((place.work / "out" / "out.json").read_text())
    assert told == {"timed": "0,1", "untimed": None, "without": None}


def test_pythonpath_starts_with_the_checkout_and_the_rest_is_sealed(tmp_path: Path) -> None:
    """The checkout first on its path; inside its sandbox it is nobody, sees no other process,
    and writes nothing but its own output."""
    o = run(
        tmp_path,
        f"assert os.environ['PYTHONPATH'].split(os.pathsep)[0] == {str(tmp_path)!r}\n"
        "assert os.getuid() == 65534 and os.getppid() == 1\n"  # bwrap's PID 1 of its own
        "assert sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [1, os.getpid()]\n"
        "try:\n    open('h2.py', 'w')\nexcept OSError:\n    pass\nelse:\n    raise SystemExit('wrote its checkout')\n"
        + WRITE,
    )
    assert o.status == "ok", o.detail  # type: ignore[attr-defined]


def test_each_failure_kind(tmp_path: Path) -> None:
    cases = {
        "print('garbage'); open(out, 'w').write('{{{ nope')\n": (
            "malformed",
            "invalid sweep document",
        ),
        "print('done')\n": ("malformed", "without writing"),
        "raise SystemExit(3)\n": ("crash", "exit code 3"),
        "import signal; os.kill(os.getpid(), signal.SIGSEGV)\n": ("crash", "SIGSEGV"),
        "DOC['model'] = 'other'\n" + WRITE: ("malformed", "asked for 'tiny'"),
        "DOC['contexts'][0]['ctx'] = 64\n" + WRITE: ("malformed", "asked for [32]"),
        "DOC['contexts'][0]['decode_tok_s'] = [float('nan')]\n" + WRITE: ("malformed", "invalid"),
        "DOC['extra'] = 1\n" + WRITE: ("malformed", "extra"),
        "open(out, 'w').write(' ' * (2 * 2**20))\n": ("malformed", "larger than 1 MB"),
        "print('OSError: [Errno 28] No space left on device', file=sys.stderr); sys.exit(1)\n": (
            "infra",
            "No space",
        ),
        "DOC['device']['backend'] = 'cupy'\n" + WRITE: ("infra", "no usable device"),
    }
    for body, (status, words) in cases.items():
        o = run(tmp_path, body)
        assert o.status == status, (body, o.status, o.detail)  # type: ignore[attr-defined]
        assert words in o.detail, (body, o.detail)  # type: ignore[attr-defined]


def test_timeout_kills_the_process_group(tmp_path: Path) -> None:
    o = run(
        tmp_path,
        "import subprocess; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)\n",
        timeout=1.5,
    )
    assert o.status == "timeout" and o.run.exit_code is None  # type: ignore[attr-defined]
    assert o.may_be_flaky  # type: ignore[attr-defined]
