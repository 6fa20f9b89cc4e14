"""The sandbox every process that runs a checkout's code lives in: bubblewrap (`bwrap`).

A PR's code runs as the collector's user, which is root in CI and on most GPU boxes. Left in
the collector's world it could attach to its timing parent (ptrace, /proc/PID/mem, a signal),
ask a server that was running before the round (tmux, Ray, sshd) to start work outside its
process tree, change the box's settings (sysctls, the CPU's or the card's clocks), or write what
later processes trust. `wrap` puts a command into a world where none of that exists:

* its own **user namespace**, every capability dropped (`--cap-drop ALL`): root inside it is
  nobody outside, so the card's and the CPU's clocks, and every setting behind a capability,
  are out of reach;
* its own **PID namespace**: it cannot see, signal or ptrace the timing parent, the collector or
  any other process; bwrap is its PID 1 (reaping what it orphans), and when the command ends
  (or the process that started it dies: `--die-with-parent`) the kernel kills everything the
  sandbox forked, detached or not;
* its own **network, IPC and UTS namespaces**: no network, no abstract Unix sockets, no System
  V or POSIX IPC shared with the box; a new session (`--new-session`: no terminal to inject
  keystrokes into);
* a **filesystem of its own**, read-only but for its own scratch and kernel-cache folders: only
  the system folders, the Python installation and its library paths, the checkout and the model
  files are there (so no socket or FIFO of a server is: /tmp, /run, /var and the home folders are
  not), a private /tmp and /dev/shm, a fresh /proc of its own PID namespace with /proc/sys
  read-only (the kernel's sysctls check a file's owner: root's files there would be writable
  through a user namespace mapped to root; the rest stays writable for its own processes, since
  the CUDA driver writes to /proc/self), /sys read-only, a minimal /dev, and on a GPU box the
  NVIDIA device nodes;
* an **environment** of named variables only (`ENV_KEEP`): a token in the collector's
  environment is not the PR's to print into its log.
* its **cores**: the ones it started on (a session's one core, `one_core`): a seccomp filter
  (`--seccomp`, `seccomp_filter`) answers EPERM to `sched_setaffinity`, which any process may
  otherwise call on itself to move onto every core of the box (an engine on two cores timed
  against main's on one), and to io_uring, whose kernel workers may be given other cores; a
  system call of another ABI (32-bit on a 64-bit box) gets EPERM whatever it is, so no other
  number of the same call slips past;

What it cannot do: the processes share the box's cores, memory bandwidth, caches and GPU with
whatever runs beside them (the timing parent stops the engine whose turn it is not: timing.py),
and the kernel is the box's (a kernel exploit is out of scope). `--unsandboxed` runs the same
commands without bwrap, where a box cannot make namespaces; every page of such a round says so.
"""

from __future__ import annotations

import functools
import glob
import os
import platform
import shutil
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("bwrap", "none")
# How the collector tells a timing parent which sandbox to start its engines in
SANDBOX_ENV = "SPARKBOARD_SANDBOX"
SANDBOX_UID = 65534  # the sandbox's own uid and gid (nobody); outside it is the caller's
PROBE_TIMEOUT_S = 60
# The variables a sandboxed command keeps (a name, or a prefix ending in "_"); every other one
# is dropped. PYTHONPATH, HOME and TMPDIR are set by `wrap`.
ENV_KEEP = (
    "PATH",
    "LANG",
    "LC_",
    "TZ",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED",
    "PYTHONUNBUFFERED",
    "OPENBLAS_",
    "OMP_",
    "MKL_",
    "CUDA_",
    "CUPY_",
    "NVIDIA_",
    "LD_LIBRARY_PATH",
    "SPARKBOARD_",
    "CCACHE_",
)
# System folders every command may read (those missing on a box are skipped; a symbolic link
# such as /lib -> usr/lib on a merged-/usr system is recreated as the same link)
SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class SandboxError(Exception):
    """A sandbox cannot be made on this box; the text says why."""


def keeps(name: str) -> bool:
    return any(name == k or (k.endswith("_") and name.startswith(k)) for k in ENV_KEEP)


def library_paths(exclude: Sequence[Path] = ()) -> list[Path]:
    """The folders this interpreter imports from (its prefixes and sys.path), those that exist,
    without `exclude` (a checkout whose code is not the sandbox's)."""
    found = [Path(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)]
    found += [Path(p) for p in sys.path if p and Path(p).is_dir()]
    found += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    skip = {Path(p).resolve() for p in exclude}
    out: list[Path] = []
    for p in found:
        r = p.resolve()
        if r.is_dir() and r not in skip and r not in out:
            out.append(r)
    return [p for p in out if not any(o != p and o in p.parents for o in out)]


