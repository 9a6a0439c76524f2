"""The project's one exception root: every error raised on purpose derives from ``NeardupError``.

``dedup_worker``, ``crawler`` and ``neardup`` all raise these (or subclasses of them), so a
caller that wants "anything this project refused" catches one class. Third-party errors
(confluent-kafka, redis-py, numba) are translated into them at the adapter boundary.
``neardup.errors.NeardupError`` is this same class; ``crawler.config.ConfigError`` is a
``ConfigError`` (and still a ``ValueError``, as it always was).
"""


class NeardupError(Exception):
    """Root of every error raised on purpose by this project."""


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


class BrokerError(NeardupError):
    """Kafka refused in a way retrying will not fix; the message says what happened."""


class ProducerFenced(BrokerError):
    """Another producer initialised our transactional id; this one can never commit again."""


class OwnershipLost(NeardupError):
    """A rebalance moved the batch's partitions; their new owner processes the batch again."""
