"""The worker's decisions producer: transactional when the broker allows it, else idempotent."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from dedup_worker.adapters.kafka.consumer import GroupMetadata
from dedup_worker.adapters.kafka.errors import fatal_cause, kafka_errors, translate_error
from dedup_worker.adapters.kafka.generations import Router
from dedup_worker.adapters.kafka.records import Offsets, topic_partitions
from dedup_worker.adapters.kafka.settings import REQUEST_TIMEOUT_S, KafkaSettings
from dedup_worker.errors import BackendUnavailable, NeardupError, ProducerFenced

logger = logging.getLogger(__name__)

#: The shortest wait a transactional call is given, even when the commit's retry time is over.
MIN_CALL_TIMEOUT_S = 1.0

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
        commit_retry_ms: int = 120_000,
    ) -> None:
        self._settings = settings
        self._mode = mode
        self.transactional_id = transactional_id
        self._max_message_bytes = max_message_bytes
        self._commit_retry_ms = commit_retry_ms
        self.transactional = mode != "off"
        self._delivery_error: KafkaError | None = None
        self._producer = self._connect()
        #: Rolling topics are written to their newest generation as of the batch's begin().
        self._router = Router(settings, self._producer)
        self._in_transaction = False
        self._replace_pending = False  # an abort could not replace the producer yet
        #: A newer producer initialised our transactional id. The broker aborted our open
        #: transaction then; aborting again can only time out, and replacing this producer
        #: would initialise the id once more and fence the newer one in turn.
        self._fenced = False

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
            # librdkafka's send_offsets_to_transaction ignores its timeout (librdkafka #5456)
            # and waits for the broker up to the socket timeout: bring that near the commit's
            # retry limit, so the limit holds for that call too (never below 10 s, which the
            # broker's slowest answers need, nor above librdkafka's default 60 s).
            config["socket.timeout.ms"] = min(60_000, max(10_000, self._commit_retry_ms))
        return Producer(config)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None and self._delivery_error is None:
            self._delivery_error = error

    def warm_up(self, topics: Sequence[str]) -> None:
        """Fetch the topics' metadata now, so the first batch does not wait for it."""
        with kafka_errors("reading topic metadata"):
            for topic in topics:
                self._producer.list_topics(self._router.topic(topic), timeout=REQUEST_TIMEOUT_S)

    def begin(self) -> None:
        self._delivery_error = None
        if self._replace_pending:
            self._replace()  # BackendUnavailable while the broker is still away: retried later
        self._router.refresh_if_due()
        if self.transactional:
            with self._noting_fences("beginning a transaction"):
                self._producer.begin_transaction()
            self._in_transaction = True

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Queue one record; waits (serving delivery reports) while the local queue is full."""
        topic = self._router.topic(topic)
        while True:
            # The error handling is entered only on an error: its two context managers cost
            # ~2 us a record, ~2 % of the worker's main thread under a backlog.
            try:
                self._producer.produce(topic, value, key)
                return
            except BufferError:
                with self._noting_fences(f"producing to {topic}"):
                    self._producer.poll(0.05)
            except Exception:
                with self._noting_fences(f"producing to {topic}"):
                    raise

    def commit(self, offsets: Offsets, group_metadata: GroupMetadata) -> None:
        """Transactional: commit the batch's records together with its offsets.

        A retriable failure (the broker timed out or went away) retries the same call: an
        abort there could undo a commit the broker completes later, and the redone batch would
        then be published twice. Only a failure that requires an abort, or
        ``NEARDUP_COMMIT_RETRY_MS`` of retrying, gives up (the caller aborts and rewinds); each
        call waits at most until that deadline, so the limit holds however long a call would."""
        deadline = time.monotonic() + self._commit_retry_ms / 1000
        self._retrying(
            "sending offsets to the transaction",
            lambda timeout: self._producer.send_offsets_to_transaction(
                topic_partitions(offsets), group_metadata.handle, timeout
            ),
            deadline,
        )
        self._retrying(
            "committing the transaction",
            self._producer.commit_transaction,
            deadline,
        )
        self._in_transaction = False

    def _retrying(self, what: str, call: Callable[[float], None], deadline: float) -> None:
        while True:
            left = deadline - time.monotonic()
            try:
                call(min(REQUEST_TIMEOUT_S, max(MIN_CALL_TIMEOUT_S, left)))
                return
            except (KafkaException, SystemError) as exc:
                cause = fatal_cause(exc)
                if cause is None:
                    raise
                error = cause.args[0]
                again = error.retriable() and not error.txn_requires_abort()
                if again and time.monotonic() < deadline:
                    logger.warning("%s: %s: %s; retrying", what, error.name(), error.str())
                    continue
                if again or error.txn_requires_abort():
                    why = (
                        f"gave up after NEARDUP_COMMIT_RETRY_MS={self._commit_retry_ms}"
                        if again
                        else "the transaction must be aborted"
                    )
                    logger.warning(
                        "%s: %s: %s; %s: the batch is aborted and redone",
                        *(what, error.name(), error.str(), why),
                    )
                raise self._noted(translate_error(error, what)) from exc

    def flush(self) -> None:
        """Non-transactional: wait until every record is acknowledged (or raise)."""
        with self._noting_fences("flushing decisions"):
            left = self._producer.flush(REQUEST_TIMEOUT_S)
        if self._delivery_error is not None:
            raise self._noted(translate_error(self._delivery_error, "delivering decisions"))
        if left:
            raise BackendUnavailable(f"flushing decisions: {left} records not acknowledged")

    def abort(self) -> None:
        """Abort the open transaction. A producer that cannot reach the broker to abort is
        replaced (the new one's ``init_transactions`` aborts what the old one left open); one
        that failed for good (fenced) is left alone: the caller's error ends the worker."""
        if not self._in_transaction:
            return
        self._in_transaction = False
        if self._fenced:
            logger.warning(
                "not aborting under %s: a newer producer took the id, and that aborted this "
                "producer's transaction",
                self.transactional_id,
            )
            return
        try:
            with kafka_errors("aborting the transaction"):
                self._producer.abort_transaction(REQUEST_TIMEOUT_S)
        except BackendUnavailable as exc:
            logger.warning("abort failed (%s); replacing the producer", exc)
            try:
                self._replace()
            except BackendUnavailable as again:
                logger.warning(
                    "producer not replaced yet (retried before the next batch): %s", again
                )
        except NeardupError as exc:
            logger.error("abort failed: %s", exc)

    def _replace(self) -> None:
        """A new producer with the same transactional id (after a commit that gave up, librdkafka
        refuses to abort: "conflicting commit_transaction call in progress"). Its initialisation
        makes the broker finish the old transaction first; until it succeeds no transaction
        begins."""
        self._replace_pending = True
        self._producer.flush(1)
        self._producer = self._transactional_producer()
        self._router = Router(self._settings, self._producer)
        self._replace_pending = False

    def _noted(self, error: NeardupError) -> NeardupError:
        if isinstance(error, ProducerFenced):
            self._fenced = True
        return error

    @contextmanager
    def _noting_fences(self, what: str) -> Iterator[None]:
        """``kafka_errors``, remembering a fence (see ``_fenced``)."""
        try:
            with kafka_errors(what):
                yield
        except ProducerFenced:
            self._fenced = True
            raise

    def close(self) -> None:
        """Deliver what is queued (up to 10 s) and drop the producer. One that failed for good
        (fenced by a newer producer with its transactional id) cannot deliver: that is logged,
        not raised over the error that ended the worker. Nothing is lost: its transaction is
        aborted and its offsets were never committed, so the pages are redelivered."""
        try:
            with self._noting_fences("closing the producer"):
                left = self._producer.flush(10)
        except NeardupError as exc:
            logger.error(
                "producer closed with %d records not delivered: %s", len(self._producer), exc
            )
            return
        if left:
            logger.warning("producer closed with %d records not acknowledged", left)


def fence(settings: KafkaSettings, transactional_id: str) -> None:
    """Initialise a producer with ``transactional_id`` and drop it: the broker fences every
    earlier producer with that id and aborts the transaction it left open. Raises when the
    broker could not be told (the id is then not fenced)."""
    producer = Producer(settings.producer_config({"transactional.id": transactional_id}))
    with kafka_errors(f"fencing transactional id {transactional_id}"):
        producer.init_transactions(REQUEST_TIMEOUT_S)
    producer.flush(1)
