"""What a measurement ran on: the CPU model and NumPy version, or the GPU, driver and CUDA runtime.

Every harness document carries this (engine.harness.protocol.DeviceInfo) so that numbers from
different machines are never compared as if they came from one.
"""

from __future__ import annotations

import platform
import re
import socket
from pathlib import Path

from engine.harness.protocol import DeviceInfo

_MAX_NAME = 200


def _clip(text: str, limit: int = _MAX_NAME) -> str:
    return " ".join(text.split())[:limit]


def cpu_model_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                return _clip(value)
    except OSError:
        pass
    return _clip(platform.processor() or platform.machine() or "unknown CPU")


def _cuda_version(v: int) -> str:
    """CUDA encodes versions as 1000*major + 10*minor: 12080 -> '12.8'."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def nvidia_kernel_driver(proc_file: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The NVIDIA kernel driver's version ("580.82.07"), where the driver exposes it."""
    try:
        first = proc_file.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", first)
    return match.group(1) if match else None


def _host() -> str:
    try:
        return _clip(socket.gethostname())
    except OSError:
        return ""


def describe_numpy() -> DeviceInfo:
    import numpy

    return DeviceInfo(
        backend="numpy",
        name=cpu_model_name() or "unknown CPU",
        driver=None,
        runtime=f"numpy {numpy.__version__}",
        host=_host(),
    )


def _driver_text(kernel: str | None, cuda: str) -> str:
    """'580.82.07 (CUDA 13.0)': the driver and the newest CUDA it supports."""
    return f"{kernel} (CUDA {cuda})" if kernel else f"CUDA {cuda}"


def describe_cupy() -> DeviceInfo:
    import cupy

    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(rt.getDevice())
    name = props["name"]
    if isinstance(name, bytes):
        name = name.decode("utf-8", errors="replace")
    return DeviceInfo(
        backend="cupy",
        name=_clip(str(name)) or "unknown GPU",
        driver=_driver_text(nvidia_kernel_driver(), _cuda_version(rt.driverGetVersion())),
        runtime=f"CUDA {_cuda_version(rt.runtimeGetVersion())}, cupy {cupy.__version__}",
        host=_host(),
    )


def describe_device(backend: str) -> DeviceInfo:
    """Describe the device of a runner's backend ('numpy' or 'cupy')."""
    return describe_cupy() if backend == "cupy" else describe_numpy()
