"""What a process sealed by `Sandbox("bwrap").wrap(...)` (engine/harness/sandbox.py) can reach.

Each test runs a short Python program inside a real sandbox, the way the timing parent starts an
engine (its checkout read-only, one writable home, the interpreter's library folders), and
checks from both sides: the program reports what it saw and what its attempts gave, and this
process checks that nothing outside changed. Skipped (with bwrap's own words) only where this
box cannot make a sandbox at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.harness import sandbox as sandbox_module
from engine.harness.sandbox import (
    SANDBOX_UID,
    Sandbox,
    SandboxError,
    bwrap_path,
    library_paths,
    probe,
)

REPO = Path(__file__).resolve().parents[2]
SEALED = Sandbox("bwrap")
RUN_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def can_seal(tmp_path_factory: pytest.TempPathFactory) -> None:
    try:
        probe(SEALED, tmp_path_factory.mktemp("probe"))
    except SandboxError as e:
        pytest.skip(f"this box cannot make a sandbox: {e}")


def sealed_argv(tmp_path: Path, code: str, *args: str, sandbox: Sandbox = SEALED) -> list[str]:
    """`python -c code args` sealed as an engine is: checkout tmp_path/checkout (read-only),
    home tmp_path/home (its one writable folder)."""
    checkout = tmp_path / "checkout"
    checkout.mkdir(exist_ok=True)
    argv, env = sandbox.wrap(
        [sys.executable, "-c", code, *args],
        checkout=checkout,
        writable=[tmp_path / "home"],
        env=dict(os.environ),
        python_path=library_paths(),
    )
    assert env is None  # bwrap inherits ours and hands the command only what ENV_KEEP names
    return argv


def run_sealed(tmp_path: Path, code: str, *args: str, sandbox: Sandbox = SEALED) -> dict:
    """Run `code` sealed; it prints one JSON object, returned here."""
    res = subprocess.run(
        sealed_argv(tmp_path, code, *args, sandbox=sandbox),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def bystander() -> Iterator[subprocess.Popen]:
    """A process of this box outside the sandbox (a server that ran before the round)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


# --- processes ---------------------------------------------------------------------------------

# The box's settings that root changes by writing a file: the CPU's frequency and its cores, the
# kernel's memory policy, the CPU's wake-up latency (the card's clocks sit behind a capability)
SETTINGS = [
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq",
    "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
    "/sys/devices/system/cpu/intel_pstate/max_perf_pct",
    "/sys/devices/system/cpu/cpu1/online",
    "/sys/kernel/mm/transparent_hugepage/enabled",
    "/dev/cpu_dma_latency",
]

SEES = (
    f"""
SETTINGS = {SETTINGS!r}
"""
    + """
import ctypes, errno, json, os, signal, sys
targets = [int(p) for p in sys.argv[1:]]
libc = ctypes.CDLL(None, use_errno=True)
out = {"pid": os.getpid(), "ppid": os.getppid(), "uid": os.getuid(),
       "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
       "cap_eff": [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0],
       "proc_entry": [os.path.exists(f"/proc/{t}") for t in targets], "kill0": [], "kill": [],
       "ptrace": []}
for t, harm in zip(targets, (signal.SIGURG, signal.SIGKILL)):  # SIGURG: ignored if it lands
    for key, sig in (("kill0", 0), ("kill", harm)):
        try:
            os.kill(t, sig)
            out[key].append("sent")
        except OSError as e:
            out[key].append(errno.errorcode[e.errno])
    r = libc.ptrace(16, t, None, None)  # PTRACE_ATTACH
    out["ptrace"].append("attached" if r == 0 else errno.errorcode[ctypes.get_errno()])
sysctl = "/proc/sys/vm/overcommit_memory"  # a setting of the box: written back as it is
try:
    value = open(sysctl).read()
    with open(sysctl, "w") as f:
        f.write(value)
    out["sysctl"] = "written"
except OSError as e:
    out["sysctl"] = errno.errorcode[e.errno]
out["settings"] = {}
for path in SETTINGS:  # opened for writing only: nothing is written, even where it opens
    try:
        os.close(os.open(path, os.O_WRONLY))
        out["settings"][path] = "opened"
    except OSError as e:
        out["settings"][path] = errno.errorcode[e.errno]
print(json.dumps(out))
"""
)


