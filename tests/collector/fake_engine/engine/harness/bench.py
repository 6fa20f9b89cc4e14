"""A fake `python -m engine.harness.bench` speaking the bench protocol (a collector test fixture).

Like the real one it is the timing parent: it runs from main's checkout and measures the engine
of `--engine-checkout` (the PR's), whose engine/fake_behavior.py says how that engine behaves,
with main's engine (its own checkout's fake_behavior.py) beside it when given
`--baseline-checkout`: each repetition a pair, as the real parent times them turn by turn.
"""

import argparse
import importlib.util
import json
import os
import sys

from engine import fake_behavior as MAIN  # this checkout's (main's) behaviour, imported first


def _engine_behaviour() -> None:
    """Make `engine.fake_behavior` the measured checkout's, as the real harness's child would see."""
    if "--engine-checkout" not in sys.argv:
        return
    checkout = sys.argv[sys.argv.index("--engine-checkout") + 1]
    spec = importlib.util.spec_from_file_location(
        "engine.fake_behavior_pr", f"{checkout}/engine/fake_behavior.py"
    )
    module = importlib.util.module_from_spec(spec)
    parent_cache = os.environ.get("CUPY_CACHE_DIR")
    if "--engine-cache" in sys.argv:  # the child's own cache, as the real engine child has it
        os.environ["CUPY_CACHE_DIR"] = sys.argv[sys.argv.index("--engine-cache") + 1]
    spec.loader.exec_module(module)
    if parent_cache is not None:
        os.environ["CUPY_CACHE_DIR"] = parent_cache
    sys.modules["engine.fake_behavior"] = module
    import engine

    engine.fake_behavior = module


_engine_behaviour()

from engine import _fake_common as C  # noqa: E402
from engine import fake_behavior as B  # noqa: E402
from engine._fake_common import header, measured, misbehave  # noqa: E402


def memory(model: str, b=B) -> int:  # noqa: ANN001
    """Bytes resident in an engine process: FAKE_ENGINE_MEMORY (unset: none read), plus what
    its checkout keeps for `model` (fake_behavior.MEMORY)."""
    base = int(os.environ.get("FAKE_ENGINE_MEMORY", "0"))
    if not base:
        return 0
    return int(base * C.jitter()) + getattr(b, "MEMORY", {}).get(model, 0)


def wrong_batched(model: str) -> bool:
    return model in getattr(B, "WRONG_BATCHED", set())


def width_runs(b, model: str, width: int, tokens: int, runs: int) -> list[dict]:  # noqa: ANN001
    out = []
    for _ in range(runs):
        tok_s = 800.0 * width**0.5 * C.speed(model, "concurrent", b) * C.jitter()
        exp = width * tokens
        lost = 1 if b.FAIL.get("concurrent") == "lossy" else 0
        out.append(
            {
                "tokens_expected": exp,
                "tokens_decoded": exp - lost,
                "seconds": exp / tok_s,
                "tok_s": tok_s,
            }
        )
    return out


def contexts(b, model: str, ctxs: list[int], tokens: int, reps: int) -> list[dict]:  # noqa: ANN001
    return [
        {
            "ctx": c,
            "decode_tokens": tokens,
            "decode_tok_s": [
                1000.0 / (1 + c / 512) * C.speed(model, "decode", b) * C.jitter()
                for _ in range(reps)
            ],
            "prefill_tok_s": [
                5000.0 * C.speed(model, "prefill", b) * C.jitter() for _ in range(reps)
            ],
        }
        for c in ctxs
    ]


