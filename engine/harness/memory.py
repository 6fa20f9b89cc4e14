"""Memory of the engine process, read from outside it.

The engine's own VRAM report is the PR's code talking; this is the timing parent reading what
the kernel and the driver say about the process: its resident set (`/proc/PID/status`, VmRSS,
every POLL_S) and, on the GPU, its device memory (`nvidia-smi --query-compute-apps`, every
GPU_POLL_S). `after_load` is the first reading once the model has loaded; `peak` the largest.
A process that resets its own high-water mark cannot hide from readings it does not make.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from engine.harness.protocol import MemoryReport

POLL_S = 0.02
GPU_POLL_S = 0.5
NVIDIA_SMI_TIMEOUT_S = 10


def resident_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def gpu_bytes(pid: int) -> int | None:
    """The device memory nvidia-smi charges to `pid`, or None where it cannot say."""
    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for line in res.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            return int(parts[1]) * 2**20
    return None


class MemoryWatch:
    """Polls a process's memory in a thread from construction until `stop()`."""

    def __init__(self, pid: int, gpu: bool) -> None:
        self.pid, self.gpu = pid, gpu
        self.host = [resident_bytes(pid) or 0]
        self.device: list[int] = []
        if gpu and (g := gpu_bytes(pid)) is not None:
            self.device.append(g)
        self._host_mark = self._dev_mark = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        ticks = 0
        while not self._done.wait(POLL_S):
            ticks += 1
            if (r := resident_bytes(self.pid)) is not None:
                self.host.append(r)
            if self.gpu and ticks * POLL_S >= GPU_POLL_S:
                ticks = 0
                if (g := gpu_bytes(self.pid)) is not None:
                    self.device.append(g)

    def mark(self) -> tuple[int, int | None]:
        """The largest readings since the last mark (host, device): a context's own peak."""
        host = max(self.host[self._host_mark :], default=self.host[-1])
        dev = max(self.device[self._dev_mark :], default=self.device[-1] if self.device else None)
        self._host_mark, self._dev_mark = len(self.host), len(self.device)
        return host, dev

    def stop(self) -> MemoryReport:
        self._done.set()
        self._thread.join()
        return MemoryReport(
            host_after_load=self.host[0],
            host_peak=max(self.host),
            gpu_after_load=self.device[0] if self.device else None,
            gpu_peak=max(self.device) if self.device else None,
        )
