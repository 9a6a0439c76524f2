"""Errors of the ``neardup`` package, under the project's one root.

``NeardupError`` here is :class:`dedup_worker.errors.NeardupError` itself (kept importable from
this module), so ``except NeardupError`` catches what any part of the project raises on purpose.
"""

from dedup_worker.errors import NeardupError

__all__ = ["NeardupError", "StackError"]


class StackError(NeardupError):
    """A local server (broker, redis-server) could not be found, started, reached or stopped.

    The message says what went wrong and, for a failed start, ends with the tail of the
    server's log so the cause is visible without opening files.
    """
