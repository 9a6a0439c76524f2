"""Thin kafka-python adapters for the worker: the pages consumer, the decisions producer, topics.

kafka-python errors are translated here, at the boundary, into ``NeardupError`` subclasses:

- ``BackendUnavailable``: the broker cannot be reached or answered "not now" (retriable);
  the worker rewinds the batch and retries it after a backoff.
- ``OwnershipLost``: the group moved our partitions (commit refused after a rebalance); the
  batch's pages are redelivered to their new owner, so the worker just drops the batch.
- ``BrokerError``: anything retrying will not fix (fenced producer, bad topic, no permission).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import kafka.errors as kerr
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.partitioner.default import DefaultPartitioner, murmur2
from kafka.structs import OffsetAndMetadata

from dedup_worker.errors import BackendUnavailable, NeardupError
from dedup_worker.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

Offsets = dict[TopicPartition, OffsetAndMetadata]


class Record(Protocol):
    """What the worker reads of a kafka-python ``ConsumerRecord``."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


#: Tansu joins a group in ~3 s with these (its defaults make a join take ~25 s); also fine for
#: Apache Kafka.
GROUP_TIMEOUTS: dict[str, int] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
_OWNERSHIP = (
    kerr.CommitFailedError,
    kerr.IllegalGenerationError,
    kerr.UnknownMemberIdError,
    kerr.RebalanceInProgressError,
)


class BrokerError(NeardupError):
    """Kafka refused in a way retrying will not fix; the message says what happened."""


class OwnershipLost(NeardupError):
    """A rebalance moved the batch's partitions; their new owner processes the batch again."""


def translate(exc: Exception, what: str) -> NeardupError:
    """The NeardupError for a kafka-python error raised while doing ``what``."""
    if isinstance(exc, _OWNERSHIP):
        return OwnershipLost(f"{what}: partitions moved to another worker ({exc})")
    if isinstance(exc, kerr.KafkaError) and exc.retriable:
        return BackendUnavailable(f"{what}: Kafka unavailable ({exc})")
    if isinstance(exc, kerr.ProducerFencedError):
        return BrokerError(
            f"{what}: another producer with this transactional id is active "
            "(do two workers share one NEARDUP_WORKER_ID?)"
        )
    return BrokerError(f"{what}: {type(exc).__name__}: {exc}")


@contextmanager
def kafka_errors(what: str) -> Iterator[None]:
    """Re-raise kafka-python errors as NeardupErrors."""
    try:
        yield
    except kerr.KafkaError as exc:
        raise translate(exc, what) from exc


# ---- topics ------------------------------------------------------------------------------------


def ensure_topics(config: WorkerConfig) -> list[str]:
    """Create the worker's missing topics; returns the ones created."""
    topics = [config.pages_topic, config.decisions_topic, config.dlq_topic]
    with kafka_errors("creating topics"):
        admin = KafkaAdminClient(bootstrap_servers=config.kafka_bootstrap)
        try:
            missing = [t for t in topics if t not in set(admin.list_topics())]
            for topic in missing:
                _create_topic(admin, topic, config.partitions, config.replication)
        finally:
            admin.close()
    if missing:
        logger.info("created topics %s (%d partitions)", missing, config.partitions)
    return missing


def _create_topic(admin: Any, topic: str, partitions: int, replication: int) -> None:
    # Another worker may create it between our listing and our request.
    with contextlib.suppress(kerr.TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, partitions, replication)])


