"""The pinned harness: the files the collector takes from main in every checkout.

Everything here is part of the measurement, not of the engine: a PR that edits a file of this
folder is `harness-touched` and not measured (collector/policy.toml, `harness.paths`).
"""
