"""A fake `python -m engine.harness.score` (score and prefill-check), a collector test fixture."""

import argparse
import json
import math
import sys

from engine import fake_behavior as B
from engine._fake_common import header, misbehave


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--model", required=True)
    ap.add_argument("--text-file", default="data/corpus.txt")
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--prefix", default="128")
    ap.add_argument("--positions", type=int, default=16)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", required=True)
    misbehave(sys.argv[1], sys.argv[sys.argv.index("--out") + 1])
    a = ap.parse_args()
    doc = header(a.model, a.backend)
    if a.command == "score":
        with open(a.text_file, encoding="utf-8") as f:
            text = f.read()
        tokens = [b % 50 for b in text.encode()][:120]
        positions = []
        for i in range(len(tokens) - 1):
            nxt = tokens[i + 1]
            best = (nxt + 7) % 50 if (B.ACCURACY_BROKEN and i % 3 == 0) else nxt
            probs = {best: 0.6}
            for j in range(1, a.topk):
                probs[(best + j) % 50] = 0.3 / 2**j
            if nxt not in probs:
                probs[nxt] = 1e-4
            top = sorted(probs.items(), key=lambda kv: -kv[1])[: a.topk]
            positions.append(
                {
                    "argmax": best,
                    "target_logprob": math.log(probs[nxt]),
                    "topk": [[t, math.log(p)] for t, p in top],
                }
            )
        doc.update(kind="score", topk=a.topk, tokens=tokens, positions=positions)
    elif a.command == "prefill-check":
        doc.update(
            kind="prefill-check",
            prefixes=[
                {
                    "prefix": int(p),
                    "positions": a.positions,
                    "top1": 0.98,
                    "kl_mean": B.PREFILL_KL,
                    "kl_max": B.PREFILL_KL * 4,
                }
                for p in a.prefix.split(",")
            ],
        )
    else:
        raise SystemExit(f"error: unknown command {a.command}")
    with open(a.out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
