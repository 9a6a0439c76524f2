"""Reading a whole topic without a consumer group: the decision reader of every process.

The crawler follows ``decisions`` to schedule its pages' outlinks, ``neardup crawl`` records
them, ``neardup decisions`` tails them and the tests read them back: each is a
:class:`TopicReader` (every partition assigned, read_committed, positions chosen by the
caller), on a thread of its own when the caller has an event loop (:class:`ReaderThread`,
:class:`DecisionFeed`). No group: every crawler process must see the decisions for its own
pages wherever a worker published them, and no reader may take partitions from another.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Mapping

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, Message, TopicPartition

from dedup_worker.adapters.kafka.errors import kafka_errors, translate_error
from dedup_worker.adapters.kafka.generations import READER_PREFIX
from dedup_worker.adapters.kafka.reader_generations import GenerationFollower, Start
from dedup_worker.adapters.kafka.records import Partition, Record, record_of
from dedup_worker.adapters.kafka.settings import REQUEST_TIMEOUT_S, KafkaSettings
from dedup_worker.adapters.kafka.topics import TopicAdmin
from dedup_worker.contract.messages import Decision, decode_decision
from dedup_worker.errors import BackendUnavailable, ContractError, NeardupError

logger = logging.getLogger(__name__)

#: Offset per partition of the one topic a reader reads.
PartitionOffsets = dict[int, int]

_TOPIC_WAIT_S = 30.0

#: How long the broker may hold a reader's fetch when there is nothing new (the crawler's
#: ``DecisionFeed`` reads with it): decisions come in batches, so a longer wait costs little
#: latency and saves the broker a request every few milliseconds.
READER_FETCH_WAIT_MS = 100


class TopicReader:
    """Reads every partition of ``topic`` from chosen positions; records come in order per
    partition. ``isolation``: ``read_committed`` (the default) or ``read_uncommitted``.
    One thread at a time (see :class:`ReaderThread`).

    A rolling topic (``KafkaSettings.rolling``) is read generation by generation, from the
    current one on (``reader_generations.py``)."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        isolation: str = "read_committed",
        fetch_wait_ms: int = READER_FETCH_WAIT_MS,
        max_message_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.topic = topic
        self.group_id = f"{READER_PREFIX}{uuid.uuid4().hex}"
        self.rolling = topic in settings.rolling
        fetch_max = max(52_428_800, max_message_bytes)
        self._consumer = Consumer(
            settings.client_config(
                {
                    # librdkafka wants a group id even for assign(); nothing joins or commits.
                    "group.id": self.group_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": isolation,
                    "fetch.wait.max.ms": fetch_wait_ms,
                    "fetch.max.bytes": fetch_max,
                    "receive.message.max.bytes": min(2_147_483_647, fetch_max + (1 << 20)),
                }
            )
        )
        self.partitions: list[int] = []
        self.start_offsets: PartitionOffsets = {}
        self._generations = (
            GenerationFollower(topic, self._consumer, TopicAdmin(settings), self.group_id)
            if self.rolling
            else None
        )

    def start(self, start: Start = "end", wait_s: float = _TOPIC_WAIT_S) -> PartitionOffsets:
        """Assign every partition at its start position; returns those positions. Waits up to
        ``wait_s`` for the topic to exist (its creator may be starting too)."""
        if self._generations is not None:
            self.start_offsets = self._generations.start(start, wait_s)
            self.partitions = sorted(self.start_offsets)
            return dict(self.start_offsets)
        self.partitions = self._wait_for_partitions(wait_s)
        bounds = {p: self._watermarks(p) for p in self.partitions}
        if start == "beginning":
            offsets = {p: low for p, (low, _) in bounds.items()}
        elif start == "end":
            offsets = {p: high for p, (_, high) in bounds.items()}
        else:
            offsets = {p: start.get(p, high) for p, (_, high) in bounds.items()}
        with kafka_errors(f"assigning {self.topic}"):
            self._consumer.assign([TopicPartition(self.topic, p, o) for p, o in offsets.items()])
        self.start_offsets = offsets
        return dict(offsets)

    def _wait_for_partitions(self, wait_s: float) -> list[int]:
        deadline = time.monotonic() + wait_s
        while True:
            with kafka_errors(f"reading the metadata of {self.topic}"):
                metadata = self._consumer.list_topics(self.topic, timeout=REQUEST_TIMEOUT_S)
            found = metadata.topics.get(self.topic)
            if found is not None and found.error is None and found.partitions:
                return sorted(found.partitions)
            if time.monotonic() > deadline:
                raise BackendUnavailable(
                    f"topic {self.topic!r} has no partitions after {wait_s:g} s"
                )
            time.sleep(0.2)

    def _watermarks(self, partition: int, topic: str | None = None) -> tuple[int, int]:
        topic = topic or self.topic
        with kafka_errors(f"reading the offsets of {topic}[{partition}]"):
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=REQUEST_TIMEOUT_S, cached=False
            )
        return low, high

    def poll(self, timeout_s: float, max_records: int = 1000) -> list[Record]:
        """The records there are, as soon as there is one (up to ``timeout_s`` for the first)."""
        if self._generations is not None:
            self._generations.follow()
        with kafka_errors(f"reading {self.topic}"):
            first = self._consumer.poll(timeout_s)
            if first is None:
                return []
            rest = self._consumer.consume(max_records - 1, 0) if max_records > 1 else []
        return [record_of(m) for m in (first, *rest) if not self._failed(m)]

    def _failed(self, message: Message) -> bool:
        error = message.error()
        if error is None:
            return False
        if error.fatal():
            raise translate_error(error, f"reading {self.topic}")
        if error.code() != KafkaError._PARTITION_EOF:
            logger.warning("reading %s: %s: %s", self.topic, error.name(), error.str())
        return True

    def end_offsets(self) -> PartitionOffsets:
        """The end of each partition now (the offset the next record will get); of the
        newest generation read, for a rolling topic (:meth:`ends` covers them all)."""
        newest = self._generations.newest() if self._generations is not None else None
        topic = newest or self.topic
        return {p: self._watermarks(p, topic)[1] for p in self.assigned().get(topic, [])}

    def assigned(self) -> dict[str, list[int]]:
        """The partitions read now, per topic (the topic, or the generations being read)."""
        if self._generations is not None:
            return {t: list(ps) for t, ps in self._generations.assigned.items()}
        return {self.topic: list(self.partitions)}

    def ends(self) -> dict[Partition, int]:
        """The end of every partition read now (every generation being read)."""
        return {(t, p): self._watermarks(p, t)[1] for t, ps in self.assigned().items() for p in ps}

    def reached(self, ends: Mapping[Partition, int]) -> bool:
        """True once every partition of ``ends`` was read up to it (or let go: read out)."""
        for topic, partitions in self.assigned().items():
            if self._generations is not None:
                positions = self._generations.positions_of(topic, partitions)
            else:
                positions = self.positions()
            if any(positions[p] < ends.get((topic, p), 0) for p in partitions):
                return False
        return True

    def positions(self) -> PartitionOffsets:
        """The offset of the next record to read, per partition."""
        with kafka_errors(f"reading the positions on {self.topic}"):
            found = self._consumer.position(
                [TopicPartition(self.topic, p) for p in self.partitions]
            )
        # Nothing read yet from a partition: librdkafka has no position, the start is it.
        start = self.start_offsets
        return {
            tp.partition: start[tp.partition] if tp.offset == OFFSET_INVALID else tp.offset
            for tp in found
        }

    def caught_up(self, ends: Mapping[int, int]) -> bool:
        """True once every partition was read up to ``ends`` (from :meth:`end_offsets`)."""
        positions = self.positions()
        return all(positions.get(p, 0) >= end for p, end in ends.items())

    def close(self) -> None:
        """Stop reading; a reader of generations first lets every one go (its markers would
        keep them from deletion for the rest of the stack's life: ``neardup up``)."""
        generations, self._generations = self._generations, None
        if generations is not None:
            try:
                generations.let_go_all()
            except NeardupError as exc:
                logger.warning("generations of %s not released: %s", self.topic, exc)
        # Dropped, its admin client closes its connections now (librdkafka's AdminClient has
        # no close): kept alive by a reference cycle of the reader's owner, it held the
        # embedded broker's shutdown for its 5 s timeout at the end of every neardup crawl.
        del generations
        with kafka_errors(f"closing the reader of {self.topic}"):
            self._consumer.close()


