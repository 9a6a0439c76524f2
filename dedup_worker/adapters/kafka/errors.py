"""Kafka errors (confluent-kafka / librdkafka) translated into ``NeardupError`` subclasses.

Every client of the project goes through this module, so its callers react to three kinds of
failure, and only these cross the adapter boundary:

- ``BackendUnavailable``: the broker cannot be reached or answered "not now" (retriable);
  the worker aborts, rewinds the batch and retries it after a backoff (a transaction's commit
  first retries its own call, see ``DecisionProducer.commit``).
- ``OwnershipLost``: the group moved our partitions (commit refused after a rebalance); the
  batch's pages are redelivered to their new owner, so the worker just drops the batch.
- ``BrokerError``: anything retrying will not fix (fenced producer, bad topic, no permission).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import KafkaError, KafkaException

from dedup_worker.errors import (
    BackendUnavailable,
    BrokerError,
    NeardupError,
    OwnershipLost,
    ProducerFenced,
)

__all__ = [
    "BackendUnavailable",
    "BrokerError",
    "OwnershipLost",
    "ProducerFenced",
    "fatal_cause",
    "kafka_errors",
    "translate",
    "translate_error",
]

_OWNERSHIP = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError._ASSIGNMENT_LOST,
    }
)
_UNAVAILABLE = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.CONCURRENT_TRANSACTIONS,
    }
)
_FENCED = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)


def translate_error(error: KafkaError, what: str) -> NeardupError:
    """The NeardupError for a librdkafka error met while doing ``what``."""
    code = error.code()
    text = f"{what}: {error.name()}: {error.str()}"
    if code in _FENCED:
        return ProducerFenced(
            f"{text} (another producer with this transactional id is active: "
            "do two workers share one NEARDUP_WORKER_ID?)"
        )
    if code in _OWNERSHIP:
        return OwnershipLost(f"{text} (partitions moved to another worker)")
    if not error.fatal() and (code in _UNAVAILABLE or error.retriable()):
        return BackendUnavailable(f"{text} (Kafka unavailable)")
    return BrokerError(text)


def translate(exc: KafkaException, what: str) -> NeardupError:
    """The NeardupError for a confluent-kafka exception met while doing ``what``."""
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if error is None:
        return BrokerError(f"{what}: {exc}")
    return translate_error(error, what)


def fatal_cause(exc: BaseException) -> KafkaException | None:
    """The KafkaException that ``exc`` is or wraps, else None.

    A client that failed for good (a fenced producer, say) sets the fatal error as a Python
    exception while librdkafka serves callbacks; when a delivery report follows in the same
    ``flush``/``poll``, CPython raises ``SystemError: ... returned a result with an exception
    set`` around it (confluent-kafka-python's delivery callback does not check for it). Seen
    with confluent-kafka 2.16.1 on every fenced producer closed with records still queued.
    """
    if isinstance(exc, KafkaException):
        return exc
    if isinstance(exc, SystemError):
        cause = exc.__cause__ or exc.__context__
        return cause if isinstance(cause, KafkaException) else None
    return None


@contextmanager
def kafka_errors(what: str) -> Iterator[None]:
    """Re-raise confluent-kafka errors (also when wrapped, see ``fatal_cause``) as
    NeardupErrors."""
    try:
        yield
    except (KafkaException, SystemError) as exc:
        cause = fatal_cause(exc)
        if cause is None:
            raise
        raise translate(cause, what) from exc
