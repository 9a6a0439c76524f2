"""Thin confluent-kafka adapters for the worker: the pages consumer, topics, shared settings.

Why librdkafka (confluent-kafka) and not kafka-python here: kafka-python builds and parses every
record in pure Python, about 100 us of the worker's one core per page; librdkafka does it in C on
its own threads, which is what lets one worker process reach its 10k pages/s target. The crawler
keeps kafka-python (it publishes ~200 pages/s per process); both speak the same wire protocol and
partition keys the same way (murmur2, as the Java client).

The decisions producer is in :mod:`kafka_producer`. Errors are translated at this boundary
(``kafka_errors``): see :mod:`kafka_errors`.
librdkafka's own log lines go to this module's logger (child ``librdkafka``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from dedup_worker.worker.config import WorkerConfig
from dedup_worker.worker.kafka_errors import (
    BrokerError,
    OwnershipLost,
    kafka_errors,
    translate_error,
)

logger = logging.getLogger(__name__)
_client_logger = logger.getChild("librdkafka")

__all__ = [
    "BrokerError",
    "Offsets",
    "OwnershipLost",
    "PageConsumer",
    "Partition",
    "Record",
    "client_settings",
    "ensure_topics",
    "first_offsets",
    "next_offsets",
    "offsets_text",
    "topic_partitions",
]

#: (topic, partition)
Partition = tuple[str, int]
#: The offset to commit (one past the last record done) per partition.
Offsets = dict[Partition, int]

#: Tansu joins a group in ~3 s with these (its defaults make a join take ~25 s); also fine for
#: Apache Kafka.
GROUP_TIMEOUTS: dict[str, int] = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
#: Longest wait for one transactional step or a metadata request before giving up (retried).
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed record (librdkafka's ``Message`` copied out of the client)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def client_settings(config: WorkerConfig) -> dict[str, Any]:
    return {
        "bootstrap.servers": config.kafka_bootstrap,
        "client.id": config.client_name,
        "logger": _client_logger,
        "error_cb": _log_client_error,
    }


def _log_client_error(error: KafkaError) -> None:
    """librdkafka reports connection trouble here and retries by itself; the worker's calls
    fail with a translated error if it lasts."""
    log = logger.error if error.fatal() else logger.warning
    log("kafka client: %s: %s", error.name(), error.str())


# ---- topics ------------------------------------------------------------------------------------


def ensure_topics(config: WorkerConfig) -> list[str]:
    """Create the worker's missing topics; returns the ones created."""
    topics = [config.pages_topic, config.decisions_topic, config.dlq_topic]
    admin = AdminClient(client_settings(config))
    with kafka_errors("listing topics"):
        existing = set(admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics)
    missing = [t for t in topics if t not in existing]
    if not missing:
        return []
    new = [NewTopic(t, config.partitions, config.replication) for t in missing]
    for topic, future in admin.create_topics(new, request_timeout=REQUEST_TIMEOUT_S).items():
        try:
            future.result()
        except KafkaException as exc:
            # Another worker may create it between our listing and our request.
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise translate_error(exc.args[0], f"creating topic {topic}") from exc
    logger.info("created topics %s (%d partitions)", missing, config.partitions)
    return missing


# ---- the pages consumer -------------------------------------------------------------------------


