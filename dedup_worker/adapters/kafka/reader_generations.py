"""A reader's side of rolling generations (``generations.py``): which generations it fetches.

A :class:`~dedup_worker.adapters.kafka.reader.TopicReader` of a rolling topic reads the
generations through a :class:`GenerationFollower`: the start positions apply to the current
generation ("beginning": every generation still there); a newer generation is read from its
start as soon as it appears, and an older one is let go once read to its log end (an open
transaction keeps it) and older for ``LET_GO_AFTER_S`` (producers still write to it that
long), taken back if its end moves later (a producer that had not re-read the metadata yet).

The reader never joins a group; it marks what it fetches under its own marker group: HELD
before it assigns a generation, RELEASED after it unassigned it, so the roller never deletes a
generation it still fetches. Every partition is assigned at an absolute offset (its log start
read first), never "beginning": librdkafka places a logical offset by a ListOffsets lookup,
and a partition unassigned while that lookup is in flight starts fetching again when the
outdated answer arrives ("outdated offset response: (re)starting offset query timer"), a
fetch the reader no longer knows about, which crashes it once the roller deletes the topic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Literal

from confluent_kafka import Consumer, TopicPartition

from dedup_worker.adapters.kafka.errors import kafka_errors
from dedup_worker.adapters.kafka.generations import (
    FOLLOW_S,
    HELD,
    REFRESH_S,
    RELEASED,
    SETTLED_AFTER,
    current_generation,
    generation_name,
    generations_of,
    marker_group,
    topic_partitions_of,
)
from dedup_worker.adapters.kafka.records import Partition
from dedup_worker.adapters.kafka.topics import TopicAdmin
from dedup_worker.errors import BackendUnavailable

logger = logging.getLogger(__name__)

#: A generation older than the current one is let go only once a look found it older this
#: long before: producers re-read which generation is current every ``REFRESH_S``, so records
#: keep landing in it for about that long after a roll. Let go at the first look, such a record
#: made the reader take the generation back at the next one: its decisions ~3 s late (a few
#: hundred pages a time, 2-5 times in 10 minutes of the 1,000 pages/s soak).
LET_GO_AFTER_S = 2 * REFRESH_S
#: Where a reader starts: the oldest record, the end of the topic as it is now, or given
#: offsets (partitions not named start at the end).
Start = Literal["beginning", "end"] | Mapping[int, int]
#: A generation: its number, its name, its partitions.
Generation = tuple[int, str, list[int]]


class GenerationFollower:
    """Assigns and unassigns the generations of ``base`` on ``consumer`` (module doc)."""

    def __init__(self, base: str, consumer: Consumer, admin: TopicAdmin, group_id: str) -> None:
        self.base = base
        self._consumer = consumer
        self._admin = admin
        self._markers = marker_group(group_id)
        #: The partitions fetched now, per generation.
        self.assigned: dict[str, list[int]] = {}
        #: Where each partition started (``position()`` knows none before a first read).
        self._placed: dict[Partition, int] = {}
        #: Generations read out and let go: where each partition stopped.
        self._gone: dict[str, dict[int, int]] = {}
        #: When a look first found each fetched generation older than the current one.
        self._older_since: dict[str, float] = {}
        self._due = 0.0

    def start(self, start: Start, wait_s: float) -> dict[int, int]:
        """Assign the current generation and the spare at ``start`` ("beginning": the older
        generations too, from their log start; saved offsets count as "beginning"); returns
        the current generation's start offsets. Waits up to ``wait_s`` for a first one."""
        deadline = time.monotonic() + wait_s
        while not (found := self.generations()):
            if time.monotonic() > deadline:
                raise BackendUnavailable(
                    f"topic {self.base!r} has no generation after {wait_s:g} s"
                )
            time.sleep(0.2)
        if not isinstance(start, str):
            # Saved positions (a resumed crawl) name no generation, and the one they were read
            # in may be gone: read every generation still there instead (decisions repeat
            # harmlessly; applied to another generation they would skip some).
            logger.info("resuming %s: reading every generation still there", self.base)
            start = "beginning"
        current = current_generation([n for n, _, _ in found])
        _, topic, partitions = next(g for g in found if g[0] == current)
        if start == "beginning":
            offsets = self._admin.log_starts(topic, partitions)
        else:
            offsets = self._admin.log_ends(topic, partitions)
        chosen = [g for g in found if start == "beginning" or g[0] >= (current or 0)]
        placed: dict[Partition, int] = {}
        for _, name, numbers in chosen:
            starts = offsets if name == topic else self._admin.log_starts(name, numbers)
            placed.update({(name, p): starts[p] for p in numbers})
        self._assign(placed)
        return dict(offsets)

    def generations(self) -> list[Generation]:
        """The generations there are now, oldest first."""
        topics = topic_partitions_of(self._consumer)
        numbers = generations_of(self.base, topics)
        names = [(n, generation_name(self.base, n)) for n in numbers]
        return [(n, name, topics[name]) for n, name in names]

    def follow(self) -> None:
        """At most every ``FOLLOW_S``: read new generations from their start, let go of those
        older than the current one once read to their log end, take one back if its end
        moved."""
        if time.monotonic() < self._due:
            return
        self._due = time.monotonic() + FOLLOW_S
        found = self.generations()
        if not found:
            return
        known = max(generations_of(self.base, [*self.assigned, *self._gone]), default=-1)
        added = [(name, ps) for n, name, ps in found if n > known]
        if added:
            starts = {name: self._admin.log_starts(name, ps) for name, ps in added}
            self._assign({(name, p): starts[name][p] for name, ps in added for p in ps})
            logger.info("reading generations %s", [name for name, _ in added])
        self._look_at_gone(found)
        current = current_generation([n for n, _, _ in found]) or 0
        now = time.monotonic()
        for n, name, _ in found:
            if n < current and name in self.assigned:
                since = self._older_since.setdefault(name, now)
                if now - since >= LET_GO_AFTER_S and self._read_out(name):
                    self._let_go(name)

    def _look_at_gone(self, found: list[Generation]) -> None:
        existing = {name for _, name, _ in found}
        settled = found[-1][0] - SETTLED_AFTER
        for name in list(self._gone):
            if name not in existing or generations_of(self.base, [name])[0] <= settled:
                del self._gone[name]  # deleted, or producers left it rolls ago
            elif self._moved(name):
                self._take_back(name)

    def _assign(self, offsets: Mapping[Partition, int]) -> None:
        """Mark the partitions HELD, then fetch them from their (absolute) offsets."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in offsets:
            by_topic.setdefault(topic, []).append(partition)
        self._mark(by_topic, HELD)
        with kafka_errors(f"assigning {self.base}"):
            self._consumer.incremental_assign(
                [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            )
        for topic, partitions in by_topic.items():
            self.assigned[topic] = sorted(partitions)
        self._placed.update(offsets)

    def _read_out(self, topic: str) -> bool:
        """True once every partition of ``topic`` was read to its log end (an open
        transaction's records count, so a reader waits for its outcome)."""
        partitions = self.assigned[topic]
        ends = self._admin.log_ends(topic, partitions)
        positions = self.positions_of(topic, partitions)
        return all(positions.get(p, -1) >= end for p, end in ends.items())

    def _moved(self, topic: str) -> bool:
        """True if a generation let go of got records after (its log end moved on)."""
        left = self._gone[topic]
        ends = self._admin.log_ends(topic, list(left))
        return any(end > left[p] for p, end in ends.items())

    def _take_back(self, topic: str) -> None:
        left = self._gone.pop(topic)
        logger.warning("generation %s got records after it was read out: reading it again", topic)
        self._assign({(topic, p): o for p, o in left.items()})

    def _let_go(self, topic: str) -> None:
        partitions = self.assigned.pop(topic)
        self._older_since.pop(topic, None)
        self._gone[topic] = self.positions_of(topic, partitions)
        # Stop fetching first, then tell the roller: it may delete the topic from then on.
        with kafka_errors(f"unassigning {topic}"):
            self._consumer.incremental_unassign([TopicPartition(topic, p) for p in partitions])
        self._mark({topic: partitions}, RELEASED)
        logger.info("read generation %s to its end", topic)

    def let_go_all(self) -> None:
        """Stop fetching every generation, then release them (the reader is closing)."""
        held, self.assigned = self.assigned, {}
        if not held:
            return
        with kafka_errors(f"unassigning {self.base}"):
            self._consumer.incremental_unassign(
                [TopicPartition(t, p) for t, ps in held.items() for p in ps]
            )
        self._mark(held, RELEASED)

    def _mark(self, topics: Mapping[str, list[int]], value: int) -> None:
        for topic, partitions in topics.items():
            self._admin.commit(self._markers, topic, {p: value for p in partitions})

    def positions_of(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """The next offset to read per partition (where nothing was read yet: the start)."""
        with kafka_errors(f"reading the positions on {topic}"):
            found = self._consumer.position([TopicPartition(topic, p) for p in partitions])
        return {
            tp.partition: tp.offset
            if tp.offset >= 0
            else self._placed.get((topic, tp.partition), 0)
            for tp in found
        }

    def newest(self) -> str | None:
        """The newest generation read."""
        numbers = generations_of(self.base, self.assigned)
        return generation_name(self.base, numbers[-1]) if numbers else None
