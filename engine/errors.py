"""Errors meant for the user: the CLIs print their message on one line and exit non-zero."""


class EngineError(Exception):
    """Bad input or an unusable environment, described in one line."""


class EngineOutputError(Exception):
    """The engine under test returned something unusable (non-finite logits, wrong shape)."""


class BaselineError(EngineOutputError):
    """Main's engine, measured beside the one under test, failed: the box's or main's fault,
    never the PR's (a speed command exits with EXIT_BASELINE)."""


class EngineForged(EngineOutputError):
    """The timing parent caught the engine under test working outside its turns, where no
    document can carry the evidence (it held the GPU): the session ends `forged`."""