def test_it_cannot_see_signal_or_ptrace_any_process_outside(can_seal: None, tmp_path: Path) -> None:
    with bystander() as other:
        targets = [os.getpid(), other.pid]  # its timing parent (us), and another process
        seen = run_sealed(tmp_path, SEES, *map(str, targets))
        assert other.poll() is None  # the SIGKILL it sent it reached nothing
    # its own PID namespace: bwrap's init is its PID 1 (its parent), nothing else is there
    assert seen["ppid"] in (0, 1) and set(seen["pids"]) <= {1, seen["pid"]}
    assert seen["proc_entry"] == [False, False]
    assert seen["kill0"] == seen["kill"] == ["ESRCH", "ESRCH"]
    assert all(r in ("ESRCH", "EPERM") for r in seen["ptrace"])
    # nobody, with no capability left, and the box's settings out of reach
    assert seen["uid"] == SANDBOX_UID and int(seen["cap_eff"], 16) == 0
    assert seen["sysctl"] in ("EROFS", "EACCES", "EPERM"), seen["sysctl"]
    present = [p for p in SETTINGS if os.path.exists(p)]
    assert present, "none of the settings is on this box: the test would prove nothing"
    refused = {p: seen["settings"][p] for p in present}
    assert set(refused.values()) <= {"EROFS", "EACCES", "EPERM", "ENOENT"}, refused


# --- files ---------------------------------------------------------------------------------------

WRITES = """
import errno, json, os, sys
def attempt(do):
    try:
        do()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def append(p):
    with open(p, "a") as f:
        f.write("written from inside\\n")
out = {"read": open(sys.argv[3]).read()}
for p in json.loads(sys.argv[1]):
    out[p] = attempt(lambda: append(p))
for p in json.loads(sys.argv[2]):
    out["unlink " + p] = attempt(lambda: os.unlink(p))
print(json.dumps(out))
"""


def _snapshot(paths: list[Path]) -> dict[str, bytes | list[str] | None]:
    out: dict[str, bytes | list[str] | None] = {}
    for p in paths:
        if p.is_dir():
            out[str(p)] = sorted(os.listdir(p))
        else:
            out[str(p)] = p.read_bytes() if p.exists() else None
    return out


def test_it_writes_nowhere_but_its_home(can_seal: None, tmp_path: Path) -> None:
    """Its checkout, the interpreter's folders and a model it may read are read-only; a file
    of the box named by its path is not even there; its home and its /tmp take writes."""
    checkout = tmp_path / "checkout"
    (checkout / "engine").mkdir(parents=True)
    mine = checkout / "engine" / "code.py"
    mine.write_text("# the PR's code\n")
    models = tmp_path / "models"
    models.mkdir()
    model = models / "model.gguf"
    model.write_text("weights\n")
    # files of the box outside every folder it was given: beside its checkout in the box's
    # /tmp (its own /tmp has only the folders leading to its checkout and home), and elsewhere
    given = tmp_path / "collector.db"
    given.write_text("the collector's\n")
    var = Path(f"/var/tmp/sparkboard-sandbox-test-{uuid.uuid4().hex[:12]}.db")
    var.write_text("the collector's\n")
    site = Path(sysconfig.get_paths()["purelib"])
    stdlib = Path(os.__file__).parent
    home = tmp_path / "home"
    inside_tmp = Path(f"/tmp/sparkboard-sandbox-test-{uuid.uuid4().hex[:12]}.txt")
    attempts = {
        "checkout file": mine,
        "checkout new": checkout / "new.py",
        "site-packages": site / "sparkboard-sandbox-test.txt",
        "stdlib": stdlib / "sparkboard-sandbox-test.txt",
        "model": model,
        "given file": given,
        "var file": var,
        "etc": Path("/etc/sparkboard-sandbox-test"),
        "home": home / "ok.txt",
        "tmp": inside_tmp,
    }
    watched = [mine, checkout, checkout / "engine", model, models, given, var, site, stdlib]
    watched.append(inside_tmp)
    before = _snapshot(watched)
    paths = json.dumps([str(p) for p in attempts.values()])
    unlinks = json.dumps([str(mine), str(model), str(given), str(var)])
    reader = Sandbox("bwrap", readable=(str(models),))
    try:
        got = run_sealed(tmp_path, WRITES, paths, unlinks, str(model), sandbox=reader)
    finally:
        for p in (site / "sparkboard-sandbox-test.txt", stdlib / "sparkboard-sandbox-test.txt"):
            p.unlink(missing_ok=True)  # only there if the test failed
        after = _snapshot(watched)  # nothing outside changed, nothing appeared
        var.unlink()
        inside_tmp.unlink(missing_ok=True)  # only on the box's /tmp if the test failed
    assert got.pop("read") == "weights\n"  # a model it is given it reads
    by_name = {name: got.pop(str(p)) for name, p in attempts.items()}
    assert by_name.pop("home") == "ok" and by_name.pop("tmp") == "ok"  # its own folders
    # not in its world: its /tmp's copy of tmp_path is an empty folder of its own, /var is not
    # there at all
    assert by_name.pop("given file") in ("ok", "ENOENT") and by_name.pop("var file") == "ENOENT"
    assert set(by_name.values()) == {"EROFS"}, by_name
    assert got == {
        f"unlink {mine}": "EROFS",
        f"unlink {model}": "EROFS",
        f"unlink {given}": got[f"unlink {given}"],  # its own copy, if it made one
        f"unlink {var}": "ENOENT",
    }
    assert got[f"unlink {given}"] in ("ok", "ENOENT")
    assert after == before
    assert (home / "ok.txt").read_text() == "written from inside\n"


