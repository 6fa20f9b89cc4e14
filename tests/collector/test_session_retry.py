"""A session the box failed (fault `infra`) is run again, each wait twice the last, until it
comes out otherwise or its retries are spent (collector/run/session.run_task)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from collector.policy import load_policy, resolve
from collector.run import session
from collector.schedule import Task

TASK = Task(session_id="s", side="pr", pr=7, slot=0, kind="sweep", model="tiny")


@pytest.mark.parametrize("infra_runs,attempts", [(0, 1), (2, 3), (9, 5)])
def test_infra_is_retried_with_doubling_waits(
    monkeypatch: pytest.MonkeyPatch, infra_runs: int, attempts: int
) -> None:
    policy = resolve(load_policy(), "cpu")
    assert policy.failures.infra_retries == 4 and policy.failures.retry_wait_s == 2.0
    runs: list[SimpleNamespace] = []
    waits: list[float] = []

    def run_request(*_args: object) -> SimpleNamespace:
        runs.append(SimpleNamespace(attempts=0))
        return runs[-1]

    def judge(_task: Task, _req: object, run: SimpleNamespace, _policy: object) -> SimpleNamespace:
        return SimpleNamespace(fault="infra" if len(runs) <= infra_runs else "none")

    monkeypatch.setattr(session, "build_request", lambda task, policy: None)
    monkeypatch.setattr(session, "run_request", run_request)
    monkeypatch.setattr(session, "judge", judge)
    monkeypatch.setattr(session.time, "sleep", waits.append)
    run = session.run_task(TASK, Path("."), None, policy, [])  # type: ignore[arg-type]
    assert run is runs[-1] and run.attempts == attempts == len(runs)
    assert waits == [2.0, 4.0, 8.0, 16.0][: attempts - 1]
