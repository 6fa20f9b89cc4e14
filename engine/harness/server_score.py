"""A served engine's accuracy, with its own perplexity tool: `kld`.

    python -m engine.harness.server_score kld --model M --text-file F --ctx 128 --chunks 8
        --engine-checkout PR_BUILD --baseline-checkout MAIN_BUILD [--sandbox bwrap] --out FILE

Each build's `llama-perplexity` runs sealed (the sandbox of every engine: the build at the path
it was built at, the model and the text read-only, one fresh folder to write, no network) and
writes the log-probs of the text's second half-windows (`--kl-divergence-base`); this process
(main's harness) compares them (kld.py): KL(main || PR) per scored token, the top-token
agreement, the perplexity ratio: a `kld` document (protocol.KldResult) on --out. Each tool run
is bounded by --timeout; a tool that fails or writes no usable file is the build's failure
(main's: exit 3).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import click

from engine.errors import BaselineError, EngineError, EngineOutputError
from engine.harness.common import Clock, check_out, cli_main, header, progress
from engine.harness.kld import LogitsFileError, compare, read_logits
from engine.harness.protocol import KldResult
from engine.harness.sandbox import KINDS, SANDBOX_ENV, Sandbox
from engine.harness.server_engine import INSIDE_BUILD, INSIDE_SHARED, in_build, offload
from engine.models import model_id, served_model_file

PERPLEXITY = "bin/llama-perplexity"


def perplexity_logits(
    build: Path, sandbox: Sandbox, model: Path, text: Path, ctx: int, chunks: int, threads: int,
    folder: Path, timeout_s: float,
) -> Path:  # fmt: skip
    """Run the build's perplexity tool on `text`, sealed, saving its logits into `folder`."""
    tool = build / PERPLEXITY
    if not tool.is_file():
        raise EngineError(f"no {PERPLEXITY} in the build {build}")
    inside = folder if not sandbox.sealed else Path(INSIDE_SHARED)
    argv = [str(tool) if not sandbox.sealed else f"{INSIDE_BUILD}/{PERPLEXITY}"]
    argv += ["--model", str(model), "--file", str(text), "--ctx-size", str(ctx)]
    argv += ["--batch-size", str(ctx), "--chunks", str(chunks), "--threads", str(threads)]
    argv += offload(sandbox.gpu)  # where the sandbox binds the GPU, the tool computes on it
    argv += ["--kl-divergence-base", str(inside / "logits.bin")]
    argv, env = in_build(sandbox, build, argv, folder / "home", folder, [model.parent, text.parent])
    log = folder / "tool.log"
    with open(log, "wb") as out:
        try:
            res = subprocess.run(
                argv, cwd=build, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                timeout=timeout_s, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise EngineOutputError(f"{PERPLEXITY} ran past {timeout_s:.0f} s") from None
    if res.returncode != 0:
        lines = log.read_text(errors="replace").strip().splitlines() or ["(no output)"]
        raise EngineOutputError(f"{PERPLEXITY} exited with {res.returncode}: {lines[-1][:300]}")
    return folder / "logits.bin"


@click.group(name="engine.harness.server_score")
def server_score() -> None:
    """A served engine's accuracy with its own tools, held against main's build."""


@server_score.command()
@click.option("--model", required=True, help="A model name or a .gguf file.")
@click.option("--text-file", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--ctx", default=128, show_default=True, help="The tool's window (tokens).")
@click.option("--chunks", default=8, show_default=True, help="Windows of the text scored.")
@click.option("--threads", default=1, show_default=True)
@click.option("--engine-checkout", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--baseline-checkout", required=True, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--sandbox",
    type=click.Choice(KINDS),
    default=lambda: os.environ.get(SANDBOX_ENV, "none"),
    show_default=f"${SANDBOX_ENV}, else none",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "gpu"]),
    default="cpu",
    show_default=True,
    help="Where each tool computes: gpu binds the GPU into its sandbox and offloads every layer.",
)
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, help="Per tool run (s).")
@click.option("--out", required=True, help="The JSON report ('-': stdout).")
def kld(
    model: str, text_file: str, ctx: int, chunks: int, threads: int, engine_checkout: str,
    baseline_checkout: str, sandbox: str, device: str, timeout_s: float, out: str,
) -> None:  # fmt: skip
    """KL(main || PR), top-token agreement and perplexity ratio of the two builds on a text."""
    clock = Clock()
    check_out(out)
    if ctx < 4 or chunks < 1 or threads < 1:
        raise EngineError("--ctx must be at least 4, --chunks and --threads at least 1")
    text = Path(text_file).resolve()
    box = Sandbox(sandbox, gpu=device == "gpu")
    with tempfile.TemporaryDirectory(prefix="sparkboard-kld-") as tmp:
        path = served_model_file(model, Path(tmp) / "models")  # a dummy: written there
        files = {}
        for side, build in (("main", baseline_checkout), ("pr", engine_checkout)):
            folder = Path(tmp) / side
            folder.mkdir()
            progress(f"kld {model}: {side}'s {PERPLEXITY} over {chunks} windows of {ctx}")
            try:
                made = perplexity_logits(
                    Path(build).resolve(), box, path, text, ctx, chunks, threads, folder, timeout_s
                )
                files[side] = read_logits(made)
            except (EngineOutputError, LogitsFileError, OSError) as e:
                if side == "main":
                    raise BaselineError(f"main's build: {e}") from None
                raise EngineOutputError(f"the PR's build: {e}") from None
        try:
            agreement = compare(files["main"], files["pr"])
        except LogitsFileError as e:
            raise EngineOutputError(f"the PR's build: {e}") from None
        del files
    ran_on = "cupy" if device == "gpu" else "numpy"  # the device its tools ran on, named
    doc = KldResult(
        **header(model, SimpleNamespace(backend=ran_on, model_id=model_id(model)), clock),
        ctx=ctx,
        chunks=chunks,
        **dataclasses.asdict(agreement),
    )
    progress(
        f"kld {model}: KL mean {agreement.kl_mean:.2e} max {agreement.kl_max:.2e}, same top "
        f"{agreement.same_top:.3f}, PPL ratio {agreement.ppl_ratio:.4f} ({agreement.tokens} tokens)"
    )
    text_out = doc.model_dump_json(indent=1) + "\n"
    if out == "-":
        sys.stdout.write(text_out)
    else:
        Path(out).write_text(text_out)


main = cli_main(server_score)

if __name__ == "__main__":
    main()
