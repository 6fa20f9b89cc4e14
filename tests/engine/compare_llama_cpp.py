"""Independent check: our NumPy forward pass and tokenizer against llama.cpp (not a test).

llama-cpp-python lives in a throwaway venv, never a project dependency:

    python3 -m venv /tmp/lcpp && /tmp/lcpp/bin/pip install llama-cpp-python numpy
    python tests/engine/compare_llama_cpp.py --llama-python /tmp/lcpp/bin/python --tokens 512

It tokenizes data/corpus.txt with both tokenizers (they must agree), runs llama.cpp on our
token ids with logits_all=True, and prints top-1 agreement, mean KL(llama.cpp || ours) and
both perplexities over the teacher-forced positions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

_LLAMA_SIDE = r"""
import json, sys
import numpy as np
from llama_cpp import Llama
path, text_file, ids_file, out = sys.argv[1:5]
llm = Llama(model_path=path, n_ctx=4096, logits_all=True, n_threads=2, verbose=False, n_batch=512)
text = open(text_file, encoding="utf-8").read()
theirs = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
ids = json.load(open(ids_file))
llm.eval(ids)
logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
np.save(out, logits)
json.dump(theirs, open(out + ".tokens.json", "w"))
"""


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-python", default="/tmp/lcpp/bin/python")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--text-file", default="data/corpus.txt")
    ap.add_argument("--tokens", type=int, default=512)
    args = ap.parse_args()

    from engine.gguf_file import open_gguf
    from engine.models import open_runner, open_tokenizer, resolve, smollm2_path

    spec = resolve(args.model)
    path = spec.path or smollm2_path()
    text = Path(args.text_file).read_text(encoding="utf-8")
    tok = open_tokenizer(args.model)
    ours_all = tok.encode(text)
    ids = ours_all[: args.tokens]
    open_gguf(path)
    with tempfile.TemporaryDirectory() as tmp:
        ids_file, out = Path(tmp) / "ids.json", str(Path(tmp) / "logits.npy")
        ids_file.write_text(json.dumps(ids))
        subprocess.run(
            [args.llama_python, "-c", _LLAMA_SIDE, str(path), args.text_file, str(ids_file), out],
            check=True,
            timeout=1800,
        )
        ref = np.load(out)
        theirs_all = json.loads(Path(out + ".tokens.json").read_text())

    runner = open_runner(args.model, "numpy")
    runner.reset(1, len(ids))
    ours = runner.prefill(0, np.asarray(ids), all_logits=True)

    lp_ref, lp_ours = log_softmax(ref[:-1]), log_softmax(ours[:-1])
    targets = np.asarray(ids[1:])
    rows = np.arange(len(targets))
    top1 = float(np.mean(lp_ref.argmax(-1) == lp_ours.argmax(-1)))
    kl = np.sum(np.exp(lp_ref) * (lp_ref - lp_ours), axis=-1)
    ppl_ref = float(np.exp(-lp_ref[rows, targets].mean()))
    ppl_ours = float(np.exp(-lp_ours[rows, targets].mean()))
    same_tokens = theirs_all == ours_all
    first_diff = next(
        (i for i, (a, b) in enumerate(zip(theirs_all, ours_all, strict=False)) if a != b), None
    )
    print(
        json.dumps(
            {
                "model": args.model,
                "positions": int(len(targets)),
                "tokenizer_identical": same_tokens,
                "corpus_tokens_ours": len(ours_all),
                "corpus_tokens_llama_cpp": len(theirs_all),
                "first_token_difference": first_diff,
                "top1": round(top1, 4),
                "kl_mean": float(kl.mean()),
                "kl_max": float(kl.max()),
                "ppl_llama_cpp": round(ppl_ref, 4),
                "ppl_ours": round(ppl_ours, 4),
                "ppl_ratio": round(ppl_ours / ppl_ref, 4),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
