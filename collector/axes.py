"""Axis names and the model names a manifest may use.

An axis is one scored measurement of a model: 'decode@128' (decode tok/s at context 128),
'prefill@4096' (prefill tok/s of a 4096-token prompt) and 'concurrent@8' (aggregate decode
tok/s of 8 sequences in flight) are speeds, higher is better. Memory axes are bytes of the
engine process read from outside it, lower is better: 'mem-load' (resident after the model
loaded; 'vram-load' on the GPU) and 'mem-peak@128' (the most while context 128 was measured;
'vram-peak@128').
"""

from __future__ import annotations

import functools
import re

BASE_MODELS = ("smollm2-135m", "tiny", "llama-1b", "llama-8b", "qwen3-8b")
FORMATS = ("f16", "q8_0", "q4_0")
EXTRA_FORMATS = {"tiny": ("f32",)}

_AXIS = re.compile(r"^(decode|prefill|concurrent|mem-peak|vram-peak)@([1-9][0-9]*)$")
LOAD_AXES = ("mem-load", "vram-load")  # memory after load: no context
SPEED_KINDS = ("decode", "prefill", "concurrent")


@functools.cache
def known_models() -> list[str]:
    """Every model name the engine accepts: base names and base:format.

    The engine's own list (engine.models.list_models) when it can be imported, else the
    shared contract's names.
    """
    try:
        from engine.models import list_models

        listed = list_models()
    except Exception:  # an engine without the list, or one that cannot import here
        listed = []
    names: list[str] = []
    for full in listed:
        base = full.partition(":")[0]
        if base not in names:
            names.append(base)
        if full not in names:
            names.append(full)
    if names:
        return names
    for base in BASE_MODELS:
        names.append(base)
        if base == "smollm2-135m":
            continue  # the real file has one format
        for fmt in FORMATS + EXTRA_FORMATS.get(base, ()):
            names.append(f"{base}:{fmt}")
    return names


def is_known_model(name: str) -> bool:
    return name in known_models()


def axis(kind: str, n: int) -> str:
    return f"{kind}@{n}"


def is_axis(name: str) -> bool:
    return name in LOAD_AXES or _AXIS.match(name) is not None


def parse_axis(name: str) -> tuple[str, int]:
    if name in LOAD_AXES:
        return name, 0
    m = _AXIS.match(name)
    if not m:
        raise ValueError(f"not an axis name: {name!r}")
    return m.group(1), int(m.group(2))


def is_memory_axis(name: str) -> bool:
    """Bytes, lower is better: never a tier, only a floor."""
    return parse_axis(name)[0] not in SPEED_KINDS


def axis_sort_key(name: str) -> tuple[int, int, int]:
    """Order like the reference tables: by context, decode before prefill, then widths, then
    memory."""
    kind, n = parse_axis(name)
    if kind == "concurrent":
        return (1, n, 0)
    if kind in SPEED_KINDS:
        return (0, n, 0 if kind == "decode" else 1)
    return (2, n, 0 if kind.endswith("load") else 1)


def short_ctx(n: int) -> str:
    """128 -> '128', 4096 -> '4k', 32768 -> '32k' (the reference tables' spelling)."""
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return str(n)
