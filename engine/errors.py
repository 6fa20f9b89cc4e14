"""Errors meant for the user: the CLIs print their message on one line and exit non-zero."""


class EngineError(Exception):
    """Bad input or an unusable environment, described in one line."""


class EngineOutputError(Exception):
    """The engine under test returned something unusable (non-finite logits, wrong shape)."""