# --- network -------------------------------------------------------------------------------------

NETWORK = """
import errno, json, socket, sys
port, abstract = int(sys.argv[1]), sys.argv[2]
out = {"interfaces": sorted(name for _, name in socket.if_nameindex())}
for key, family, addr in (("tcp", socket.AF_INET, ("127.0.0.1", port)),
                          ("abstract", socket.AF_UNIX, "\\0" + abstract)):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(addr)
        out[key] = "connected"
    except OSError as e:
        out[key] = errno.errorcode.get(e.errno, type(e).__name__)
print(json.dumps(out))
"""


def test_it_has_no_network(can_seal: None, tmp_path: Path) -> None:
    """Only a loopback of its own: neither the box's 127.0.0.1 nor its abstract Unix sockets
    (a server listening on either is out of reach)."""
    tcp = socket.create_server(("127.0.0.1", 0))
    name = f"sparkboard-sandbox-test-{uuid.uuid4().hex}"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + name)
    unix.listen()
    with tcp, unix:
        got = run_sealed(tmp_path, NETWORK, str(tcp.getsockname()[1]), name)
        assert got["interfaces"] == ["lo"]
        assert got["tcp"] != "connected" and got["abstract"] != "connected", got
        tcp.setblocking(False)
        with pytest.raises(BlockingIOError):
            tcp.accept()  # nobody reached it
        # the same servers answer from outside: the test checks a real listener
        with socket.create_connection(tcp.getsockname(), timeout=5):
            pass
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect("\0" + name)


# --- its cores ------------------------------------------------------------------------------------

CORES = """
import ctypes, errno, json, os, shutil, subprocess
out = {"before": sorted(os.sched_getaffinity(0))}
try:
    os.sched_setaffinity(0, range(os.cpu_count()))
    out["widen"] = "allowed"
except OSError as e:
    out["widen"] = errno.errorcode[e.errno]
out["after"] = sorted(os.sched_getaffinity(0))
if shutil.which("taskset"):
    cmd = ["taskset", "-c", "0-%d" % (os.cpu_count() - 1), "true"]
    out["taskset"] = subprocess.run(cmd, capture_output=True).returncode
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)  # struct io_uring_params
fd = libc.syscall(425, 8, params)  # io_uring_setup
out["io_uring"] = "allowed" if fd >= 0 else errno.errorcode[ctypes.get_errno()]
print(json.dumps(out))
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nowhere to move")
def test_it_stays_on_the_cores_it_started_on(can_seal: None, tmp_path: Path) -> None:
    """A process may move itself onto every core of the box without any capability; sealed it
    cannot (the seccomp filter answers EPERM), nor through taskset, nor hand work to io_uring's
    kernel workers. Unsealed, the same program moves: the test checks a real escape."""
    core = max(os.sched_getaffinity(0))

    def on_one_core(sandbox: Sandbox) -> dict:
        res = subprocess.run(
            sealed_argv(tmp_path, CORES, sandbox=sandbox) if sandbox.sealed
            else [sys.executable, "-c", CORES],
            capture_output=True, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, {core}), check=False,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout.strip().splitlines()[-1])

    sealed = on_one_core(SEALED)
    assert sealed["before"] == sealed["after"] == [core], sealed
    assert sealed["widen"] == "EPERM" and sealed.get("taskset") != 0, sealed
    assert sealed["io_uring"] == "EPERM", sealed
    unsealed = on_one_core(Sandbox("none"))
    assert unsealed["widen"] == "allowed" and len(unsealed["after"]) > 1, unsealed


# --- /tmp and /dev/shm ---------------------------------------------------------------------------

TMP = """
import json, os, socket, subprocess, sys
file, sock, shm = sys.argv[1:4]
out = {"file": os.path.exists(file), "sock": os.path.exists(sock), "shm": os.path.exists(shm),
       "tmp": sorted(os.listdir("/tmp")), "dev_shm": sorted(os.listdir("/dev/shm"))}
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sock)
    out["connect"] = "connected"
