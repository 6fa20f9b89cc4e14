"""A stand-in for llama.cpp's llama-perplexity --kl-divergence-base (no build needed).

    python3 fake_llama_perplexity.py --model M --file TEXT --ctx-size C --chunks N ... \
        --kl-divergence-base OUT

Writes a logits file in llama-perplexity's format (engine/harness/kld.py) for the text's bytes
as tokens (a vocabulary of VOCAB), the log-probs a hash of the last two tokens; standard
library only (it runs inside the sandbox with the system's python3). SPARKBOARD_FAKE_MODE:
honest; wrong (every log-prob row shifted: a numerics bug); short (a file cut short); fail
(exit 1 with a message).
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
import sys

VOCAB = 16
MODE = os.environ.get("SPARKBOARD_FAKE_MODE", "honest")


def arg(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def logits(context: list[int]) -> list[float]:
    d = hashlib.blake2b(bytes(context[-2:]), digest_size=VOCAB).digest()
    x = [b / 32.0 for b in d]
    if MODE == "wrong":
        x = x[1:] + x[:1]
    return x


def row(x: list[float]) -> bytes:
    mx = max(x)
    mn = max(min(x), mx - 16)
    lse = math.log(sum(math.exp(v - mx) for v in x))
    scale = (mx - mn) / 65535.0
    q = [round((max(v, mn) - mn) / scale) if scale else 0 for v in x]
    q += [0] * (2 * ((VOCAB + 1) // 2) - VOCAB)
    return struct.pack("<ff", scale, mn - mx - lse) + struct.pack(f"<{len(q)}H", *q)


def main(argv: list[str]) -> int:
    if MODE == "fail":
        print("error: failed to load model", file=sys.stderr)
        return 1
    ctx, chunks = int(arg(argv, "--ctx-size")), int(arg(argv, "--chunks"))
    with open(arg(argv, "--file"), "rb") as f:
        text = [b % VOCAB for b in f.read()]
    tokens = (text * (1 + ctx * chunks // max(len(text), 1)))[: ctx * chunks]
    out = [b"_logits_", struct.pack("<3i", ctx, VOCAB, chunks)]
    out.append(struct.pack(f"<{len(tokens)}i", *tokens))
    for c in range(chunks):
        window = tokens[c * ctx : (c + 1) * ctx]
        out += [row(logits(window[: j + 1])) for j in range(ctx // 2, ctx - 1)]
    data = b"".join(out)
    with open(arg(argv, "--kl-divergence-base"), "wb") as f:
        f.write(data[:-3] if MODE == "short" else data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
