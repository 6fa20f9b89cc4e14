"""The raw samples of a speed document: one row per repetition of each engine it timed.

The one reader of a document's numbers as the store keeps them (store/writer.py) and as the
checks on a PR's session read them (judge/forgery.py): speed axes in tokens/s, memory axes in bytes.
"""

from __future__ import annotations

from collector.axes import axis
from engine.harness.protocol import ConcurrentResult, SweepResult

Sample = tuple[str, str, int, float]  # (side, axis, rep, value)


def compared_widths(doc: object, guard: bool = False) -> list:
    """The widths of a document that are the concurrent decode's axes: a concurrent session's,
    and a target's sweep that measured them (Profile.concurrent_in_sweep); a guard sweep's
    batched decode is verified, not compared."""
    if isinstance(doc, ConcurrentResult):
        return doc.widths
    if isinstance(doc, SweepResult) and not guard:
        return doc.widths
    return []


def samples_of(doc: object, side: str = "pr", guard: bool = False) -> list[Sample]:
    """(side, axis, rep, value) of every raw measurement in a document: the measured engine's
    under `side`, and where main's engine was timed beside it (`baseline`), main's, each
    repetition's pair under the same rep. `guard`: the document is a guard's sweep."""
    if not isinstance(doc, SweepResult | ConcurrentResult):
        return []
    contexts = doc.contexts if isinstance(doc, SweepResult) else []
    widths = compared_widths(doc, guard)
    out = _speed_samples(side, contexts, widths) + _memory_samples(
        side, contexts, doc.measured.memory
    )
    base = doc.baseline
    if base is not None:
        beside = base.contexts, base.widths if widths else []
        out += _speed_samples("main", *beside) + _memory_samples("main", base.contexts, base.memory)
    return out


def _speed_samples(side: str, contexts: list, widths: list) -> list[Sample]:
    out: list[Sample] = []
    for c in contexts:
        out += [(side, axis("decode", c.ctx), i, v) for i, v in enumerate(c.decode_tok_s)]
        out += [(side, axis("prefill", c.ctx), i, v) for i, v in enumerate(c.prefill_tok_s)]
    for w in widths:  # a run that lost tokens is no sample; its index pairs the rest
        out += [(side, axis("concurrent", w.width), i, r.tok_s) for i, r in enumerate(w.runs)
                if r.complete]  # fmt: skip
    return out


def _memory_samples(side: str, contexts: list, mem: object) -> list[Sample]:
    """Memory, read from outside the engine process: one value per session and axis."""
    out: list[Sample] = []
    for c in contexts:
        if c.host_peak:
            out.append((side, axis("mem-peak", c.ctx), 0, float(c.host_peak)))
        if c.gpu_peak:
            out.append((side, axis("vram-peak", c.ctx), 0, float(c.gpu_peak)))
    if mem is not None and mem.host_after_load:
        out.append((side, "mem-load", 0, float(mem.host_after_load)))
    if mem is not None and mem.gpu_after_load:
        out.append((side, "vram-load", 0, float(mem.gpu_after_load)))
    return out