except OSError as e:
    out["connect"] = type(e).__name__
if len(sys.argv) > 4:
    r = subprocess.run([sys.argv[4], "-S", sock, "list-sessions"], capture_output=True)
    out["tmux"] = r.returncode
print(json.dumps(out))
"""


@pytest.fixture
def tmux_server() -> Iterator[Path | None]:
    """A tmux server on its own socket in the box's /tmp (None without tmux)."""
    tmux = shutil.which("tmux")
    if tmux is None:
        yield None
        return
    sock = Path(f"/tmp/sparkboard-sandbox-test-{uuid.uuid4().hex[:12]}.tmux")
    start = [tmux, "-S", str(sock), "-f", "/dev/null", "new-session", "-d", "-s", "t"]
    subprocess.run([*start, "sleep 120"], check=True, timeout=30)
    try:
        yield sock
    finally:
        subprocess.run([tmux, "-S", str(sock), "kill-server"], check=False, timeout=30)
        sock.unlink(missing_ok=True)


def test_its_tmp_and_dev_shm_are_its_own(
    can_seal: None, tmp_path: Path, tmux_server: Path | None
) -> None:
    tag = uuid.uuid4().hex[:12]
    host_file = Path(f"/tmp/sparkboard-sandbox-test-{tag}.txt")
    host_shm = Path(f"/dev/shm/sparkboard-sandbox-test-{tag}")
    host_file.write_text("the box's\n")
    shm_ok = Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK)
    if shm_ok:
        host_shm.write_text("the box's\n")
    sock = tmux_server or Path(f"/tmp/sparkboard-sandbox-test-{tag}.sock")
    listener = None
    if tmux_server is None:  # a plain Unix socket server in /tmp instead
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock))
        listener.listen()
    try:
        args = [str(host_file), str(sock), str(host_shm)]
        if tmux_server is not None:
            assert (
                subprocess.run(["tmux", "-S", str(sock), "ls"], capture_output=True).returncode == 0
            )
            args.append(shutil.which("tmux") or "tmux")
        got = run_sealed(tmp_path, TMP, *args)
    finally:
        host_file.unlink(missing_ok=True)
        host_shm.unlink(missing_ok=True)
        if listener is not None:
            listener.close()
            sock.unlink(missing_ok=True)
    assert got["file"] is False and got["sock"] is False and got["shm"] is False
    assert got["connect"] == "FileNotFoundError"
    if tmux_server is not None:
        assert got["tmux"] != 0  # its tmux finds no server
    # empty: at most the first folder of each path bound in from the box's /tmp (pytest's
    # tmp_path, where its checkout and home are; a library folder on this PYTHONPATH)
    argv = sealed_argv(tmp_path, "")
    binds = [Path(argv[i + 2]) for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")]
    bound = {p.relative_to("/tmp").parts[0] for p in binds if p.is_relative_to("/tmp")}
    assert set(got["tmp"]) <= bound and got["dev_shm"] == []


# --- what it forks --------------------------------------------------------------------------------

FORKS = """
import os, subprocess, sys, time
token, home = sys.argv[1] + "-forked", sys.argv[2]
sleeper = [sys.executable, "-c", "import signal, time\\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
           "signal.signal(signal.SIGHUP, signal.SIG_IGN)\\ntime.sleep(120)", token]
subprocess.Popen(sleeper)                       # a plain child
subprocess.Popen(sleeper, start_new_session=True)  # a child in a session of its own
if os.fork() == 0:                              # a daemon: fork, setsid, fork, exec
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, sleeper)
    os._exit(0)
os.wait()
def running():
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            n += token.encode() in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            pass
    return n
while running() < 3:  # all three have started their sleep
    time.sleep(0.01)
open(os.path.join(home, "started"), "w").close()
while not os.path.exists(os.path.join(home, "stop")):
    time.sleep(0.02)
"""


def _holding(token: str) -> list[int]:
    """The processes of this box whose command line carries `token`."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if token.encode() in (d / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(d.name))
    return found


def _gone(token: str, deadline_s: float = 10.0) -> list[int]:
    """The token's processes still alive (zombies aside) after waiting up to `deadline_s`."""
    t0 = time.monotonic()
    while True:
        alive = []
        for pid in _holding(token):
            with contextlib.suppress(OSError, IndexError):
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    alive.append(pid)
        if not alive or time.monotonic() - t0 > deadline_s:
            return alive
        time.sleep(0.05)


@pytest.mark.parametrize("end", ["command-exits", "bwrap-killed", "its-parent-killed"])
def test_whatever_it_forks_dies_with_it(can_seal: None, tmp_path: Path, end: str) -> None:
    """A child, a child in a new session and a setsid double-forked daemon, each ignoring
    SIGTERM and SIGHUP: all gone when the sandbox's command exits, when bwrap is killed, and
    when the process that started bwrap (the timing parent) is killed (--die-with-parent)."""
    token = f"sparkboard-sandbox-test-{uuid.uuid4().hex}"
    forked = f"{token}-forked"
    home = tmp_path / "home"
    argv = sealed_argv(tmp_path, FORKS, token, str(home))
    if end == "its-parent-killed":  # a parent between us and bwrap, killed below
        argv = [sys.executable, "-c", "import json, subprocess, sys\n"
                "subprocess.run(json.loads(sys.argv[1]))", json.dumps(argv)]  # fmt: skip
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not (home / "started").exists():
            assert proc.poll() is None, "the sandbox ended before its children started"
            assert time.monotonic() < deadline, "the sandbox's children never started"
            time.sleep(0.02)
        # all three running, seen from the box; and bwrap's two processes and the command
        assert len(_holding(forked)) == 3 and len(_holding(token)) == 3
        if end == "command-exits":
            (home / "stop").touch()
            assert proc.wait(timeout=RUN_TIMEOUT_S) == 0
        else:
            proc.kill()
            proc.wait()
        assert _gone(forked) == [] and _gone(token) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _holding(forked) + _holding(token):  # by id, should the test have failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- environment, and the refusals ---------------------------------------------------------------

ENVIRON = "import json, os; print(json.dumps(dict(os.environ)))"


def test_it_keeps_only_the_named_variables(
    can_seal: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "a-secret")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv("SPARKBOARD_SANDBOX", "bwrap")
    env = run_sealed(tmp_path, ENVIRON)
    assert "GITHUB_TOKEN" not in env and "a-secret" not in json.dumps(env)
    assert env["OPENBLAS_NUM_THREADS"] == "1" and env["SPARKBOARD_SANDBOX"] == "bwrap"
    assert env["HOME"] == str(tmp_path / "home") and env["TMPDIR"] == "/tmp"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "checkout")
    own = ("PYTHONPATH", "HOME", "TMPDIR", "PWD")  # wrap's, and bwrap's --chdir
    assert all(sandbox_module.keeps(k) for k in env if k not in own), env


