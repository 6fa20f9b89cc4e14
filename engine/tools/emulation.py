"""The CUDA backend's float16 roundings, emulated on the CPU: how much of a GPU-vs-NumPy logit
difference they explain, without a GPU.

    python -m engine.tools.emulation --model smollm2-135m --prompts random --trials 20

`Float16Emulation` is the NumPy reference runner with the roundings the GPU makes, each one
switchable: "gemm" rounds every prefill GEMM's activations to float16 (the GPU feeds cuBLAS
float16 normed rows, attention outputs and SwiGLU outputs), "weights" rounds the dequantized
weights of those GEMMs (the GPU dequantizes into float16), "kv" stores the KV cache in float16
and rounds prefill's q (the prefill attention multiplies float16 on tensor cores). Decode's
own arithmetic (int8 activations for quantized weights) and the float16 softmax weights of
the prefill attention are not emulated. The command runs tests/gpu/test_model_gpu.py's
procedure (prefill with all logits, then teacher-forced decode) against the plain reference
and prints what the roundings moved. Imports no CuPy.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
import numpy as np

from engine.cli_common import cli_errors
from engine.errors import EngineError
from engine.harness.score import log_softmax
from engine.numpy_backend import NumpyRunner
from engine.runner import Runner
from engine.weights import ModelWeights

ROUNDINGS = ("gemm", "weights", "kv")
# A GPU pick within this of the reference's best logit is a tie, not a miss. The GPU keeps
# the KV cache and prefill's GEMM inputs in float16, and its logits of the dummy models
# differ from NumPy's by up to 0.02-0.07 (of a range of +-30; measured on the H200 over
# fresh prompts), so reference gaps of 0.002-0.007 flipped a pick in about one run in ten.
TIE_NATS = 1e-2


def to_f16(a: np.ndarray) -> np.ndarray:
    """`a` rounded to float16 and back, in its own dtype."""
    return a.astype(np.float16).astype(a.dtype)


class Float16Emulation(NumpyRunner):
    """NumpyRunner whose prefill GEMMs and KV cache round as the CUDA backend's do."""

    def __init__(self, weights: ModelWeights, roundings: Sequence[str] = ROUNDINGS) -> None:
        unknown = sorted(set(roundings) - set(ROUNDINGS))
        if unknown:
            raise EngineError(
                f"unknown rounding(s) {', '.join(unknown)}; choose from {', '.join(ROUNDINGS)}"
            )
        self.roundings = frozenset(roundings)
        self._in_prefill = False
        super().__init__(weights)

    def prefill(self, seq: int, tokens: np.ndarray, all_logits: bool = False) -> np.ndarray:
        self._in_prefill = True
        try:
            return super().prefill(seq, tokens, all_logits)
        finally:
            self._in_prefill = False

    def _matmul(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        if self._in_prefill:
            if "gemm" in self.roundings:
                x = to_f16(x)
            if "weights" in self.roundings:
                w = to_f16(w)
        return super()._matmul(x, w)

    def _cache_rows(self, kv: np.ndarray) -> np.ndarray:
        return to_f16(kv) if "kv" in self.roundings else kv

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        out = super()._rope(x, positions)
        return to_f16(out) if self._in_prefill and "kv" in self.roundings else out


def teacher_forced_logits(runner: Runner, ids: np.ndarray, prompt: int) -> np.ndarray:
    """Logits of every position: ids[:prompt] prefilled with all logits, the rest decoded one
    by one (tests/gpu/test_model_gpu.py compares the GPU's with NumPy's this way)."""
    runner.reset(1, ids.size + 4)
    rows = [runner.prefill(0, ids[:prompt], all_logits=True)]
    for i in range(prompt, ids.size):
        rows.append(runner.decode([0], ids[i : i + 1]))
    return np.concatenate(rows)


def kl_mean(ref: np.ndarray, got: np.ndarray) -> float:
    """Mean over rows of KL(softmax(ref) || softmax(got)) in nats."""
    lp, lq = log_softmax(ref, "of the reference"), log_softmax(got, "under comparison")
    return float(np.mean(np.sum(np.exp(lp) * (lp - lq), axis=-1)))


def beyond_tie_misses(ref: np.ndarray, got: np.ndarray) -> int:
    """Rows whose argmax differs from the reference's by more than TIE_NATS of its logits."""
    pick = got.argmax(-1)
    at_pick = np.take_along_axis(ref, pick[:, None], axis=-1)[:, 0]
    return int(np.sum(at_pick < ref.max(-1) - TIE_NATS))


@click.command()
@click.option("--model", default="smollm2-135m", show_default=True, help="a model name")
@click.option(
    "--prompts",
    type=click.Choice(["random", "corpus"]),
    default="random",
    show_default=True,
    help="random ids, or windows of data/corpus.txt at random offsets",
)
@click.option("--trials", default=10, show_default=True, type=click.IntRange(1), help="prompts")
@click.option(
    "--prompt-len", default=128, show_default=True, type=click.IntRange(1), help="prefill rows"
)
@click.option(
    "--decode",
    "decode_n",
    default=16,
    show_default=True,
    type=click.IntRange(0),
    help="teacher-forced decode rows after the prompt",
)
@click.option(
    "--round",
    "rounding",
    default=",".join(ROUNDINGS),
    show_default=True,
    help=f"comma-separated roundings to emulate: {', '.join(ROUNDINGS)}",
)
@click.option("--seed", default=None, type=int, help="prompt seed (default: fresh)")
@cli_errors
def main(
    model: str,
    prompts: str,
    trials: int,
    prompt_len: int,
    decode_n: int,
    rounding: str,
    seed: int | None,
) -> None:
    """Per trial: the largest logit change on prefill and on decode rows, the mean KL, and
    the argmax misses beyond a tie, emulated roundings against the plain reference."""
    from engine.harness.common import corpus_prompt_ids
    from engine.models import check_model, load_weights

    vocab = min(check_model(model, "numpy").vocab_size, 49152)  # refuses what NumPy cannot hold
    length = prompt_len + decode_n
    rng = np.random.default_rng(seed)
    text = np.asarray(corpus_prompt_ids(model, vocab)) if prompts == "corpus" else None
    if text is not None and text.size < length:
        raise EngineError(f"the corpus has {text.size} tokens, fewer than {length}")
    weights = load_weights(model, np)
    reference = NumpyRunner(weights)
    emulated = Float16Emulation(weights, [r for r in rounding.split(",") if r])
    worst = {"prefill": 0.0, "decode": 0.0, "kl": 0.0}
    failing = 0
    for t in range(trials):
        if text is None:
            ids = rng.integers(0, vocab, length)
        else:
            start = int(rng.integers(0, text.size - length + 1))
            ids = text[start : start + length]
        ref = teacher_forced_logits(reference, ids, prompt_len)
        got = teacher_forced_logits(emulated, ids, prompt_len)
        moved = np.abs(ref - got).max(-1)
        kl = kl_mean(ref, got)
        misses = beyond_tie_misses(ref, got)
        failing += misses / length > 0.01  # test_model_gpu's top-1 >= 0.99
        pre, dec = float(moved[:prompt_len].max()), float(moved[prompt_len:].max(initial=0.0))
        worst = {
            "prefill": max(worst["prefill"], pre),
            "decode": max(worst["decode"], dec),
            "kl": max(worst["kl"], kl),
        }
        print(
            f"trial {t}: largest change prefill {pre:.3f} (row {int(moved[:prompt_len].argmax())})"
            f" decode {dec:.3f}, KL {kl:.2e}, misses beyond a tie {misses}",
            file=sys.stderr,
        )
    print(
        f"{model} {prompts} x{trials} [{rounding}]: largest change prefill {worst['prefill']:.3f}"
        f" decode {worst['decode']:.3f}, largest KL {worst['kl']:.2e},"
        f" trials below top-1 0.99: {failing}"
    )


if __name__ == "__main__":
    main()
