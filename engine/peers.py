"""`python -m engine.harness.bench peers --model M`: the same shape measured with PyTorch, same box.

Builds the model's shape as a transformers Llama (or Qwen3) with random bf16 weights on the
GPU and measures batch-1 decode after a `ctx`-token prompt: eager (HF's dynamic cache), and
with --compile a static cache under torch.compile where that works on the installed versions
(a failure is reported, not raised); then this engine's CuPy backend on the same shape. The
prefill of that prompt is timed with both engines resident, in turns, the median of
--prefill-reps each; then the ratios. A benchmark only: torch is never a dependency of
the engine, and the command says so in one line where torch is missing.
"""

from __future__ import annotations

import json
import sys
import time

import click
import numpy as np

from engine.errors import EngineError


def _hf_model(config, torch):  # noqa: ANN001 - torch is imported lazily
    import transformers

    common = dict(
        hidden_size=config.dim,
        intermediate_size=config.ffn_dim,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads,
        head_dim=config.head_dim,
        vocab_size=config.vocab_size,
        max_position_embeddings=config.max_context,
        rms_norm_eps=config.norm_eps,
        tie_word_embeddings=config.tied_embeddings,
        rope_theta=config.rope_base,
    )
    if config.arch == "qwen3":
        cfg, cls = transformers.Qwen3Config(**common), transformers.Qwen3ForCausalLM
    else:
        cfg, cls = transformers.LlamaConfig(**common), transformers.LlamaForCausalLM
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = cls(cfg)
    torch.set_default_dtype(torch.float32)
    return model.eval(), cfg


def _timed(torch, fn) -> float:  # noqa: ANN001
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def torch_eager_decode(model, torch, ids, tokens: int) -> float:  # noqa: ANN001
    """Decode tok/s after the prompt `ids`, transformers' eager forward and dynamic cache."""
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(4):
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)

        def decode():
            nonlocal out, nxt
            for _ in range(tokens):
                out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)

        t_dec = _timed(torch, decode)
    return tokens / t_dec


def prefill_medians(torch, model, ids, runner, reps: int) -> tuple[float, float]:  # noqa: ANN001
    """(torch eager, ours) prefill tok/s of the same prompt: the medians of `reps` prefills
    each, taken in turns (torch, ours, torch, ...) after one untimed prefill each, so a drift
    of the card's clocks falls on both."""
    prompt = ids[0].cpu().numpy()

    def torch_prefill():
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False, logits_to_keep=1)

    def ours_prefill():
        runner.truncate(0, 0)
        runner.prefill(0, prompt)
        runner.synchronize()

    runner.reset(1, ids.shape[1] + 8)
    torch_prefill()
    ours_prefill()
    t_torch, t_ours = [], []
    for _ in range(reps):
        t_torch.append(_timed(torch, torch_prefill))
        t_ours.append(_timed(torch, ours_prefill))
    n = ids.shape[1]
    return n / float(np.median(t_torch)), n / float(np.median(t_ours))


def torch_compiled(model, cfg, torch, ids, tokens: int) -> float:  # noqa: ANN001
    """Decode tok/s: static KV cache, one-token forward under torch.compile."""
    from transformers import StaticCache

    ctx = ids.shape[1]
    cache = StaticCache(config=cfg, max_cache_len=ctx + tokens + 8)
    with torch.inference_mode():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)

        def step(tok, pos):  # noqa: ANN001
            o = model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True)
            return o.logits[:, -1].argmax(-1, keepdim=True)

        step_c = torch.compile(step, mode="reduce-overhead", fullgraph=True)

        def replay(tok, pos):  # noqa: ANN001
            # the CUDA graph behind "reduce-overhead" overwrites its outputs on the next
            # replay: mark the step and keep a copy of the token that feeds the next one
            torch.compiler.cudagraph_mark_step_begin()
            return step_c(tok, torch.tensor([pos], device="cuda")).clone()

        pos = ctx
        for _ in range(4):  # compile and warm
            nxt = replay(nxt, pos)
            pos += 1

        def decode():
            nonlocal nxt, pos
            for _ in range(tokens):
                nxt = replay(nxt, pos)
                pos += 1

        t = _timed(torch, decode)
    return tokens / t


