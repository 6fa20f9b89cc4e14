"""`python -m engine generate`: print a model's continuation of a prompt.

    python -m engine generate --model smollm2-135m --prompt "The capital of France is" --max-tokens 8
    python -m engine models            # every model name and format

Greedy at --temperature 0 (the default); otherwise softmax sampling at that temperature,
seeded by --seed. Stops early at the end-of-text token.
"""

from __future__ import annotations

import sys

import click
import numpy as np

from engine.cli_common import cli_errors, run_group
from engine.errors import EngineError


@click.group(name="engine")
def main() -> None:
    """The sparkboard inference engine."""


def sample(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Greedy at temperature 0, else a draw from softmax(logits / temperature)."""
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    z -= z.max()
    p = np.exp(z)
    p /= p.sum()
    return int(rng.choice(p.size, p=p))


@main.command()
@click.option(
    "--model", required=True, help="smollm2-135m, tiny, llama-1b:q4_0, ... or a .gguf path"
)
@click.option("--prompt", required=True, help="text to continue")
@click.option("--max-tokens", default=32, show_default=True, type=click.IntRange(min=1))
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(min=0.0))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--backend",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "numpy", "cupy"]),
    help="auto = cupy when a GPU is usable",
)
@cli_errors
def generate(
    model: str, prompt: str, max_tokens: int, temperature: float, seed: int, backend: str
) -> None:
    """Print the continuation of PROMPT."""
    from engine.models import check_model, open_runner, open_tokenizer

    config = check_model(model, backend)  # refuse a bad name/file before any slow loading
    if not prompt:
        raise EngineError("the prompt is empty")
    tok = open_tokenizer(model)
    ids = tok.encode(prompt)
    if not ids:
        raise EngineError("the prompt encodes to no tokens")
    total = len(ids) + max_tokens
    if total > config.max_context:
        raise EngineError(
            f"prompt ({len(ids)} tokens) plus --max-tokens {max_tokens} is longer than "
            f"the model allows ({config.max_context} tokens)"
        )
    runner = open_runner(model, backend)
    runner.reset(1, total)
    rng = np.random.default_rng(seed)
    logits = runner.prefill(0, np.asarray(ids, dtype=np.int64))
    out: list[int] = []
    printed = ""
    for _ in range(max_tokens):
        nxt = sample(logits[: tok.vocab_size], temperature, rng)
        if nxt == tok.eos_id:
            break
        out.append(nxt)
        text = tok.decode(out)
        if not text.endswith("\ufffd"):  # print whole characters only
            sys.stdout.write(text[len(printed) :])
            sys.stdout.flush()
            printed = text
        if len(out) == max_tokens:
            break
        logits = runner.decode([0], np.asarray([nxt], dtype=np.int64))[0]
    final = tok.decode(out)
    sys.stdout.write(final[len(printed) :] + "\n")


@main.command("models")
def models_command() -> None:
    """List every model name:format."""
    from engine.models import list_models

    for name in list_models():
        click.echo(name)


if __name__ == "__main__":
    sys.exit(run_group(main))
