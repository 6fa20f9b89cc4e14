"""A fake `python -m engine.harness.bench` speaking the bench protocol (a collector test fixture).

Like the real one it is the timing parent: it runs from main's checkout and measures the engine
of `--engine-checkout` (the PR's), whose engine/fake_behavior.py says how that engine behaves.
"""

import argparse
import importlib.util
import json
import os
import sys


def _engine_behaviour() -> None:
    """Make `engine.fake_behavior` the measured checkout's, as the real harness's child would see."""
    if "--engine-checkout" not in sys.argv:
        return
    checkout = sys.argv[sys.argv.index("--engine-checkout") + 1]
    spec = importlib.util.spec_from_file_location(
        "engine.fake_behavior", f"{checkout}/engine/fake_behavior.py"
    )
    module = importlib.util.module_from_spec(spec)
    parent_cache = os.environ.get("CUPY_CACHE_DIR")
    if os.environ.get("SPARKBOARD_ENGINE_KERNEL_CACHE"):  # the child's own cache (timing.py)
        os.environ["CUPY_CACHE_DIR"] = os.environ["SPARKBOARD_ENGINE_KERNEL_CACHE"]
    spec.loader.exec_module(module)
    if parent_cache is not None:
        os.environ["CUPY_CACHE_DIR"] = parent_cache
    sys.modules["engine.fake_behavior"] = module
    import engine

    engine.fake_behavior = module


_engine_behaviour()

from engine import fake_behavior as B  # noqa: E402
from engine._fake_common import header, jitter, measured, misbehave, path_speed, speed  # noqa: E402


def memory(model: str) -> int:
    """Bytes resident in the engine process: FAKE_ENGINE_MEMORY (unset: none read), plus what
    the measured checkout keeps for `model` (fake_behavior.MEMORY)."""
    base = int(os.environ.get("FAKE_ENGINE_MEMORY", "0"))
    if not base:
        return 0
    return int(base * jitter()) + getattr(B, "MEMORY", {}).get(model, 0)


def wrong_batched(model: str) -> bool:
    return model in getattr(B, "WRONG_BATCHED", set())


def batched(doc: dict, model: str, widths: list[int], tokens: int, runs: int, prompt_len: int):
    """A sweep's `widths` (a guard's batched decode, after its contexts): runs of `widths`
    sequences decoded together, `tokens` each, their outputs' margins added to the sweep's
    verification (wrong when fake_behavior.WRONG_BATCHED names the model)."""
    wrong = wrong_batched(model)
    v = doc["measured"]["verification"]
    ws = []
    for w in widths:
        rs = []
        for _ in range(runs):
            tok_s = 800.0 * w**0.5 * speed(model, "concurrent") * jitter()
            rs.append(
                {
                    "tokens_expected": w * tokens,
                    "tokens_decoded": w * tokens,
                    "seconds": w * tokens / tok_s,
                    "tok_s": tok_s,
                }
            )
        ws.append({"width": w, "prompt_len": prompt_len, "runs": rs})
        v["decode_margins"] += [5.0 if wrong else 0.0] * (w * tokens * runs)
    return ws


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", default="128")
    ap.add_argument("--widths", default="2")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", required=True)
    ap.add_argument("--engine-checkout", default=None)
    ap.add_argument("--memory-budget", type=int, default=1)
    ap.add_argument("--width-tokens", type=int, default=None)  # sweep --widths: a guard's batch
    ap.add_argument("--width-runs", type=int, default=2)
    misbehave(sys.argv[1], sys.argv[sys.argv.index("--out") + 1])
    a = ap.parse_args()
    doc = header(a.model, a.backend)
    if a.command == "sweep":
        ctxs = [int(c) for c in a.ctx.split(",")]
        doc.update(
            kind="sweep",
            tokens=a.tokens,
            reps=a.reps,
            contexts=[
                {
                    "ctx": c,
                    "decode_tokens": a.tokens,
                    "decode_tok_s": [
                        1000.0 / (1 + c / 512) * speed(a.model, "decode") * jitter()
                        for _ in range(a.reps)
                    ],
                    "prefill_tok_s": [
                        5000.0 * speed(a.model, "prefill") * jitter() for _ in range(a.reps)
                    ],
                }
                for c in ctxs
            ],
        )
    elif a.command == "concurrent":
        widths = [int(w) for w in a.widths.split(",")]
        ws = []
        for w in widths:
            runs = []
            for _ in range(a.runs):
                tok_s = 800.0 * w**0.5 * speed(a.model, "concurrent") * jitter()
                exp = w * a.tokens
                lost = 1 if B.FAIL.get("concurrent") == "lossy" else 0
                runs.append(
                    {
                        "tokens_expected": exp,
                        "tokens_decoded": exp - lost,
                        "seconds": exp / tok_s,
                        "tok_s": tok_s,
                    }
                )
            ws.append({"width": w, "prompt_len": a.prompt_len, "runs": runs})
        doc.update(kind="concurrent", tokens=a.tokens, widths=ws)
    elif a.command == "longctx":  # the long-context memory check: it completes
        doc.update(
            kind="longctx",
            ctx=int(a.ctx),
            tokens=a.tokens,
            budget_bytes=a.memory_budget,
            completed=True,
            prefill_tok_s=5000.0
            * speed(a.model, "prefill")
            * path_speed(a.model, "longctx")
            * jitter(),
            decode_tok_s=1000.0 * speed(a.model, "decode") * jitter(),
        )
    else:
        raise SystemExit(f"error: unknown command {a.command}")
    doc["measured"] = measured()
    if a.command == "sweep" and a.width_tokens:  # --widths after the contexts, same process
        widths = [int(w) for w in a.widths.split(",")]
        args = (a.model, widths, a.width_tokens, a.width_runs, a.prompt_len)
        doc.update(widths=batched(doc, *args), width_tokens=a.width_tokens)
    elif a.command == "concurrent" and wrong_batched(a.model):  # every output is batched
        v = doc["measured"]["verification"]
        v["decode_margins"] = [5.0] * len(v["decode_margins"])
    resident = memory(a.model)
    if a.command == "sweep" and resident:  # read from outside the engine process, like main's
        for c in doc["contexts"]:
            c["host_peak"] = resident
        doc["measured"]["memory"] = {"host_after_load": resident, "host_peak": resident}
    with open(a.out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
