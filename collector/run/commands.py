"""What each kind of session asks the harness: the command line and the shape of the answer.

A task (schedule.py) becomes one `runner.Request`: the profile's numbers turned into the bench
protocol's options, and what a valid document must answer (contexts, widths, prefixes). Speed
requests (sweep, guard, concurrent, longctx) are `timed`: the collector runs them from main's
checkout, measuring the PR's engine beside main's (runner.py adds the engines' checkouts,
sandbox and caches). A served engine (Profile.engine: llama.cpp) is timed through each build's
server, and scored by main's harness holding the PR's build's perplexity tool against main's
(`kld`, beside main's like a timed one).
"""

from __future__ import annotations

from collector.policy import ResolvedPolicy
from collector.run.runner import Request
from collector.schedule import Task


def build_request(task: Task, policy: ResolvedPolicy) -> Request:
    builders = {
        "sweep": _sweep,
        "guard": _sweep,
        "concurrent": _concurrent,
        "score": _score,
        "prefill-check": _prefill_check,
        "longctx": _longctx,
    }
    if task.kind not in builders:
        raise ValueError(f"unknown task kind {task.kind!r}")
    return builders[task.kind](task, policy)


def _common(task: Task, policy: ResolvedPolicy) -> dict:
    prof = policy.profile
    return {
        "model": task.model,
        "timeout_s": prof.timeouts[task.kind],
        "backend": prof.backend,
        "env": tuple(sorted(prof.env.items())),
        "one_core": prof.one_core,
        "load_cores": prof.load_cores,
    }


def _args(task: Task, policy: ResolvedPolicy) -> list[str]:
    return ["--model", task.model, "--backend", policy.profile.backend]


def _served(policy: ResolvedPolicy) -> list[str]:
    """A speed command's engines: the builtin engine's processes, or each build's server."""
    prof = policy.profile
    if prof.engine == "builtin":
        return []
    return ["--server", prof.engine, "--server-threads", str(prof.server_threads)]


def _timing(policy: ResolvedPolicy) -> list[str]:
    """The options every speed command shares: its time per operation and untimed warm-up."""
    prof = policy.profile
    return ["--min-time", str(prof.min_time)] + (
        [] if prof.warmup is None else ["--warmup", str(prof.warmup)]
    )


def _legs(policy: ResolvedPolicy) -> list[str]:
    """Pairs of engine processes a speed session starts one after another (only when more than
    one: a harness from before the option still takes the rest)."""
    legs = policy.profile.legs
    return ["--legs", str(legs)] if legs > 1 else []


def _sweep(task: Task, policy: ResolvedPolicy) -> Request:
    prof = policy.profile
    guard = task.kind == "guard"
    ctxs = (prof.guard_ctx_for(task.model),) if guard else prof.contexts_for(task.model)
    argv = [*policy.harness.bench, "sweep", *_args(task, policy), *_served(policy)]
    argv += ["--ctx", ",".join(map(str, ctxs)), "--tokens", str(prof.tokens)]
    argv += ["--reps", str(prof.reps), *_timing(policy), *_legs(policy)]
    argv += ["--prefill-tokens", str(prof.prefill_tokens)] if prof.prefill_tokens else []
    # then sequences decoded together in the same processes: a guard's batched decode (verified,
    # not compared), or a target's concurrent decode where the profile measures it here
    if guard:
        widths, runs = tuple(prof.guard_widths), prof.guard_width_runs
    elif prof.concurrent_in_sweep:
        widths, runs = tuple(prof.widths), prof.concurrent_runs
    else:
        widths, runs = (), 0
    if widths:
        argv += ["--widths", ",".join(map(str, widths)), "--width-tokens"]
        argv += [str(prof.concurrent_tokens), "--width-runs", str(runs)]
        argv += ["--prompt-len", str(prof.prompt_len)]
    common = _common(task, policy)
    return Request(
        "sweep",
        argv=argv,
        contexts=ctxs,
        reps=prof.reps,
        widths=widths,
        runs=runs if widths else 0,
        timed=True,
        **common,
    )


def _concurrent(task: Task, policy: ResolvedPolicy) -> Request:
    prof = policy.profile
    argv = [*policy.harness.bench, "concurrent", *_args(task, policy), *_served(policy)]
    argv += ["--widths", ",".join(map(str, prof.widths)), "--tokens", str(prof.concurrent_tokens)]
    argv += ["--runs", str(prof.concurrent_runs), "--prompt-len", str(prof.prompt_len)]
    argv += ["--min-time", str(prof.min_time), *_legs(policy)]
    argv += [] if prof.concurrent_warmup is None else ["--warmup", str(prof.concurrent_warmup)]
    return Request(
        "concurrent",
        argv=argv,
        widths=tuple(prof.widths),
        runs=prof.concurrent_runs,
        timed=True,
        **_common(task, policy),
    )


def _score(task: Task, policy: ResolvedPolicy) -> Request:
    prof = policy.profile
    if prof.engine != "builtin":  # each build's own tool, main's harness compares them
        argv = [*policy.harness.server_score, "kld", "--model", task.model]
        argv += ["--text-file", prof.score_text, "--ctx", str(prof.kld_ctx)]
        argv += ["--chunks", str(prof.kld_chunks), "--threads", str(prof.server_threads)]
        argv += ["--timeout", str(prof.timeouts["score"])]
        argv += ["--device", "gpu" if prof.backend == "cupy" else "cpu"]  # as its servers
        # two tool runs; whatever the profile's backend, the comparison's is main's harness's
        common = _common(task, policy) | {
            "timeout_s": 2 * prof.timeouts["score"] + 60,
            "backend": "auto",
        }
        return Request("kld", argv=argv, beside_main=True, **common)
    argv = [*policy.harness.score, "score", *_args(task, policy)]
    argv += ["--text-file", policy.profile.score_text, "--topk", str(policy.accuracy.topk)]
    return Request("score", argv=argv, **_common(task, policy))


def _prefill_check(task: Task, policy: ResolvedPolicy) -> Request:
    prof = policy.profile
    argv = [*policy.harness.score, "prefill-check", *_args(task, policy)]
    argv += ["--prefix", ",".join(map(str, prof.prefill_prefixes))]
    argv += ["--positions", str(prof.prefill_positions)]
    prefixes = tuple(prof.prefill_prefixes)
    return Request("prefill-check", argv=argv, prefixes=prefixes, **_common(task, policy))


def _longctx(task: Task, policy: ResolvedPolicy) -> Request:
    prof = policy.profile
    budget = prof.memory_budget_mib[task.model] * 2**20
    served = _served(policy)
    argv = [*policy.harness.bench, "longctx", *_args(task, policy), *served]
    argv += ["--ctx", str(prof.long_context[task.model])]
    argv += ["--tokens", str(prof.long_context_tokens), "--memory-budget", str(budget)]
    argv += ["--runs", str(prof.long_context_runs)] if prof.long_context_runs > 1 else []
    argv += ["--legs", str(prof.long_context_legs)] if prof.long_context_legs > 1 else []
    # main's engine runs the check beside the PR's in the same session (its speed the one the
    # PR's is held against); a server's outputs are held against main's server, an engine
    # process's against main's model in the timing parent
    return Request("longctx", argv=argv, timed=True, beside_main=True, **_common(task, policy))