@click.command(name="peers")
@click.option("--model", required=True, help="Model name, e.g. llama-8b:f16.")
@click.option(
    "--ctx", default=128, show_default=True, help="Prompt length (prefill measured on it)."
)
@click.option("--tokens", default=64, show_default=True, help="Tokens decoded.")
@click.option("--prefill-reps", default=5, show_default=True,
              help="Prefills timed per engine (the median is reported).")  # fmt: skip
@click.option("--compile/--no-compile", "use_compile", default=False, show_default=True,
              help="Also measure a static-cache decode under torch.compile (slow to build).")  # fmt: skip
@click.option("--out", default="-", show_default=True, help="JSON file ('-' = stdout).")
def peers(
    model: str, ctx: int, tokens: int, prefill_reps: int, use_compile: bool, out: str
) -> None:
    """This engine against PyTorch (transformers, random bf16 weights) on the same GPU."""
    try:
        import torch
    except ImportError:
        raise EngineError(
            "peers needs PyTorch (and transformers) installed; it is a benchmark only"
        ) from None
    from engine.backends import resolve_backend
    from engine.models import model_config, open_runner
    from engine.roofline import measure_decode

    resolve_backend("cupy")
    if ctx < 1 or tokens < 1 or prefill_reps < 1:
        raise EngineError("--ctx, --tokens and --prefill-reps must be positive")
    config = model_config(model)
    rows: dict[str, dict[str, float | str]] = {}
    hf, cfg = _hf_model(config, torch)
    ids = torch.randint(0, min(config.vocab_size, 49152), (1, ctx), device="cuda")
    rows["torch eager (bf16)"] = {"decode_tok_s": torch_eager_decode(hf, torch, ids, tokens)}
    if use_compile:
        try:
            rows["torch.compile static cache (bf16)"] = {
                "decode_tok_s": torch_compiled(hf, cfg, torch, ids, tokens)
            }
        except Exception as exc:  # report, don't fail: compile support varies by version
            rows["torch.compile static cache (bf16)"] = {"error": str(exc).splitlines()[0][:200]}
    runner = open_runner(model, "cupy")  # both engines resident from here on
    dec = float(np.median(measure_decode(runner, ctx, tokens, reps=2)))
    pre_torch, pre_ours = prefill_medians(torch, hf, ids, runner, prefill_reps)
    rows["torch eager (bf16)"]["prefill_tok_s"] = pre_torch
    rows["sparkboard (cupy)"] = {"decode_tok_s": dec, "prefill_tok_s": pre_ours}
    del hf, runner
    base = rows["sparkboard (cupy)"]
    print(f"{model}, ctx {ctx}, {tokens} tokens, {torch.cuda.get_device_name()}:", file=sys.stderr)
    print(
        f"  {'engine':36} {'decode tok/s':>12} {'prefill tok/s':>13} {'ours/this':>16}",
        file=sys.stderr,
    )
    for name, r in rows.items():
        if "error" in r:
            print(f"  {name:36} failed: {r['error']}", file=sys.stderr)
            continue
        d = r.get("decode_tok_s", 0.0)
        p = r.get("prefill_tok_s", 0.0)
        ratio_d = base["decode_tok_s"] / d if d else 0.0
        ratio_p = base["prefill_tok_s"] / p if p else 0.0
        r["ours_over_this_decode"] = ratio_d
        if p:
            r["ours_over_this_prefill"] = ratio_p
        pre_txt = f"{p:13.1f}" if p else f"{'-':>13}"  # torch.compile: decode only
        pre_ratio = f"pre {ratio_p:4.2f}" if p else ""
        print(f"  {name:36} {d:12.1f} {pre_txt}   dec {ratio_d:4.2f} {pre_ratio}", file=sys.stderr)
    text = json.dumps({"model": model, "ctx": ctx, "tokens": tokens, "rows": rows}, indent=1)
    if out == "-":
        click.echo(text)
    else:
        with open(out, "w") as f:
            f.write(text + "\n")
