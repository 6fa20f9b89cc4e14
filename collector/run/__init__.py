"""Stage one, running a round: the manifest's PRs as checkouts (`candidates.py`), the plan turned
into harness commands (`commands.py`), the round loop (`collect.py` plans it, `round_run.py`
measures and records its sessions, here or on Ray through `cluster.py`), one session where its
GPU is (`session.py`), the harness subprocess (`runner.py`), the sandbox and the box between
sessions (`sandbox.py`), and a session's outcome decided once (`outcome.py`). It hands the
stored sessions to the judge (`collector.judge.verdict`) and writes through `collector.store`."""