def longctx_speeds(b, model: str) -> dict:  # noqa: ANN001
    return {
        "prefill_tok_s": 5000.0
        * C.speed(model, "prefill", b)
        * C.path_speed(model, "longctx", b)
        * C.jitter(),
        "decode_tok_s": 1000.0 * C.speed(model, "decode", b) * C.jitter(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", default="128")
    ap.add_argument("--widths", default="2")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)  # concurrent's; longctx's prefills
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", required=True)
    ap.add_argument("--engine-checkout", default=None)
    ap.add_argument("--baseline-checkout", default=None)
    ap.add_argument("--sandbox", default="none")
    ap.add_argument("--scratch", default=None)
    ap.add_argument("--engine-cache", default=None)
    ap.add_argument("--baseline-cache", default=None)
    ap.add_argument("--min-time", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--prefill-tokens", type=int, default=0)
    ap.add_argument("--memory-budget", type=int, default=1)
    ap.add_argument("--width-tokens", type=int, default=None)  # sweep --widths: a guard's batch
    ap.add_argument("--width-runs", type=int, default=2)
    a, _ = ap.parse_known_args()
    if a.baseline_checkout and getattr(MAIN, "FAIL", {}).get(a.command):  # it loads first here
        print("error: main's engine process exited with code 1", file=sys.stderr)
        sys.exit(3)  # main's engine beside the PR's failed: engine.cli_common.EXIT_BASELINE
    misbehave(sys.argv[1], sys.argv[sys.argv.index("--out") + 1])
    a = ap.parse_args()
    doc = header(a.model, a.backend)
    sides = [B] + ([MAIN] if a.baseline_checkout else [])
    parts = []
    for b in sides:
        part: dict = {}
        if a.command == "sweep":
            part["contexts"] = contexts(
                b, a.model, [int(c) for c in a.ctx.split(",")], a.tokens, a.reps
            )
            if a.width_tokens:
                ws = [int(w) for w in a.widths.split(",")]
                part["widths"] = [
                    {"width": w, "prompt_len": a.prompt_len,
                     "runs": width_runs(b, a.model, w, a.width_tokens, a.width_runs)}
                    for w in ws
                ]  # fmt: skip
        elif a.command == "concurrent":
            part["widths"] = [
                {"width": w, "prompt_len": a.prompt_len,
                 "runs": width_runs(b, a.model, w, a.tokens, a.runs)}
                for w in (int(w) for w in a.widths.split(","))
            ]  # fmt: skip
        parts.append(part)
    if a.command == "sweep":
        doc.update(kind="sweep", tokens=a.tokens, reps=a.reps, contexts=parts[0]["contexts"])
        if a.width_tokens:
            doc.update(widths=parts[0]["widths"], width_tokens=a.width_tokens)
    elif a.command == "concurrent":
        doc.update(kind="concurrent", tokens=a.tokens, widths=parts[0]["widths"])
    elif a.command == "longctx":  # the long-context memory check: it completes (main beside)
        doc.update(
            kind="longctx",
            ctx=int(a.ctx),
            tokens=a.tokens,
            budget_bytes=a.memory_budget,
            completed=True,
            runs=a.runs if "--runs" in sys.argv else 1,
            **longctx_speeds(B, a.model),
        )
        if a.baseline_checkout:
            doc["main"] = {"commit": "unknown", "first": True, **longctx_speeds(MAIN, a.model)}
    else:
        raise SystemExit(f"error: unknown command {a.command}")
    doc["measured"] = measured()
    v = doc["measured"]["verification"]
    if a.command == "sweep" and a.width_tokens:  # --widths after the contexts, same process
        for w in doc["widths"]:
            wrong = wrong_batched(a.model)
            v["decode_margins"] += [5.0 if wrong else 0.0] * (
                w["width"] * a.width_tokens * a.width_runs
            )
    elif a.command == "concurrent" and wrong_batched(a.model):  # every output is batched
        v["decode_margins"] = [5.0] * len(v["decode_margins"])
    for b, part in zip(sides, parts, strict=True):
        resident = memory(a.model, b)
        if a.command == "sweep" and resident:  # read from outside the engine process
            for c in part["contexts"]:
                c["host_peak"] = resident
            part["memory"] = {"host_after_load": resident, "host_peak": resident}
    if sides[0] is B and "memory" in parts[0]:
        doc["measured"]["memory"] = parts[0].pop("memory")
    if len(parts) > 1 and a.command != "longctx":  # longctx's: main's own run of the check
        base = parts[1]
        doc["baseline"] = {
            "commit": "main",
            **base,
            "timing": measured(honest=True)["timing"],
            "idle": C.idle(honest=True),
        }
        if a.command == "concurrent":
            doc["baseline"].pop("contexts", None)
    with open(a.out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
