"""The one exception root of the ``neardup`` package."""


class NeardupError(Exception):
    """Root of every error raised on purpose by the ``neardup`` package."""


class StackError(NeardupError):
    """A local server (broker, redis-server) could not be found, started, reached or stopped.

    The message says what went wrong and, for a failed start, ends with the tail of the
    server's log so the cause is visible without opening files.
    """
