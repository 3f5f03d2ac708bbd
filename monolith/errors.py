"""One exception type for every user-facing error: the CLI prints its message, no traceback."""


class MonolithError(Exception):
    """A clear, user-facing error (bad checkpoint, bad token id, no GPU, ...)."""
