"""A fake `python -m engine.harness.bench` speaking the bench protocol (a collector test fixture).

Like the real one it is the timing parent: it runs from main's checkout and measures the engine
of `--engine-checkout` (the PR's), whose engine/fake_behavior.py says how that engine behaves.
"""

import argparse
import importlib.util
import json
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
    spec.loader.exec_module(module)
    sys.modules["engine.fake_behavior"] = module
    import engine

    engine.fake_behavior = module


_engine_behaviour()

from engine import fake_behavior as B  # noqa: E402
from engine._fake_common import header, jitter, measured, misbehave, speed  # noqa: E402


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
            prefill_tok_s=5000.0 * speed(a.model, "prefill") * jitter(),
            decode_tok_s=1000.0 * speed(a.model, "decode") * jitter(),
        )
    else:
        raise SystemExit(f"error: unknown command {a.command}")
    doc["measured"] = measured()
    with open(a.out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
