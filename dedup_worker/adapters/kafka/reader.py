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
from typing import Literal

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)

from dedup_worker.adapters.kafka.errors import kafka_errors, translate_error
from dedup_worker.adapters.kafka.generations import (
    FOLLOW_S,
    HELD,
    READER_PREFIX,
    RELEASED,
    SETTLED_AFTER,
    current_generation,
    generation_name,
    generations_of,
    marker_group,
    topic_partitions_of,
)
from dedup_worker.adapters.kafka.records import Partition, Record, record_of
from dedup_worker.adapters.kafka.settings import REQUEST_TIMEOUT_S, KafkaSettings
from dedup_worker.adapters.kafka.topics import TopicAdmin
from dedup_worker.contract.messages import Decision, decode_decision
from dedup_worker.errors import BackendUnavailable, ContractError

logger = logging.getLogger(__name__)

#: Offset per partition of the one topic a reader reads.
PartitionOffsets = dict[int, int]
#: Where a reader starts: the oldest record, the end of the topic as it is now, or given
#: offsets (partitions not named start at the end).
Start = Literal["beginning", "end"] | Mapping[int, int]

_TOPIC_WAIT_S = 30.0


class TopicReader:
    """Reads every partition of ``topic`` from chosen positions; records come in order per
    partition. ``isolation``: ``read_committed`` (the default) or ``read_uncommitted``.
    One thread at a time (see :class:`ReaderThread`).

    A rolling topic (``KafkaSettings.rolling``, see ``generations.py``): the start positions
    apply to its newest generation ("beginning": every generation still there); a newer
    generation is read from its start as soon as it appears, and an older one is let go once
    read to its log end (an open transaction keeps it). It never joins a group; it marks what
    it fetches (HELD before assigning a generation, RELEASED after unassigning it) under its
    own group id's marker group, so the roller never deletes a generation it still fetches."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        isolation: str = "read_committed",
        fetch_wait_ms: int = 100,
        max_message_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.topic = topic
        self.group_id = f"{READER_PREFIX}{uuid.uuid4().hex}"
        self.rolling = topic in settings.rolling
        self._admin = TopicAdmin(settings) if self.rolling else None
        #: The partitions read now, per topic (one topic, or the generations being read).
        self.assigned: dict[str, list[int]] = {}
        #: Where each partition of a generation started (position() knows none before a read).
        self._placed: dict[Partition, int] = {}
        #: Generations read out and let go: where each partition stopped.
        self._gone: dict[str, dict[int, int]] = {}
        self._follow_due = 0.0
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

    def start(self, start: Start = "end", wait_s: float = _TOPIC_WAIT_S) -> PartitionOffsets:
        """Assign every partition at its start position; returns those positions. Waits up to
        ``wait_s`` for the topic to exist (its creator may be starting too)."""
        if self.rolling:
            return self._start_generations(start, wait_s)
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
        self.assigned = {self.topic: list(self.partitions)}
        self._placed = {(self.topic, p): o for p, o in offsets.items()}
        self.start_offsets = offsets
        return dict(offsets)

    def _start_generations(self, start: Start, wait_s: float) -> PartitionOffsets:
        deadline = time.monotonic() + wait_s
        while not (found := self._generations()):
            if time.monotonic() > deadline:
                raise BackendUnavailable(
                    f"topic {self.topic!r} has no generation after {wait_s:g} s"
                )
            time.sleep(0.2)
        numbers = [n for n, _, _ in found]
        current = current_generation(numbers)
        _, topic, partitions = next(g for g in found if g[0] == current)
        self.partitions = partitions
        bounds = {p: self._watermarks(p, topic) for p in partitions}
        if start == "beginning":
            offsets = {p: low for p, (low, _) in bounds.items()}
        else:
            ends = {p: high for p, (_, high) in bounds.items()}
            offsets = ends if start == "end" else {p: start.get(p, ends[p]) for p in partitions}
        chosen = [g for g in found if start == "beginning" or g[0] >= (current or 0)]
        placed = [
            TopicPartition(t, p, offsets[p] if t == topic else OFFSET_BEGINNING)
            for _, t, ps in chosen
            for p in ps
        ]
        self._placed = {(tp.topic, tp.partition): max(tp.offset, 0) for tp in placed}
        self._mark({t: ps for _, t, ps in chosen}, HELD)  # before fetching: the roller keeps them
        with kafka_errors(f"assigning {self.topic}"):
            self._consumer.assign(placed)
        self.assigned = {t: list(ps) for _, t, ps in chosen}
        self.start_offsets = offsets
        return dict(offsets)

    def _generations(self) -> list[tuple[int, str, list[int]]]:
        """The generations of the rolling topic, oldest first: number, name, partitions."""
        topics = topic_partitions_of(self._consumer)
        numbers = generations_of(self.topic, topics)
        return [(n, generation_name(self.topic, n), topics[generation_name(self.topic, n)])
                for n in numbers]  # fmt: skip

    def _mark(self, topics: Mapping[str, list[int]], value: int) -> None:
        """Commit fetch markers (``generations.py``) for the partitions of ``topics``."""
        assert self._admin is not None
        for topic, partitions in topics.items():
            self._admin.commit(marker_group(self.group_id), topic, {p: value for p in partitions})

    def _follow_generations(self) -> None:
        """Every ``FOLLOW_S``: read new generations from their start, let go of those older
        than the current one once read to their log end (take one back if its end moved),
        and commit the positions (the roller reads them)."""
        if not self.rolling or time.monotonic() < self._follow_due:
            return
        self._follow_due = time.monotonic() + FOLLOW_S
        found = self._generations()
        if not found:
            return
        current = current_generation([n for n, _, _ in found]) or 0
        known = max(generations_of(self.topic, [*self.assigned, *self._gone]), default=-1)
        added = [(t, ps) for n, t, ps in found if n > known]
        if added:
            self._assign({(t, p): OFFSET_BEGINNING for t, ps in added for p in ps})
            self.assigned.update(added)
            self._placed.update({(t, p): 0 for t, ps in added for p in ps})
            logger.info("reading generations %s", [t for t, _ in added])
        existing = {t for _, t, _ in found}
        settled = found[-1][0] - SETTLED_AFTER
        for topic in list(self._gone):
            if topic not in existing or generations_of(self.topic, [topic])[0] <= settled:
                del self._gone[topic]  # deleted, or producers left it rolls ago
            elif self._moved(topic):
                self._take_back(topic)
        for n, topic, _ in found:
            if n < current and topic in self.assigned and self._read_out(topic):
                self._let_go(topic)

    def _assign(self, offsets: Mapping[Partition, int]) -> None:
        """Mark the partitions HELD, then fetch them."""
        held: dict[str, list[int]] = {}
        for topic, partition in offsets:
            held.setdefault(topic, []).append(partition)
        self._mark(held, HELD)
        with kafka_errors(f"assigning {self.topic}"):
            self._consumer.incremental_assign(
                [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            )

    def _read_out(self, topic: str) -> bool:
        """True once every partition of ``topic`` was read to its log end (an open
        transaction's records count, so a reader waits for its outcome)."""
        assert self._admin is not None
        partitions = self.assigned[topic]
        ends = self._admin.log_ends(topic, partitions)
        positions = self._positions_of(topic, partitions)
        return all(positions.get(p, -1) >= end for p, end in ends.items() if end > 0)

    def _moved(self, topic: str) -> bool:
        """True if a generation let go of got records after (its log end moved on)."""
        assert self._admin is not None
        left = self._gone[topic]
        ends = self._admin.log_ends(topic, list(left))
        return any(end > left[p] for p, end in ends.items())

    def _take_back(self, topic: str) -> None:
        left = self._gone.pop(topic)
        logger.warning("generation %s got records after it was read out: reading it again", topic)
        self._assign({(topic, p): o for p, o in left.items()})
        self.assigned[topic] = sorted(left)

    def _let_go(self, topic: str) -> None:
        partitions = self.assigned.pop(topic)
        read = self._positions_of(topic, partitions)
        self._gone[topic] = read
        # Stop fetching first, then tell the roller: it may delete the topic from then on.
        with kafka_errors(f"unassigning {topic}"):
            self._consumer.incremental_unassign([TopicPartition(topic, p) for p in partitions])
        self._mark({topic: partitions}, RELEASED)
        logger.info("read generation %s to its end", topic)

    def _positions_of(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """The next offset to read per partition (where nothing was read yet: the start)."""
        with kafka_errors(f"reading the positions on {topic}"):
            found = self._consumer.position([TopicPartition(topic, p) for p in partitions])
        return {
            tp.partition: tp.offset if tp.offset >= 0 else self._placed.get((topic, p), 0)
            for tp in found
            for p in [tp.partition]
        }

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
        self._follow_generations()
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
        topic = self._newest_read()
        return {p: self._watermarks(p, topic)[1] for p in self.assigned.get(topic, [])}

    def _newest_read(self) -> str:
        if not self.rolling or not self.assigned:
            return self.topic
        return generation_name(self.topic, max(generations_of(self.topic, self.assigned)))

    def ends(self) -> dict[Partition, int]:
        """The end of every partition read now (every generation being read)."""
        return {(t, p): self._watermarks(p, t)[1] for t, ps in self.assigned.items() for p in ps}

    def reached(self, ends: Mapping[Partition, int]) -> bool:
        """True once every partition of ``ends`` was read up to it (or let go: read out)."""
        for topic, partitions in self.assigned.items():
            positions = self._positions_of(topic, partitions)
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
