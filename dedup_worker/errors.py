"""The one exception root of the dedup_worker package.

Third-party errors (kafka-python, redis-py, numba) are translated into these at the adapter
boundary, so callers only ever catch ``NeardupError`` subclasses.
"""


class NeardupError(Exception):
    """Root of every error raised on purpose by dedup_worker."""


class ConfigError(NeardupError):
    """Wrong configuration; the message says what to fix."""


class ContractError(NeardupError):
    """A message does not follow the published contract; ``reason`` is a short machine code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class IndexError_(NeardupError):  # noqa: N801  (IndexError is a builtin)
    """The Hamming index was used wrongly (bad fingerprint, wrong design, bad snapshot)."""


class BackendUnavailable(NeardupError):
    """Shared state (Redis) or the broker cannot be reached right now; retry later."""
