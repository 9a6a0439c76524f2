"""Topics: list, create (idempotently, several processes may race), delete, partitions of one."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.cimpl import NewTopic

from dedup_worker.adapters.kafka.errors import kafka_errors, translate
from dedup_worker.adapters.kafka.generations import (
    Router,
    generation_name,
    generations_of,
    topic_partitions_of,
)
from dedup_worker.adapters.kafka.settings import REQUEST_TIMEOUT_S, KafkaSettings
from dedup_worker.errors import BackendUnavailable

logger = logging.getLogger(__name__)


class TopicAdmin:
    """An admin client; every failure comes out as a ``NeardupError``.

    ``quiet``: connection trouble is not logged (a readiness probe expects it)."""

    def __init__(self, settings: KafkaSettings, *, quiet: bool = False) -> None:
        with kafka_errors("configuring the Kafka admin client"):
            self._admin = AdminClient(settings.client_config(quiet=quiet))
        self.rolling = settings.rolling
        #: A rolling topic's name means its newest generation (see ``generations.py``).
        self.router = Router(settings, self._admin)

    def names(self, timeout: float = REQUEST_TIMEOUT_S) -> set[str]:
        """The topics the broker has."""
        with kafka_errors("listing topics"):
            return set(self._admin.list_topics(timeout=timeout).topics)

    def topic_partitions(self) -> dict[str, list[int]]:
        """Every topic the broker has, with its partition ids."""
        return topic_partitions_of(self._admin)

    def partitions(self, topic: str, timeout: float = REQUEST_TIMEOUT_S) -> list[int]:
        """The partition ids of ``topic`` (of a rolling one: of its newest generation), sorted;
        empty when it does not exist (yet)."""
        if topic in self.rolling:
            self.router.refresh()
            topic = self.router.topic(topic)
        with kafka_errors(f"reading the metadata of {topic}"):
            found = self._admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if found is None or found.error is not None:
            return []
        return sorted(found.partitions)

    def create(self, topics: Sequence[str], partitions: int, replication: int = 1) -> list[str]:
        """Create the topics of ``topics`` that do not exist; returns the ones this call
        created (another process may create one between our listing and our request). A
        rolling topic (``KafkaSettings.rolling``) exists once any generation of it does; if
        none does, its generation 0 is created."""
        names = self.names()
        wanted = [self._first_generation(t, names) for t in topics]
        missing = [t for t in wanted if t is not None and t not in names]
        if not missing:
            return []
        new = [NewTopic(t, partitions, replication) for t in missing]
        with kafka_errors("creating topics"):
            futures = self._admin.create_topics(new, request_timeout=REQUEST_TIMEOUT_S)
        created = [topic for topic, future in futures.items() if _created(topic, future)]
        if created:
            logger.info("created topics %s (%d partitions)", created, partitions)
        return created

    def _first_generation(self, topic: str, names: set[str]) -> str | None:
        if topic not in self.rolling:
            return topic
        return None if generations_of(topic, names) else generation_name(topic, 0)

    def delete(self, topics: Sequence[str]) -> None:
        """Delete topics (missing ones are ignored)."""
        with kafka_errors("deleting topics"):
            futures = self._admin.delete_topics(list(topics), request_timeout=REQUEST_TIMEOUT_S)
        for topic, future in futures.items():
            _done(future, f"deleting topic {topic}", KafkaError.UNKNOWN_TOPIC_OR_PART)

    def log_ends(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """The log end of each partition, records of open transactions included (a
        read_committed end stops before them)."""
        return self._list_offsets(topic, partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]

    def log_starts(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """The first offset of each partition (where a reader "from the beginning" starts)."""
        return self._list_offsets(topic, partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]

    def _list_offsets(
        self, topic: str, partitions: Sequence[int], spec: OffsetSpec
    ) -> dict[int, int]:
        if not partitions:
            return {}
        specs = {TopicPartition(topic, p): spec for p in partitions}
        with kafka_errors(f"reading the offsets of {topic}"):
            futures = self._admin.list_offsets(
                specs,
                isolation_level=IsolationLevel.READ_UNCOMMITTED,
                request_timeout=REQUEST_TIMEOUT_S,
            )
            return {tp.partition: future.result().offset for tp, future in futures.items()}

    def group_ids(self) -> list[str]:
        """The consumer groups the broker knows (those that committed offsets included)."""
        with kafka_errors("listing consumer groups"):
            found = self._admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S).result()
        return sorted(group.group_id for group in found.valid)

    def committed(
        self, group: str, topic: str, partitions: Sequence[int], *, stable: bool = False
    ) -> dict[int, int]:
        """The offsets ``group`` committed on ``topic`` (partitions without one left out).
        ``stable``: wait for the outcome of transactions that commit offsets on them (what a
        read_committed group consumer reads before it fetches)."""
        wanted = [TopicPartition(topic, p) for p in partitions]
        request = ConsumerGroupTopicPartitions(group, wanted)
        with kafka_errors(f"reading the offsets {group} committed on {topic}"):
            futures = self._admin.list_consumer_group_offsets(
                [request], require_stable=stable, request_timeout=REQUEST_TIMEOUT_S
            )
            result = futures[group].result()
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Commit ``offsets`` of ``topic`` under ``group`` (a group nobody joins: the fetch
        markers of ``generations.py``); waits for the answer."""
        placed = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        request = ConsumerGroupTopicPartitions(group, placed)
        with kafka_errors(f"committing offsets of {group} on {topic}"):
            # Bounded as every admin call here: without it librdkafka waits socket.timeout.ms
            # (60 s), and a worker told to stop while its broker is gone took 65 s to exit.
            futures = self._admin.alter_consumer_group_offsets(
                [request], request_timeout=REQUEST_TIMEOUT_S
            )
            futures[group].result()

    def wait_for(self, topic: str, timeout: float = REQUEST_TIMEOUT_S) -> list[int]:
        """The partitions of ``topic`` once it has some (another process may be creating it);
        ``BackendUnavailable`` if it has none after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.partitions(topic)
            if found:
                return found
            if time.monotonic() > deadline:
                raise BackendUnavailable(f"topic {topic!r} has no partitions after {timeout:g} s")
            time.sleep(0.2)


def _created(topic: str, future: Future[None]) -> bool:
    return _done(future, f"creating topic {topic}", KafkaError.TOPIC_ALREADY_EXISTS)


def _done(future: Future[None], what: str, harmless: int) -> bool:
    """Wait for an admin request; False if it failed with the ``harmless`` error code."""
    try:
        future.result()
    except KafkaException as exc:
        if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() == harmless:
            return False
        raise translate(exc, what) from exc
    return True


def ensure_topics(
    settings: KafkaSettings, topics: Sequence[str], partitions: int, replication: int = 1
) -> list[str]:
    """Create the missing ones of ``topics`` (any process may start first); returns them."""
    return TopicAdmin(settings).create(topics, partitions, replication)