class PageConsumer:
    """The group consumer of the pages topic: manual commits, read_committed, batch polls."""

    def __init__(
        self,
        config: WorkerConfig,
        on_rebalance: Callable[[str, list[Partition]], None] | None = None,
    ) -> None:
        self.topic = config.pages_topic
        self._on_rebalance = on_rebalance or _log_change
        #: Rebalance callbacks run so far (they run inside a poll): lets the worker notice that
        #: a batch's partitions may have moved between its poll and its commit.
        self.rebalances = 0
        #: Called before partitions are revoked, in the polling thread: the worker lets a
        #: commit in flight land first, so the partitions' next owner starts after it.
        self.before_revoke: Callable[[], None] = _nothing
        fetch_max = max(52_428_800, config.max_message_bytes)
        self._consumer = Consumer(
            {
                **client_settings(config),
                "group.id": config.group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "max.partition.fetch.bytes": 8 * 1024 * 1024,
                "fetch.max.bytes": fetch_max,
                "receive.message.max.bytes": min(2_147_483_647, fetch_max + (1 << 20)),
                # Kafka answers a waiting fetch as soon as pages arrive; Tansu only when the
                # wait is over, so this bounds what an idle fetch adds to a page's latency.
                "fetch.wait.max.ms": config.fetch_wait_ms,
                **GROUP_TIMEOUTS,
            }
        )
        with kafka_errors("subscribing to pages"):
            self._consumer.subscribe(
                [self.topic], on_assign=self._assigned, on_revoke=self._revoked
            )

    def _assigned(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self._on_rebalance("assigned", sorted((p.topic, p.partition) for p in partitions))

    def _revoked(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.before_revoke()
        self.rebalances += 1
        self._on_rebalance("revoked", sorted((p.topic, p.partition) for p in partitions))

    def poll_batch(self, max_records: int, max_wait_ms: int) -> list[Record]:
        """Up to ``max_records`` of the records already fetched; when there are none, waits up
        to ``max_wait_ms`` for the first one. Records keep their per-partition order.

        Taking what is there instead of waiting to fill the batch ("smart batching") lets the
        batch size follow the load: pages that arrive while a batch is being decided make up
        the next one, so a page waits about one batch, never a fixed linger on top.
        """
        with kafka_errors("polling pages"):
            first = self._consumer.poll(max_wait_ms / 1000)
            if first is None:
                return []
            rest = self._consumer.consume(max_records - 1, 0) if max_records > 1 else []
            messages = [first, *rest]
        records = [_record(m) for m in messages if not self._failed(m)]
        return self._still_assigned(records)

    @staticmethod
    def _failed(message: Message) -> bool:
        error = message.error()
        if error is None:
            return False
        if error.fatal():
            raise translate_error(error, "polling pages")
        logger.warning("consumer: %s: %s", error.name(), error.str())
        return True

    def _still_assigned(self, records: list[Record]) -> list[Record]:
        """Drop records of partitions a rebalance (inside a later poll) took away: their new
        owner starts from the committed offset and processes them."""
        if not records:
            return records
        assigned = self._assignment()
        kept = [r for r in records if (r.topic, r.partition) in assigned]
        if len(kept) < len(records):
            logger.info("dropped %d polled records of revoked partitions", len(records) - len(kept))
        return kept

    def _assignment(self) -> set[Partition]:
        with kafka_errors("reading the assignment"):
            return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def rewind(self, records: Sequence[Record]) -> None:
        """Seek each still-assigned partition back to the batch's first offset in it."""
        assigned = self._assignment()
        for (topic, partition), offset in first_offsets(records).items():
            if (topic, partition) in assigned:
                with kafka_errors("rewinding"):
                    self._consumer.seek(TopicPartition(topic, partition, offset))

    def commit(self, offsets: Offsets) -> None:
        """Commit synchronously (used when transactions are off)."""
        with kafka_errors("committing offsets"):
            done = self._consumer.commit(offsets=topic_partitions(offsets), asynchronous=False)
        for tp in done or ():
            if tp.error is not None:
                raise translate_error(tp.error, "committing offsets")

    def group_metadata(self) -> Any:
        return self._consumer.consumer_group_metadata()

    def lag(self) -> dict[Partition, int]:
        """Records not yet consumed per assigned partition (end offset minus position)."""
        with kafka_errors("reading end offsets"):
            assigned = self._consumer.assignment()
            positions = self._consumer.position(assigned) if assigned else []
            lag: dict[Partition, int] = {}
            for tp in positions:
                low, high = self._consumer.get_watermark_offsets(tp, timeout=5, cached=False)
                position = tp.offset if tp.offset >= 0 else low
                lag[(tp.topic, tp.partition)] = max(0, high - position)
            return lag

    def close(self) -> None:
        """Leave the group (its partitions move at once) without committing anything more."""
        with kafka_errors("closing the pages consumer"):
            self._consumer.close()


def _record(message: Message) -> Record:
    return Record(
        message.topic() or "",
        message.partition() or 0,
        message.offset() or 0,
        message.key(),
        message.value(),
    )


def topic_partitions(offsets: Offsets) -> list[TopicPartition]:
    return [TopicPartition(topic, part, offset) for (topic, part), offset in offsets.items()]


def first_offsets(records: Sequence[Record]) -> Offsets:
    """The lowest offset per partition of a batch: where to rewind to."""
    firsts: Offsets = {}
    for record in records:
        tp = (record.topic, record.partition)
        firsts[tp] = min(firsts.get(tp, record.offset), record.offset)
    return firsts


def next_offsets(records: Sequence[Record]) -> Offsets:
    """The offsets to commit after a batch: one past its last record per partition."""
    ends: Offsets = {}
    for record in records:
        tp = (record.topic, record.partition)
        ends[tp] = max(ends.get(tp, -1), record.offset + 1)
    return ends


def _nothing() -> None:
    return None


def _log_change(change: str, partitions: list[Partition]) -> None:
    logger.info("partitions %s: %s", change, [f"{t}[{p}]" for t, p in partitions])


def offsets_text(offsets: Mapping[Partition, int]) -> str:
    """``pages[0]@120,pages[3]@77``: how logs name a batch's committed offsets."""
    return ",".join(f"{topic}[{part}]@{offset}" for (topic, part), offset in offsets.items())
