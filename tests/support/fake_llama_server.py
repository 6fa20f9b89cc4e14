"""A stand-in for llama.cpp's llama-server, for the tests of served engines (no build needed).

    python3 fake_llama_server.py --model M --host /path/server.sock --parallel N ... (its flags)

It reads the first bytes of its --model (a GGUF file, or it exits as llama-server does) and
speaks the part of llama-server's HTTP API the harness uses (GET /health, POST /completion
with token-id prompts, greedy, `n_probs`, `timings`) over a Unix socket, standard library only
(it runs inside the sandbox with the system's python3). Its "model" is a hash: at a context, 8
candidate tokens get logits from the last four tokens, every other token logit 0, so greedy
tokens and log-probs are exact and cheap; each token costs a little CPU, like a real one.

SPARKBOARD_FAKE_MODE picks how it behaves (a PR's server):
  honest    computes the model (the default)
  wrong     every predicted token one past the model's (a numerics bug)
  decodebug past a request's first token (its decode path, a token a step) the candidates'
            logits 1.25 times the model's: the same greedy tokens, other log-probs (a numerics
            bug in the decode's kernels alone)
  busy      keeps a core busy from its first answer on (work while it is not its turn)
  garbage   answers ids outside the vocabulary
  nullprob  its last top log-prob null (a probability of 0, as llama-server writes minus infinity)
  allprobs  log-probs for every token, a multiple of PARTIAL too (where main's server withholds
            them)
  noprobs   no log-probs at all (withholds digests main's server sends)
  memhog    holds a MiB per prompt token from 256 tokens on (dies where that is beyond its
            memory: the long-context check)
  startbug  HTTP 500 to a generation whose first token is a multiple of 5 (as llama-server
            0.3.30-0.3.35 answers one that starts with bytes that are not UTF-8): a bug that
            main's build and an honest PR's share
SPARKBOARD_FAKE_VOCAB is the vocabulary's size; SPARKBOARD_FAKE_WORK the loop per token;
SPARKBOARD_FAKE_LINK a socket of the box the server links in place of its own.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

VOCAB = int(os.environ.get("SPARKBOARD_FAKE_VOCAB", "49152"))
MODE = os.environ.get("SPARKBOARD_FAKE_MODE", "honest")
WORK = int(os.environ.get("SPARKBOARD_FAKE_WORK", "3000"))
CANDIDATES = 8
# as llama-server sends no log-probs for a token that ends inside a UTF-8 character (a byte
# token), this one sends none for a multiple of PARTIAL (the token after it completes it)
PARTIAL = 11


def logits(context: list[int]) -> dict[int, float]:
    """The candidates' logits at this context (every other token: 0)."""
    key = ",".join(map(str, context[-4:])).encode()
    d = hashlib.blake2b(key, digest_size=4 * CANDIDATES * 2).digest()
    out: dict[int, float] = {}
    for i in range(CANDIDATES):
        tok = int.from_bytes(d[4 * i : 4 * i + 4], "little") % VOCAB
        out[tok] = 2.0 + 6.0 * d[4 * CANDIDATES + i] / 255.0
    return out


def log_probs(
    context: list[int], n: int, scale: float = 1.0
) -> tuple[int, list[tuple[int, float]]]:
    """The greedy token and the top-n (id, log-prob) at this context (`scale`: the candidates'
    logits scaled, a decode-path bug)."""
    sum(i * i for i in range(WORK))  # a token's work
    cand = {t: v * scale for t, v in logits(context).items()}
    z = math.log(sum(math.exp(v) for v in cand.values()) + (VOCAB - len(cand)))
    ranked = sorted(cand.items(), key=lambda kv: (-kv[1], kv[0]))
    top = [(t, v - z) for t, v in ranked]
    t = 0
    while len(top) < n:
        if t not in cand:
            top.append((t, -z))
        t += 1
    return ranked[0][0], top[:n]


def complete(body: dict) -> dict:
    t0 = time.perf_counter()
    context = [int(t) for t in body["prompt"]]
    if MODE == "memhog" and len(context) >= 256:  # a copy of everything, at a long context
        try:
            HOARD.append(bytearray(len(context) * 2**20))
        except MemoryError:  # as llama-server's std::bad_alloc: it aborts
            os._exit(134)
    for _ in context:  # the prompt's work (no cache here: every request prefills it whole)
        sum(i * i for i in range(WORK // 8))
    t1 = time.perf_counter()
    n_probs, made, probs = int(body.get("n_probs", 0)), [], []
    for k in range(int(body["n_predict"])):
        scale = 1.25 if MODE == "decodebug" and k > 0 else 1.0
        tok, top = log_probs(context, max(n_probs, 1), scale)
        if MODE == "wrong":
            tok = (tok + 1) % VOCAB
        if MODE == "garbage":
            tok = VOCAB + 7
        made.append(tok)
        if n_probs and (tok % PARTIAL or MODE == "allprobs") and MODE != "noprobs":
            rows = [{"id": i, "logprob": lp} for i, lp in top]
            if MODE == "nullprob":  # a probability of 0, as llama-server's JSON writes it
                rows[-1]["logprob"] = None
            probs.append({"id": tok, "logprob": top[0][1], "top_logprobs": rows})
        context.append(tok)
    t2 = time.perf_counter()
    answer = {
        "tokens": made,
        "content": "",
        "stop": True,
        "id_slot": body.get("id_slot", 0),
        "timings": {
            "prompt_n": len(body["prompt"]),
            "prompt_ms": (t1 - t0) * 1e3,
            "predicted_n": len(made),
            "predicted_ms": (t2 - t1) * 1e3,
        },
    }
    if probs:  # llama-server leaves the key out when every token's were withheld
        answer["completion_probabilities"] = probs
    return answer


BUSY = threading.Event()
HOARD: list[bytearray] = []


def spin() -> None:
    while True:
        pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def reply(self, doc: dict, status: int = 200) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
        if MODE == "busy" and not BUSY.is_set():  # from its first answer on, a core kept busy
            BUSY.set()
            threading.Thread(target=spin, daemon=True).start()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.reply({"status": "ok"})

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length", "0"))
        answer = complete(json.loads(self.rfile.read(n)))
        if MODE == "startbug" and answer["tokens"] and answer["tokens"][0] % 5 == 0:
            self.reply({"error": {"code": 500, "message": "output does not match"}}, 500)
            return
        self.reply(answer)

    def address_string(self) -> str:
        return "unix"


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def main(argv: list[str]) -> None:
    host, model = argv[argv.index("--host") + 1], argv[argv.index("--model") + 1]
    try:  # as llama-server, a model it cannot read ends it (the model itself is a hash here)
        with open(model, "rb") as f:
            if f.read(4) != b"GGUF":
                raise OSError("not a GGUF file")
    except OSError as e:
        print(f"error: failed to load model {model}: {e}", file=sys.stderr)
        sys.exit(1)
    time.sleep(0.1)  # "loading"
    decoy = os.environ.get("SPARKBOARD_FAKE_LINK")
    if decoy:  # listen elsewhere, and put a link to another socket of the box in its place
        server = Server(host + ".real", Handler)
        os.symlink(decoy, host)
        server.serve_forever()
    Server(host, Handler).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
