"""Errors of a round the command line reports as one line."""


class RoundError(Exception):
    """A round that cannot start or continue, described in one line."""
