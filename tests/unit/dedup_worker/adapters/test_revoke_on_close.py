"""A rolling topic's revoke callback, when it runs inside ``close()``: librdkafka is destroying
the handle, and a call on it may fail with ``_DESTROY``. A worker stopped by SIGTERM then exited
1 ("unassigning revoked generations: _DESTROY: Failed to get assignment"), now and then, in the
integration test of workers stopped together. (A stand-in for the handle in that state: the
state cannot be timed against a real broker.)"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from dedup_worker.adapters.kafka.consumer import unassign_revoked


class Handle:
    """A consumer handle; ``destroyed``: every call fails as librdkafka's do during close."""

    def __init__(self, destroyed: bool) -> None:
        self.destroyed = destroyed
        self.unassigned: list[TopicPartition] = []
        self.sought: list[TopicPartition] = []

    def _check(self) -> None:
        if self.destroyed:
            raise KafkaException(KafkaError(KafkaError._DESTROY))

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._check()
        self.unassigned.extend(partitions)

    def assignment(self) -> list[TopicPartition]:
        self._check()
        return [TopicPartition("pages.g1", 0)]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        self._check()
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in partitions]

    def seek(self, partition: TopicPartition) -> None:
        self._check()
        self.sought.append(partition)


REVOKED = [TopicPartition("pages.g0", 0)]


def test_closing_a_destroyed_handle_is_no_error() -> None:
    unassign_revoked(Handle(destroyed=True), REVOKED, closing=True)


def test_closing_unassigns_and_wakes_nothing() -> None:
    handle = Handle(destroyed=False)
    unassign_revoked(handle, REVOKED, closing=True)
    assert handle.unassigned == REVOKED and handle.sought == []


def test_a_revoke_while_running_unassigns_then_wakes_the_kept_partitions() -> None:
    handle = Handle(destroyed=False)
    unassign_revoked(handle, REVOKED, closing=False)
    assert handle.unassigned == REVOKED
    assert [(tp.topic, tp.partition, tp.offset) for tp in handle.sought] == [("pages.g1", 0, 7)]


def test_a_destroyed_handle_while_running_is_an_error() -> None:
    with pytest.raises(KafkaException):
        unassign_revoked(Handle(destroyed=True), REVOKED, closing=False)
