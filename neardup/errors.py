"""Errors of the ``neardup`` package, under the project's one root.

``NeardupError`` here is :class:`dedup_worker.errors.NeardupError` itself (kept importable from
this module), so ``except NeardupError`` catches what any part of the project raises on purpose.
"""

from dedup_worker.errors import NeardupError

__all__ = ["MissingExtra", "NeardupError", "StackError"]


class StackError(NeardupError):
    """A local server (broker, redis-server) could not be found, started, reached or stopped.

    The message says what went wrong and, for a failed start, ends with the tail of the
    server's log so the cause is visible without opening files.
    """


class MissingExtra(NeardupError, ImportError):
    """A command needs an optional part of the install (a ``pyproject`` extra) that is absent.

    The message names the extra and the ``pip install`` line that adds it. Still an
    ``ImportError``, so code that handles a missing module as before keeps working.
    """