# ---- the pages consumer -------------------------------------------------------------------------


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Logs assignments; the worker commits every batch before it polls, so revocation has
    nothing pending to commit (see the service's commit order)."""

    def __init__(self, on_change: Callable[[str, list[TopicPartition]], None]) -> None:
        self._on_change = on_change

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self._on_change("revoked", sorted(revoked))

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self._on_change("assigned", sorted(assigned))


class PageConsumer:
    """The group consumer of the pages topic: manual commits, read_committed, batch polls."""

    def __init__(
        self,
        config: WorkerConfig,
        on_rebalance: Callable[[str, list[TopicPartition]], None] | None = None,
    ) -> None:
        self.topic = config.pages_topic
        with kafka_errors("connecting the pages consumer"):
            self._consumer = KafkaConsumer(
                bootstrap_servers=config.kafka_bootstrap,
                group_id=config.group_id,
                client_id=f"dedup-worker-{config.worker_id}",
                enable_auto_commit=False,
                isolation_level="read_committed",
                auto_offset_reset="earliest",
                max_partition_fetch_bytes=8 * 1024 * 1024,
                # The broker answers a fetch at once when data is there; an idle fetch must not
                # outlast the batch wait, or a page arriving just after it waits that long.
                fetch_max_wait_ms=max(5, min(500, config.batch_max_wait_ms)),
                **GROUP_TIMEOUTS,
            )
            self._consumer.subscribe([self.topic], listener=_Listener(on_rebalance or _log_change))

    def poll_batch(self, max_records: int, max_wait_ms: int) -> list[Record]:
        """Up to ``max_records`` records, waiting at most ``max_wait_ms`` to fill the batch.

        Returns as soon as the batch is full; records keep their per-partition order.
        """
        deadline = time.monotonic() + max_wait_ms / 1000
        records: list[Record] = []
        while len(records) < max_records:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            with kafka_errors("polling pages"):
                polled = self._consumer.poll(left_ms, max_records=max_records - len(records))
            for partition_records in polled.values():
                records.extend(partition_records)
            if left_ms == 0 or not polled:
                break
        return self._still_assigned(records)

    def _still_assigned(self, records: list[Record]) -> list[Record]:
        """Drop records of partitions a rebalance (inside a later poll) took away: their new
        owner starts from the committed offset and processes them."""
        if not records:
            return records
        assigned = self._consumer.assignment()
        kept = [r for r in records if TopicPartition(r.topic, r.partition) in assigned]
        if len(kept) < len(records):
            logger.info("dropped %d polled records of revoked partitions", len(records) - len(kept))
        return kept

    def rewind(self, records: Sequence[Record]) -> None:
        """Seek each still-assigned partition back to the batch's first offset in it."""
        assigned = self._consumer.assignment()
        for tp, offset in first_offsets(records).items():
            if tp in assigned:
                self._consumer.seek(tp, offset)

    def commit(self, offsets: Offsets) -> None:
        """Commit synchronously (used when transactions are off)."""
        with kafka_errors("committing offsets"):
            self._consumer.commit(offsets)

    def group_metadata(self) -> Any:
        return self._consumer.group_metadata()

    def lag(self) -> dict[TopicPartition, int]:
        """Records not yet consumed per assigned partition (end offset minus position)."""
        with kafka_errors("reading end offsets"):
            assigned = list(self._consumer.assignment())
            ends = self._consumer.end_offsets(assigned) if assigned else {}
            return {tp: max(0, ends[tp] - self._consumer.position(tp)) for tp in ends}

    def close(self) -> None:
        """Leave the group (its partitions move at once) without committing anything more."""
        with kafka_errors("closing the pages consumer"):
            self._consumer.close(autocommit=False)


def first_offsets(records: Sequence[Record]) -> dict[TopicPartition, int]:
    """The lowest offset per partition of a batch: where to rewind to."""
    firsts: dict[TopicPartition, int] = {}
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        firsts[tp] = min(firsts.get(tp, record.offset), record.offset)
    return firsts


def next_offsets(records: Sequence[Record]) -> Offsets:
    """The offsets to commit after a batch: one past its last record per partition."""
    ends: dict[TopicPartition, int] = {}
    for record in records:
        tp = TopicPartition(record.topic, record.partition)
        ends[tp] = max(ends.get(tp, -1), record.offset + 1)
    return {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in ends.items()}


def _log_change(change: str, partitions: list[TopicPartition]) -> None:
    logger.info("partitions %s: %s", change, [f"{tp.topic}[{tp.partition}]" for tp in partitions])


class HostPartitioner(DefaultPartitioner):  # type: ignore[misc]
    """Kafka's default partitioning (murmur2 of the key, as the Java client), with each key's
    hash remembered: decisions repeat hosts, and kafka-python's murmur2 is pure Python
    (~20 us a call, half the cost of a send)."""

    MAX_KEYS = 200_000

    def __init__(self) -> None:
        self._hashes: dict[bytes, int] = {}

    def partition(
        self, topic: str, key: Any, serialized_key: Any, value: Any, serialized_value: Any,
        cluster: Any,
    ) -> int:  # fmt: skip
        if serialized_key is None:
            return int(super().partition(topic, key, None, value, serialized_value, cluster))
        hashed = self._hashes.get(serialized_key)
        if hashed is None:
            if len(self._hashes) >= self.MAX_KEYS:
                self._hashes.clear()
            hashed = self._hashes[serialized_key] = murmur2(serialized_key) & 0x7FFFFFFF
        partitions = sorted(cluster.partitions_for_topic(topic))
        return int(partitions[hashed % len(partitions)])


# ---- the decisions producer ---------------------------------------------------------------------


class DecisionProducer:
    """Produces decisions and dead letters: transactional when possible, else idempotent.

    ``transactional`` is decided at start-up: ``on`` requires transactions, ``off`` never uses
    them, ``auto`` tries ``init_transactions`` and falls back to an idempotent producer.
    """

    def __init__(self, config: WorkerConfig) -> None:
        self._config = config
        self.transactional = config.transactional != "off"
        self._producer = self._connect()
        self._in_transaction = False

    def _connect(self) -> Any:
        if not self.transactional:
            return self._new_producer(None)
        try:
            return self._transactional_producer()
        except NeardupError as exc:
            if self._config.transactional == "on":
                raise
            logger.warning("Kafka transactions unavailable (%s); using idempotent producer", exc)
            self.transactional = False
            return self._new_producer(None)

    def _transactional_producer(self) -> Any:
        producer = self._new_producer(self._config.transactional_id)
        with kafka_errors("initialising Kafka transactions"):
            try:
                producer.init_transactions()
            except BaseException:
                producer.close(timeout=1)
                raise
        logger.info("transactional producer %s ready", self._config.transactional_id)
        return producer

    def _new_producer(self, transactional_id: str | None) -> Any:
        with kafka_errors("connecting the decisions producer"):
            return KafkaProducer(
                bootstrap_servers=self._config.kafka_bootstrap,
                client_id=f"dedup-worker-{self._config.worker_id}",
                enable_idempotence=True,
                acks="all",
                transactional_id=transactional_id,
                linger_ms=5,
                batch_size=1 << 20,
                max_request_size=self._config.max_message_bytes,
                partitioner=HostPartitioner(),
                max_block_ms=30_000,
            )

    def warm_up(self, topics: Sequence[str]) -> None:
        """Fetch the topics' metadata now, so the first batch does not wait for it."""
        with kafka_errors("reading topic metadata"):
            for topic in topics:
                self._producer.partitions_for(topic)

    def begin(self) -> None:
        if self.transactional:
            with kafka_errors("beginning a transaction"):
                self._producer.begin_transaction()
            self._in_transaction = True

    def send(self, topic: str, key: bytes | None, value: bytes) -> Any:
        with kafka_errors(f"producing to {topic}"):
            return self._producer.send(topic, key=key, value=value)

    def commit(self, offsets: Offsets, group_metadata: Any) -> None:
        """Transactional: commit the batch's records together with its offsets."""
        with kafka_errors("committing the transaction"):
            self._producer.send_offsets_to_transaction(offsets, group_metadata)
            self._producer.commit_transaction()
        self._in_transaction = False

    def flush(self, futures: Sequence[Any]) -> None:
        """Non-transactional: wait until every record is acknowledged (or raise)."""
        with kafka_errors("flushing decisions"):
            self._producer.flush()
            for future in futures:
                future.get(timeout=0)

    def abort(self) -> None:
        """Abort the open transaction. A producer that cannot reach the broker to abort is
        replaced (the new one's ``init_transactions`` aborts what the old one left open); one
        that failed for good (fenced) is left alone: the caller's error ends the worker."""
        if not self._in_transaction:
            return
        self._in_transaction = False
        try:
            with kafka_errors("aborting the transaction"):
                self._producer.flush(timeout=5)  # kafka-python needs this before an abort
                self._producer.abort_transaction()
        except BackendUnavailable as exc:
            logger.warning("abort failed (%s); replacing the producer", exc)
            self._producer.close(timeout=1)
            self._producer = self._transactional_producer()
        except NeardupError as exc:
            logger.error("abort failed: %s", exc)

    def close(self) -> None:
        with kafka_errors("closing the decisions producer"):
            self._producer.close(timeout=10)


def offsets_text(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> str:
    """``pages[0]@120,pages[3]@77``: how logs name a batch's committed offsets."""
    return ",".join(f"{tp.topic}[{tp.partition}]@{meta.offset}" for tp, meta in offsets.items())
