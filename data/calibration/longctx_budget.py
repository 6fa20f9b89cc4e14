"""The long-context check's memory budgets from measurement: main's peak, plus headroom.

    .venv/bin/python data/calibration/longctx_budget.py --profile gpu [--apply] [--out FILE]

For every model of the profile's `long_context`, main (this checkout) runs `engine.harness.bench
longctx` at that context under a generous budget (`--room`, default 4x the profile's budget):
the engine process's peak memory, read from outside (device: nvidia-smi; CPU: VmHWM), is what
main needs. The proposed budget is that peak plus `--headroom` (default 12%), rounded up to
256 MiB (CPU: 16 MiB), and main runs once more under it and must complete. `--apply` writes the
budgets into collector/policy.toml's profile line `memory_budget_mib = {...}`.

A tight budget is the point (sparkinfer #1154): a PR that keeps hundreds of MB more resident
than main must run out of it at the long context, while main, deterministic on the device,
completes every time.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from collector.policy import default_policy_path, load_policy, resolve  # noqa: E402

MIB = 1 << 20


def run_longctx(model: str, ctx: int, budget: int, backend: str, timeout: int) -> dict:
    """main's long-context check under `budget` bytes: the bench document (or why it failed)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "longctx.json"
        argv = [sys.executable, "-m", "engine.harness.bench", "longctx", "--model", model]
        argv += ["--ctx", str(ctx), "--memory-budget", str(budget), "--backend", backend]
        argv += ["--no-verify", "--out", str(out)]
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0 or not out.exists():
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
            return {"completed": False, "failure": f"exit {r.returncode}: {tail}"}
        return json.loads(out.read_text())


def peak_of(doc: dict, backend: str) -> int | None:
    mem = (doc.get("measured") or {}).get("memory") or {}
    return mem.get("gpu_peak" if backend == "cupy" else "host_peak")


@click.command()
@click.option("--profile", "profile_name", default="gpu", show_default=True)
@click.option("--headroom", default=0.12, show_default=True, help="Budget = peak x (1 + this).")
@click.option(
    "--room", default=4.0, show_default=True, help="The generous budget, x the profile's."
)
@click.option("--timeout", default=600, show_default=True, help="Seconds per run.")
@click.option("--apply", is_flag=True, help="Write the budgets into collector/policy.toml.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="JSON of every number.")
def main(
    profile_name: str, headroom: float, room: float, timeout: int, apply: bool, out: str | None
) -> None:
    """Measure main's peak memory at each model's long context and propose the budgets."""
    policy = resolve(load_policy(default_policy_path()), profile_name)
    prof = policy.profile
    backend = "cupy" if prof.backend == "cupy" else "numpy"
    step = 256 * MIB if backend == "cupy" else 16 * MIB
    rows, budgets = [], {}
    for model, ctx in prof.long_context.items():
        generous = int(prof.memory_budget_mib[model] * MIB * room)
        doc = run_longctx(model, ctx, generous, backend, timeout)
        peak = peak_of(doc, backend)
        if not doc.get("completed") or peak is None:
            raise click.ClickException(
                f"{model} @ {ctx}: main did not complete under {generous // MIB} MiB: "
                f"{doc.get('failure')}"
            )
        budget = math.ceil(peak * (1 + headroom) / step) * step
        again = run_longctx(model, ctx, budget, backend, timeout)
        rows.append(
            {
                "model": model,
                "ctx": ctx,
                "peak_mib": round(peak / MIB, 1),
                "budget_mib": budget // MIB,
                "was_mib": prof.memory_budget_mib[model],
                "completes": bool(again.get("completed")),
                "failure": again.get("failure"),
                "prefill_tok_s": again.get("prefill_tok_s"),
            }
        )
        budgets[model] = budget // MIB
        click.echo(json.dumps(rows[-1]), err=True)
    click.echo(f"{'model':<16} {'ctx':>7} {'peak MiB':>9} {'budget':>7} {'was':>7} completes")
    for r in rows:
        click.echo(
            f"{r['model']:<16} {r['ctx']:>7} {r['peak_mib']:>9} {r['budget_mib']:>7} "
            f"{r['was_mib']:>7} {r['completes']}"
        )
    if out:
        Path(out).write_text(json.dumps({"profile": profile_name, "rows": rows}, indent=1) + "\n")
    if not all(r["completes"] for r in rows):
        raise click.ClickException("main failed under a proposed budget: raise --headroom")
    if apply:
        apply_budgets(default_policy_path(), profile_name, budgets)
        click.echo(f"wrote the budgets into {default_policy_path()} [profiles.{profile_name}]")


def apply_budgets(path: Path, profile_name: str, budgets: dict[str, int]) -> None:
    """Rewrite the profile's `memory_budget_mib = {...}` line (the file's comments are kept)."""
    text = path.read_text()
    head = f"[profiles.{profile_name}]"
    start = text.index(head)
    end = text.find("\n[", start + len(head))
    end = len(text) if end < 0 else end
    section = text[start:end]
    inline = ", ".join(f'"{m}" = {b}' for m, b in budgets.items())
    new, n = re.subn(
        r"^memory_budget_mib = \{[^}\n]*\}",
        f"memory_budget_mib = {{ {inline} }}",
        section,
        count=1,
        flags=re.M,
    )
    if n != 1:
        raise click.ClickException(f"{path}: no memory_budget_mib line in {head}")
    path.write_text(text[:start] + new + text[end:])


if __name__ == "__main__":
    main()
