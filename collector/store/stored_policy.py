"""A stored round's policy read back: the rules it was judged under, and the one rule the
readers compute beside it (the prefill-path bars). Part of the read model (collector/store/readout.py).
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ValidationError

from collector.policy import TIER_NAMES, PolicyError, ResolvedPolicy, load_policy, resolve


def _filled(model: type[BaseModel], stored: dict, base: dict) -> dict:
    """`stored` with the required fields it lacks taken from `base` (a field with a default
    keeps its default: a rule the round did not state is not borrowed from today's policy), and
    without the fields this sparkboard no longer has (an older collector's: main_every, ...)."""
    out = {k: v for k, v in stored.items() if k in model.model_fields}
    for name, f in model.model_fields.items():
        sub = f.annotation
        if name not in out:
            if f.is_required() and name in base:
                out[name] = base[name]
        elif isinstance(out[name], dict) and isinstance(sub, type) and issubclass(sub, BaseModel):
            out[name] = _filled(sub, out[name], base.get(name) or {})
    return out


def stored_policy(policy_json: str | None, profile: str) -> ResolvedPolicy | None:
    """A round's policy as it was judged under. A policy stored by an older collector (or a
    synthetic database) may lack required fields (harness, timeouts): the default policy's fill
    those alone. None when it cannot be read at all."""
    try:
        stored = json.loads(policy_json) if policy_json else None
    except ValueError:
        return None
    if not isinstance(stored, dict):
        return None
    tiers = (stored.get("verdict") or {}).get("tiers")
    if isinstance(tiers, dict) and set(tiers) == set(TIER_NAMES):  # a JSON object has no order
        stored["verdict"]["tiers"] = {name: tiers[name] for name in TIER_NAMES}
    try:
        return ResolvedPolicy.model_validate(stored)
    except ValidationError:
        pass
    try:
        base = resolve(load_policy(), profile).model_dump()
        return ResolvedPolicy.model_validate(_filled(ResolvedPolicy, stored, base))
    except (ValidationError, PolicyError):
        return None


def prefill_bars(policy: ResolvedPolicy, main_top1: float, main_kl: float) -> tuple[float, float]:
    """(least PR top-1, most PR KL) the prefill-path gate allows beside main's own check; the
    rule of collector.judge.verdict (until PrefillPathRules carries it)."""
    pp = policy.prefill_path
    return main_top1 - pp.top1_margin, max(pp.kl_factor * main_kl, main_kl + pp.kl_margin)
