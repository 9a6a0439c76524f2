"""The worker's decisions producer: transactional when the broker allows it, else idempotent."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Literal

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from dedup_worker.adapters.kafka.consumer import GroupMetadata
from dedup_worker.adapters.kafka.errors import kafka_errors, translate_error
from dedup_worker.adapters.kafka.records import Offsets, topic_partitions
from dedup_worker.adapters.kafka.settings import REQUEST_TIMEOUT_S, KafkaSettings
from dedup_worker.errors import BackendUnavailable, NeardupError

logger = logging.getLogger(__name__)

#: How long a commit keeps retrying a retriable failure (librdkafka's advice: retry the call,
#: abort only when it says the transaction requires it) before the batch is aborted instead.
COMMIT_RETRY_S = 120.0

#: ``on``: transactions required; ``off``: never; ``auto``: when the broker supports them.
TransactionMode = Literal["auto", "on", "off"]


class DecisionProducer:
    """Produces decisions and dead letters: transactional when possible, else idempotent.

    ``transactional`` is decided at start-up: ``on`` requires transactions, ``off`` never uses
    them, ``auto`` tries ``init_transactions`` and falls back to an idempotent producer.
    ``transactional_id`` is the caller's (stable per worker: a restarted worker with the same
    id fences its dead predecessor and aborts the transaction it left open).
    Delivery failures are collected by the delivery callback and raised by ``flush``; in a
    transaction librdkafka also fails ``commit_transaction``.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        mode: TransactionMode,
        transactional_id: str,
        max_message_bytes: int,
    ) -> None:
        self._settings = settings
        self._mode = mode
        self.transactional_id = transactional_id
        self._max_message_bytes = max_message_bytes
        self.transactional = mode != "off"
        self._delivery_error: KafkaError | None = None
        self._producer = self._connect()
        self._in_transaction = False

    def _connect(self) -> Producer:
        if not self.transactional:
            return self._new_producer(None)
        try:
            return self._transactional_producer()
        except NeardupError as exc:
            if self._mode == "on":
                raise
            logger.warning("Kafka transactions unavailable (%s); using idempotent producer", exc)
            self.transactional = False
            return self._new_producer(None)

    def _transactional_producer(self) -> Producer:
        producer = self._new_producer(self.transactional_id)
        with kafka_errors("initialising Kafka transactions"):
            producer.init_transactions(REQUEST_TIMEOUT_S)
        logger.info("transactional producer %s ready", self.transactional_id)
        return producer

    def _new_producer(self, transactional_id: str | None) -> Producer:
        config = self._settings.producer_config(
            {
                "linger.ms": 2,
                "batch.size": 1 << 20,
                "message.max.bytes": min(1_000_000_000, self._max_message_bytes),
                "on_delivery": self._delivered,
            }
        )
        if transactional_id is not None:
            config["transactional.id"] = transactional_id
        return Producer(config)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None and self._delivery_error is None:
            self._delivery_error = error

    def warm_up(self, topics: Sequence[str]) -> None:
        """Fetch the topics' metadata now, so the first batch does not wait for it."""
        with kafka_errors("reading topic metadata"):
            for topic in topics:
                self._producer.list_topics(topic, timeout=REQUEST_TIMEOUT_S)

    def begin(self) -> None:
        self._delivery_error = None
        if self.transactional:
            with kafka_errors("beginning a transaction"):
                self._producer.begin_transaction()
            self._in_transaction = True

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Queue one record; waits (serving delivery reports) while the local queue is full."""
        while True:
            try:
                self._producer.produce(topic, value, key)
                return
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise translate_error(exc.args[0], f"producing to {topic}") from exc

    def commit(self, offsets: Offsets, group_metadata: GroupMetadata) -> None:
        """Transactional: commit the batch's records together with its offsets.

        A retriable failure (the broker timed out or went away) retries the same call: an
        abort there could undo a commit the broker completes later, and the redone batch would
        then be published twice. Only a failure that requires an abort, or ``COMMIT_RETRY_S``
        of retrying, gives up (the caller aborts and rewinds)."""
        deadline = time.monotonic() + COMMIT_RETRY_S
        self._retrying(
            "sending offsets to the transaction",
            lambda: self._producer.send_offsets_to_transaction(
                topic_partitions(offsets), group_metadata.handle, REQUEST_TIMEOUT_S
            ),
            deadline,
        )
        self._retrying(
            "committing the transaction",
            lambda: self._producer.commit_transaction(REQUEST_TIMEOUT_S),
            deadline,
        )
        self._in_transaction = False

    @staticmethod
    def _retrying(what: str, call: Callable[[], None], deadline: float) -> None:
        while True:
            try:
                call()
                return
            except KafkaException as exc:
                error = exc.args[0]
                again = error.retriable() and not error.txn_requires_abort()
                if not again or time.monotonic() >= deadline:
                    raise translate_error(error, what) from exc
                logger.warning("%s: %s: %s; retrying", what, error.name(), error.str())

    def flush(self) -> None:
        """Non-transactional: wait until every record is acknowledged (or raise)."""
        with kafka_errors("flushing decisions"):
            left = self._producer.flush(REQUEST_TIMEOUT_S)
        if self._delivery_error is not None:
            raise translate_error(self._delivery_error, "delivering decisions")
        if left:
            raise BackendUnavailable(f"flushing decisions: {left} records not acknowledged")

    def abort(self) -> None:
        """Abort the open transaction. A producer that cannot reach the broker to abort is
        replaced (the new one's ``init_transactions`` aborts what the old one left open); one
        that failed for good (fenced) is left alone: the caller's error ends the worker."""
        if not self._in_transaction:
            return
        self._in_transaction = False
        try:
            with kafka_errors("aborting the transaction"):
                self._producer.abort_transaction(REQUEST_TIMEOUT_S)
        except BackendUnavailable as exc:
            logger.warning("abort failed (%s); replacing the producer", exc)
            self._producer.flush(1)
            self._producer = self._transactional_producer()
        except NeardupError as exc:
            logger.error("abort failed: %s", exc)

    def close(self) -> None:
        left = self._producer.flush(10)
        if left:
            logger.warning("producer closed with %d records not acknowledged", left)