def gpu_devices() -> list[str]:
    """The NVIDIA device nodes of this box (empty without a GPU)."""
    return sorted(glob.glob("/dev/nvidia*"))


@dataclass(frozen=True)
class Sandbox:
    """How a checkout's code is sealed. `kind`: 'bwrap', or 'none' (`--unsandboxed`: the same
    command as is). `gpu`: bind the NVIDIA device nodes."""

    kind: str = "bwrap"
    gpu: bool = False
    readable: tuple[str, ...] = field(default_factory=tuple)  # more folders to read (models)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SandboxError(f"unknown sandbox {self.kind!r}: expected one of {', '.join(KINDS)}")

    @property
    def sealed(self) -> bool:
        return self.kind != "none"

    def wrap(
        self,
        argv: Sequence[str],
        *,
        checkout: Path,
        writable: Sequence[Path],
        env: Mapping[str, str],
        python_path: Sequence[Path] = (),
        at: Mapping[Path, str] | None = None,
    ) -> tuple[list[str], dict[str, str] | None]:
        """(argv, environment) that run `argv` in `checkout` inside the sandbox, able to write
        only `writable` (made first), importing from `python_path` (the checkout first, then the
        library folders: the only folders beside the checkout it can read, with the system's and
        `readable`). The first writable folder is its HOME. Sealed, the environment is None
        (bwrap inherits the caller's and gives the command only ENV_KEEP's, `--setenv`).
        `at`: where the checkout or a writable folder appears inside (sealed only; a build at
        fixed paths compiles every checkout with the same arguments, so their objects share one
        compiler cache); the rest appear where they are."""
        for w in writable:
            Path(w).mkdir(parents=True, exist_ok=True)
        inside = {Path(k).resolve(): v for k, v in (at or {}).items()} if self.sealed else {}

        def where(p: Path) -> str:
            r = Path(p).resolve()
            return inside.get(r, str(r))

        paths = [where(checkout), *(str(p) for p in python_path)]
        inner = {k: v for k, v in env.items() if keeps(k)}
        inner["PYTHONPATH"] = os.pathsep.join(paths)
        inner["HOME"] = where(writable[0]) if writable else "/tmp"
        inner["TMPDIR"] = "/tmp"
        if not self.sealed:
            return list(argv), {**env, **{k: inner[k] for k in ("PYTHONPATH",)}}
        cmd = [sys.executable, "-I", "-S", "-c", _LAUNCH, seccomp_hex(), bwrap_path()]
        cmd += [*NAMESPACES, "--seccomp", "FD", "--clearenv"]
        for k, v in sorted(inner.items()):
            cmd += ["--setenv", k, v]
        cmd += _system_binds()
        # a /proc of its own PID namespace, its sysctls read-only (the CUDA driver writes
        # to its own /proc/self: a wholly read-only /proc makes cudaErrorOperatingSystem)
        cmd += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
        cmd += ["--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
        if Path("/sys").is_dir():
            cmd += ["--ro-bind", "/sys", "/sys"]
        if self.gpu:
            for dev in gpu_devices():
                cmd += ["--dev-bind", dev, dev]
        cmd += ["--remount-ro", "/dev"]  # its device nodes still work; /dev/shm stays its own
        seen = set()
        for p in [*python_path, *map(Path, self.readable), Path(checkout)]:
            r = str(Path(p).resolve())
            if r not in seen:
                seen.add(r)
                cmd += ["--ro-bind", r, where(Path(r))]
        for w in writable:
            cmd += ["--bind", str(Path(w).resolve()), where(w)]
        cmd += ["--remount-ro", "/", "--chdir", where(checkout), "--", *argv]
        return cmd, None  # bwrap itself inherits this process's environment; inside: `inner`


# The seccomp filter: system calls a sandboxed process is refused (EPERM), per machine: the audit
# arch of its native ABI and the numbers of sched_setaffinity, io_uring_setup, io_uring_enter and
# io_uring_register (linux/audit.h, the kernel's syscall tables)
SECCOMP_ABIS = {
    "x86_64": (0xC000003E, (203, 425, 426, 427)),
    "aarch64": (0xC00000B7, (122, 425, 426, 427)),
}
_X32_BIT = 0x40000000  # x86_64's x32 ABI: the native arch, numbers with this bit set
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO|EPERM


def seccomp_filter(machine: str) -> bytes:
    """The filter as bwrap's --seccomp reads it: a classic BPF program over seccomp_data (nr at
    offset 0, arch at 4), each instruction (code, jt, jf, k) in native byte order."""
    arch, refused = SECCOMP_ABIS[machine]
    ld, jeq, and_, ret = 0x20, 0x15, 0x54, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, ALU|AND|K, RET|K
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, _RET_EPERM), (ld, 0, 0, 0)]
    prog.append((and_, 0, 0, 0xFFFFFFFF & ~_X32_BIT))
    for i, nr in enumerate(refused):  # each a jump to the last instruction, EPERM
        prog.append((jeq, len(refused) - i, 0, nr))
    prog += [(ret, 0, 0, _RET_ALLOW), (ret, 0, 0, _RET_EPERM)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


@functools.cache
def seccomp_hex() -> str:
    """This machine's filter as the launcher takes it (hex, one argument): the launcher writes
    it to a memory file of its own, so no file of the box's holds it and nothing is left behind
    when a round is killed (the temporary files before were removed only at a clean exit)."""
    machine = platform.machine()
    if machine not in SECCOMP_ABIS:
        raise SandboxError(f"no seccomp filter for this machine ({machine}): run --unsandboxed")
    return seccomp_filter(machine).hex()


# bwrap reads the filter from a file descriptor. This launcher writes it to a memory file
# (memfd) opened at a number no descriptor the caller passed holds (the lowest free one, after
# they are all in place), puts that number after bwrap's --seccomp, and becomes bwrap (exec: the
# same process, the root of the sandbox's tree)
_LAUNCH = """import os, sys
fd = os.memfd_create("sparkboard-seccomp", 0)
os.set_inheritable(fd, True)
os.write(fd, bytes.fromhex(sys.argv[1]))
os.lseek(fd, 0, os.SEEK_SET)
argv = sys.argv[2:]
argv[argv.index("--seccomp") + 1] = str(fd)
os.execv(argv[0], argv)
"""

# Every namespace, the caller's capabilities dropped, killed with its parent
NAMESPACES = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--uid",
    str(SANDBOX_UID),
    "--gid",
    str(SANDBOX_UID),
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
)