class ReaderThread(threading.Thread):
    """Polls a started :class:`TopicReader` on a daemon thread, handing each batch of records
    to ``handle`` (in that thread); :meth:`stop` ends it and closes the reader. A broker that
    cannot be reached is waited out (logged, retried every second).

    Every call on the reader's client happens in this thread: librdkafka blocks a call made
    from another thread while one polls (even ``position``), so :meth:`drain` asks this
    thread to check how far it read instead of looking itself.
    """

    def __init__(
        self, reader: TopicReader, handle: Callable[[list[Record]], None], name: str
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.reader = reader
        self._handle = handle
        self._stopping = threading.Event()
        self._drain_wanted = threading.Event()
        self._drained = threading.Event()
        self._drain_ends: dict[Partition, int] | None = None

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self._step()
                except BackendUnavailable as exc:
                    logger.warning("%s; retrying in 1 s", exc)
                    self._stopping.wait(1.0)
        finally:
            self.reader.close()

    def _step(self) -> None:
        records = self.reader.poll(0.1)
        if records:
            self._handle(records)
        if self._drain_wanted.is_set() and not self._drained.is_set():
            if self._drain_ends is None:
                self._drain_ends = self.reader.ends()
            if self.reader.reached(self._drain_ends):
                self._drained.set()

    def drain(self, timeout: float) -> bool:
        """Blocking: wait until everything on the topic when this is called was handed over
        (True), or ``timeout`` seconds passed (False)."""
        self._drain_wanted.set()
        return self._drained.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Blocking: stop polling and close the reader."""
        self._stopping.set()
        if self.is_alive():
            self.join(timeout)
        elif self.ident is None:  # never started: close the reader here
            self.reader.close()


class DecisionFeed:
    """The decisions of one topic, decoded on a reader thread into a queue the owner drains
    (the crawler drains it from Twisted's reactor). An undecodable message is queued as its
    ``ContractError``, so the owner can count it."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self.topic = topic
        self.queue: queue.SimpleQueue[Decision | ContractError] = queue.SimpleQueue()
        self._settings = settings
        self._thread: ReaderThread | None = None
        self.start_offsets: PartitionOffsets = {}

    def start(self, resume_from: Mapping[int, int] | None = None) -> PartitionOffsets:
        """Blocking (run it in a thread): start at ``resume_from`` (the positions a previous
        run saved) or, without them, at the end of the topic, so that no decision for a page
        published from now on can be missed; returns the start offsets."""
        reader = TopicReader(self._settings, self.topic)
        self.start_offsets = reader.start(resume_from or "end")
        self._thread = ReaderThread(reader, self._enqueue, name="neardup-decisions")
        self._thread.start()
        return dict(self.start_offsets)

    def _enqueue(self, records: list[Record]) -> None:
        for record in records:
            self.queue.put(decode_record(record))

    def drain(self, limit: int) -> list[Decision | ContractError]:
        items: list[Decision | ContractError] = []
        while len(items) < limit:
            try:
                items.append(self.queue.get_nowait())
            except queue.Empty:
                break
        return items

    def stop(self, timeout: float = 5.0) -> None:
        """Blocking: stop the reader thread and close the consumer."""
        if self._thread is not None:
            self._thread.stop(timeout)


def committed_offsets(settings: KafkaSettings, group_id: str, topic: str) -> PartitionOffsets:
    """The offsets consumer group ``group_id`` committed on ``topic`` (0 where none)."""
    consumer = Consumer(settings.client_config({"group.id": group_id}))
    try:
        with kafka_errors(f"reading the offsets {group_id} committed on {topic}"):
            metadata = consumer.list_topics(topic, timeout=REQUEST_TIMEOUT_S).topics.get(topic)
            partitions = sorted(metadata.partitions) if metadata is not None else []
            found = consumer.committed(
                [TopicPartition(topic, p) for p in partitions], timeout=REQUEST_TIMEOUT_S
            )
        return {tp.partition: max(tp.offset, 0) for tp in found}
    finally:
        consumer.close()


def decode_record(record: Record) -> Decision | ContractError:
    """The decision a record carries, or why it carries none."""
    try:
        return decode_decision(record.value or b"")
    except ContractError as exc:
        return exc
