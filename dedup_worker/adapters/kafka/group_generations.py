"""A group consumer's side of rolling generations: what to subscribe to, and its fetch markers.

The look at the broker (which generations exist, which the group consumed to their end) runs
on a thread of its own every ``FOLLOW_S``, with its own admin client: the worker's poll only
compares two lists (:meth:`GroupGenerations.wanted`). A generation older than the current
one and the spare is followed while the group has not consumed it to its end, so a worker
behind follows at most the generations it still has to read, and drops each once done.

The fetch markers (``generations.py``): HELD is committed in the assign callback, before the
consumer fetches a partition; RELEASED in the revoke callback, after it unassigned it. Both
are synchronous requests, made only when partitions move.

The assign callback also places each partition at an absolute offset (:meth:`start_offsets`):
the group's committed offset, else the log start. Left to librdkafka, a partition without a
committed offset is placed by a "beginning" lookup (ListOffsets), and a partition revoked
while that lookup is in flight starts fetching again when its outdated answer arrives
(librdkafka 2.x restarts the lookup: "outdated offset response: (re)starting offset query
timer", seen in a debug log): a consumer that fetches a generation it released, which
crashes it when the roller deletes the generation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from dedup_worker.adapters.kafka.generations import (
    FOLLOW_S,
    HELD,
    RELEASED,
    SETTLED_AFTER,
    generation_name,
    generations_of,
    live_generations,
    marker_group,
    merge_changes,
)
from dedup_worker.adapters.kafka.records import Partition
from dedup_worker.adapters.kafka.settings import KafkaSettings
from dedup_worker.adapters.kafka.topics import TopicAdmin
from dedup_worker.errors import NeardupError

logger = logging.getLogger(__name__)

#: The group timeouts of a consumer of rolling generations. Every roll changes the
#: subscription, so the group rebalances, and Tansu holds each JoinGroup until half the session
#: timeout has passed (in 1 s steps: ``join_group_pause`` in its group coordinator); a worker's
#: commit waits for the rebalance to end, so with the default 6 s session every roll stalled
#: the decisions for 3 s (measured: p99 3.2 s at 1,000 pages/s). 2 s makes that 1 s; four
#: heartbeats (from librdkafka's own thread) still fit in a session.
ROLLING_GROUP_TIMEOUTS: dict[str, int] = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 500}


class GroupGenerations:
    """The live generations of ``base`` for ``group_id``, kept fresh by a daemon thread."""

    def __init__(self, settings: KafkaSettings, base: str, group_id: str) -> None:
        self.base = base
        self.group_id = group_id
        self._admin = TopicAdmin(settings)
        self._settled: set[str] = set()
        self._stopping = threading.Event()
        self._wanted = self._look()  # the first look in the caller's thread: subscribe to it
        self._held = 0
        self._thread = threading.Thread(target=self._run, name="generations", daemon=True)
        self._thread.start()

    def wanted(self) -> list[str]:
        """The generations to subscribe to, as of the last look."""
        return list(self._wanted)

    def _run(self) -> None:
        while not self._stopping.wait(FOLLOW_S):
            try:
                self._wanted = self._merged(self._look())
            except NeardupError as exc:
                logger.warning("topic generations not followed: %s", exc)

    def _merged(self, wanted: list[str]) -> list[str]:
        merged, self._held = merge_changes(self._wanted, wanted, self._held)
        return merged

    def _look(self) -> list[str]:
        topics = self._admin.topic_partitions()
        numbers = generations_of(self.base, topics)
        if not numbers:
            return [generation_name(self.base, 0)]

        def consumed(number: int) -> bool:
            topic = generation_name(self.base, number)
            if topic in self._settled:
                return True
            done = self._consumed(topic, topics[topic])
            if done and number <= numbers[-1] - SETTLED_AFTER:
                self._settled.add(topic)  # producers left it rolls ago: not asked again
            return done

        return [generation_name(self.base, n) for n in live_generations(numbers, consumed)]

    def _consumed(self, topic: str, partitions: list[int]) -> bool:
        """The group committed up to the log end of every partition of ``topic``. (Through
        the admin client: the consumer's own ``committed`` waits while the group rebalances.)"""
        committed = self._admin.committed(self.group_id, topic, partitions)
        ends = self._admin.log_ends(topic, partitions)
        return all(committed.get(p, -1) >= end for p, end in ends.items() if end > 0)

    def start_offsets(self, partitions: Sequence[Partition]) -> dict[Partition, int]:
        """Where the group consumer starts each of ``partitions``: the offset its group
        committed (stable: a transaction committing one is waited for), else the log start."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        offsets: dict[Partition, int] = {}
        for topic, numbers in by_topic.items():
            committed = self._admin.committed(self.group_id, topic, numbers, stable=True)
            missing = [p for p in numbers if p not in committed]
            starts = self._admin.log_starts(topic, missing)
            offsets.update({(topic, p): committed.get(p, starts.get(p, 0)) for p in numbers})
        return offsets

    def hold(self, partitions: Sequence[Partition]) -> None:
        """Before fetching them: mark ``partitions`` HELD (the roller keeps their topics)."""
        self._mark(partitions, HELD)

    def release(self, partitions: Sequence[Partition]) -> None:
        """After unassigning them: mark ``partitions`` RELEASED."""
        self._mark(partitions, RELEASED)

    def _mark(self, partitions: Sequence[Partition], value: int) -> None:
        by_topic: dict[str, dict[int, int]] = {}
        for topic, partition in partitions:
            if generations_of(self.base, [topic]):
                by_topic.setdefault(topic, {})[partition] = value
        for topic, offsets in by_topic.items():
            self._admin.commit(marker_group(self.group_id), topic, offsets)

    def stop(self) -> None:
        self._stopping.set()