def exit_status(sandbox: Sandbox, code: int | None) -> int | None:
    """A sandboxed command's exit as Popen would give it unsealed: bwrap exits 128 + N when
    its command died of signal N, which is -N here (a death by signal may be the box's)."""
    if code is not None and sandbox.sealed and code > 128:
        return -(code - 128)
    return code


def _system_binds() -> list[str]:
    out: list[str] = []
    for p in SYSTEM_PATHS:
        path = Path(p)
        if path.is_symlink():
            out += ["--symlink", os.readlink(path), p]
        elif path.is_dir():
            out += ["--ro-bind", p, p]
    return out


def bwrap_path() -> str:
    """bubblewrap from the PATH, or the one `make` unpacked beside this interpreter (no root)."""
    beside = Path(sys.executable).parent / "bwrap"
    found = shutil.which("bwrap") or (str(beside) if os.access(beside, os.X_OK) else None)
    if found is None:
        raise SandboxError(
            "bubblewrap (bwrap) is not installed: install it (Debian and Ubuntu: apt-get install "
            "bubblewrap; `make` fetches it into .venv/bin), or pass --unsandboxed to run PR code "
            "unsealed"
        )
    return found


@functools.cache
def bwrap_version() -> str:
    try:
        res = subprocess.run(
            [bwrap_path(), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise SandboxError(f"cannot run bwrap: {e}") from None
    return res.stdout.strip() or "bubblewrap"


def describe(kind: str) -> str:
    """What a round's sessions ran in, for its pages: 'bubblewrap 0.8.0' or 'none'."""
    return bwrap_version() if kind == "bwrap" else "none"


def probe(sandbox: Sandbox, scratch: Path, code: str = "pass") -> None:
    """Run `python -c code` in the sandbox once; SandboxError with bwrap's own words if this box
    cannot make one (no user namespaces, a container that forbids them, ...)."""
    scratch.mkdir(parents=True, exist_ok=True)
    argv, env = sandbox.wrap(
        [sys.executable, "-c", code],
        checkout=scratch,
        writable=[scratch / "probe-home"],
        env=dict(os.environ),
        python_path=library_paths(),
    )
    try:
        res = subprocess.run(
            argv,
            env=env or None,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise SandboxError(f"cannot start the sandbox: {e}") from None
    if res.returncode != 0:
        lines = [ln for ln in (res.stderr or "").strip().splitlines() if ln.strip()]
        why = lines[-1][:300] if lines else f"exit code {res.returncode}"
        raise SandboxError(f"this box cannot make a sandbox ({sandbox.kind}): {why}")
