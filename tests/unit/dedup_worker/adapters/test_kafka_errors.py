"""How confluent-kafka's exceptions become NeardupErrors (no broker needed: pure translation)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from dedup_worker.adapters.kafka.errors import fatal_cause, kafka_errors
from dedup_worker.errors import BackendUnavailable, ProducerFenced


def _fenced() -> KafkaException:
    return KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))


def _wrapped(inner: KafkaException) -> SystemError:
    """What CPython raises when a callback runs while confluent-kafka's error is set."""
    try:
        try:
            raise inner
        except KafkaException:
            raise SystemError("_delivered returned a result with an exception set")  # noqa: B904
    except SystemError as exc:
        return exc


def test_a_system_error_around_a_fatal_kafka_error_is_translated_like_the_error() -> None:
    fenced = pytest.raises(ProducerFenced, match="another producer with this transactional id")
    with fenced, kafka_errors("closing the producer"):
        raise _wrapped(_fenced())


def test_a_plain_kafka_exception_is_translated_as_before() -> None:
    timed_out = KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer"))
    with pytest.raises(BackendUnavailable, match="flushing: _TIMED_OUT"), kafka_errors("flushing"):
        raise timed_out


def test_a_system_error_of_something_else_is_not_swallowed() -> None:
    with pytest.raises(SystemError, match="unrelated"), kafka_errors("flushing"):
        raise SystemError("unrelated")
    assert fatal_cause(SystemError("unrelated")) is None
    assert fatal_cause(ValueError("x")) is None