def test_unsealed_the_command_is_as_given(tmp_path: Path) -> None:
    argv, env = Sandbox("none").wrap(
        ["prog", "arg"], checkout=tmp_path, writable=[tmp_path / "h"], env={"A": "1"}
    )
    assert argv == ["prog", "arg"] and env == {"A": "1", "PYTHONPATH": str(tmp_path)}
    with pytest.raises(SandboxError, match="unknown sandbox 'docker'"):
        Sandbox("docker")


def test_probe_without_bwrap_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    with pytest.raises(SandboxError) as caught:
        probe(SEALED, tmp_path / "scratch")
    why = str(caught.value)
    assert "bubblewrap (bwrap) is not installed" in why
    assert "apt-get install bubblewrap" in why and "--unsandboxed" in why
    monkeypatch.undo()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap on the PATH either
    with pytest.raises(SandboxError, match=r"bubblewrap \(bwrap\) is not installed"):
        probe(SEALED, tmp_path / "scratch")
    with pytest.raises(SandboxError, match="not installed"):
        bwrap_path()


def test_probe_on_a_box_that_cannot_make_namespaces_gives_bwraps_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with pytest.raises(SandboxError) as caught:
        probe(SEALED, tmp_path / "scratch")
    assert str(caught.value) == (
        "this box cannot make a sandbox (bwrap): bwrap: setting up uid map: Permission denied"
    )
