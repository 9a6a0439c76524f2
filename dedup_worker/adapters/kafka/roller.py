"""The roller of topic generations: creates the next one, deletes those nobody fetches any more.

One roller per stack (``neardup stack``, ``neardup crawl``); see ``generations.py`` for the
scheme and for why deletion is ordered on what the clients did: a generation is deleted only
when (all checked in the same look, right before the delete request):

- it is older than the current generation and the spare (``DELETE_AFTER``);
- its log ends did not move since the previous look (no producer still writes to it);
- no fetch marker on it is :data:`HELD`: every group consumer member and every reader marks
  a partition HELD before it fetches it and RELEASED after it unassigned it;
- every group with committed offsets on it committed up to its log end (a read_committed
  consumer cannot pass an open transaction, so none is open on it), and marks its fetches;
  a group that does not (a consumer outside neardup) keeps the generation: it could be
  fetching it.

The pages of a generation must also have been consumed by some group (an empty one may go).
And all of that must have held for ``grace_s`` (:data:`RELEASE_GRACE_S`) in every look: a
fetch request sent just before a client let go is still answered after it, and librdkafka
stops a partition's fetcher asynchronously, after ``incremental_unassign`` returned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dedup_worker.adapters.kafka.generations import (
    DELETE_AFTER,
    HELD,
    MARKER_SUFFIX,
    current_generation,
    generation_name,
    generations_of,
)
from dedup_worker.errors import NeardupError

logger = logging.getLogger(__name__)

#: How long an old generation must have been deletable, look after look, before it is
#: deleted (module doc): many times a fetch wait and a request's round trip.
RELEASE_GRACE_S = 5.0

#: The stack's shortest time between two rolls of a full generation (a missing spare is still
#: made at once). A roll adds partitions to every group and reader, a rebalance each: in
#: 3-minute soaks at 1,000 pages/s, rolling every ~2 s (500 records a partition) held pages for
#: seconds (p99 4.4-7.0 s), every 4 or 8 s did not. At a higher rate a generation then holds
#: more records, but not more batches than 8 s of produce requests make. README, "The embedded
#: stack's limits".
MIN_ROLL_INTERVAL_S = 8.0


@dataclass
class RollStep:
    """What one :meth:`GenerationRoller.step` did."""

    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: Old generations kept this look, with the reason (for logs and tests).
    kept: dict[str, str] = field(default_factory=dict)


class GroupOffsets(Protocol):
    """The admin calls the roller needs (``TopicAdmin``)."""

    def names(self, timeout: float = ...) -> set[str]: ...
    def partitions(self, topic: str, timeout: float = ...) -> list[int]: ...
    def create(
        self, topics: Sequence[str], partitions: int, replication: int = ...
    ) -> list[str]: ...
    def delete(self, topics: Sequence[str]) -> None: ...
    def log_ends(self, topic: str, partitions: Sequence[int]) -> dict[int, int]: ...
    def group_ids(self) -> list[str]: ...
    def committed(self, group: str, topic: str, partitions: Sequence[int]) -> dict[int, int]: ...


class GenerationRoller:
    """Rolls the ``bases`` (the pages first) and deletes what nobody fetches (module doc)."""

    def __init__(
        self,
        admin: GroupOffsets,
        bases: Sequence[str],
        *,
        roll_records: int,
        partitions: int,
        replication: int = 1,
        delete: bool = True,
        grace_s: float = RELEASE_GRACE_S,
        min_roll_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not bases:
            raise ValueError("a roller needs at least one rolling topic")
        self.admin = admin
        self.bases = list(bases)
        self.roll_records = roll_records
        self.partitions = partitions
        self.replication = replication
        self.delete = delete
        self.grace_s = grace_s
        self.min_roll_s = min_roll_s
        self._clock = clock
        #: When this roller last rolled (monotonic), None before its first roll.
        self._rolled_at: float | None = None
        self._seen_ends: dict[str, dict[int, int]] = {}
        #: Since when each old generation has been deletable in every look.
        self._clear_since: dict[str, float] = {}

    def step(self) -> RollStep:
        """One look: roll if the current generation is full (and the last roll is
        ``min_roll_s`` old) or there is no spare, then delete the old generations nobody
        fetches."""
        done = RollStep()
        names = self.admin.names()
        newest = max((g for b in self.bases for g in generations_of(b, names)), default=-1)
        current = current_generation(generations_of(self.bases[0], names))
        if (
            current is None
            or current == newest  # no spare yet
            or (
                self._may_roll_full()
                and any(self._full(generation_name(b, current)) for b in self.bases)
            )
        ):
            newest += 1
        done.created = self.roll_to(newest)  # also completes a roll a failure cut short
        if done.created:
            self._rolled_at = self._clock()
        old = [
            (base, generation_name(base, n))
            for base in self.bases
            for n in generations_of(base, names)
            if n <= newest - DELETE_AFTER
        ]
        if not old:
            return done
        groups = self.admin.group_ids()
        for base, topic in old:
            why = self._why_kept(topic, base, groups)
            if why:
                self._clear_since.pop(topic, None)  # the grace starts again from the next look
            else:
                why = self._in_grace(topic)
            if why:
                done.kept[topic] = why
                logger.debug("keeping %s: %s", topic, why)
            elif self.delete:
                self.admin.delete([topic])  # one at a time: each right after its own check
                self._seen_ends.pop(topic, None)
                self._clear_since.pop(topic, None)
                done.deleted.append(topic)
        if done.deleted:
            logger.info("deleted topic generations nobody fetches: %s", done.deleted)
        return done

    def _in_grace(self, topic: str) -> str:
        """Why ``topic``, deletable in this look, waits ("" once it was for ``grace_s``)."""
        now = self._clock()
        since = self._clear_since.setdefault(topic, now)
        if now - since < self.grace_s:
            return f"deletable for {now - since:.1f} s only"
        return ""

    def roll_to(self, number: int) -> list[str]:
        """Create generation ``number`` of every rolling topic (the ones missing)."""
        topics = [generation_name(base, number) for base in self.bases]
        created = self.admin.create(topics, self.partitions, self.replication)
        if created:
            logger.info("rolled to topic generation %d: %s", number, created)
        return created

    def _may_roll_full(self) -> bool:
        rolled = self._rolled_at
        return rolled is None or self._clock() - rolled >= self.min_roll_s

    def _full(self, topic: str) -> bool:
        """True once a partition of ``topic`` holds ``roll_records`` offsets (the broker's
        work per fetch grows with the batches of the partition fetched)."""
        partitions = self.admin.partitions(topic)
        return max(self.admin.log_ends(topic, partitions).values(), default=0) >= self.roll_records

    def _why_kept(self, topic: str, base: str, groups: list[str]) -> str:
        """Why ``topic`` may not be deleted now ("" if it may)."""
        partitions = self.admin.partitions(topic)
        if not partitions:
            return "no partitions listed"
        ends = self.admin.log_ends(topic, partitions)
        previous, self._seen_ends[topic] = self._seen_ends.get(topic), ends
        if previous != ends:
            return "its end moved since the last look"
        for group in groups:  # first the markers: a member may hold a partition it never read
            if group.endswith(MARKER_SUFFIX):
                markers = self.admin.committed(group, topic, partitions)
                if any(value == HELD for value in markers.values()):
                    return f"a member of group {group.removesuffix(MARKER_SUFFIX)} holds it"
        consumed = False
        for group in groups:
            if group.endswith(MARKER_SUFFIX):
                continue
            committed = self.admin.committed(group, topic, partitions)
            if not committed:
                continue
            if any(committed.get(p, -1) < end for p, end in ends.items() if end > 0):
                return f"group {group} has not consumed it"
            consumed = True
            if group + MARKER_SUFFIX not in groups:
                return f"group {group} does not mark its fetches"
        if not consumed and any(ends.values()) and base == self.bases[0]:
            return "no consumer group consumed its pages"
        return ""


class RollerThread(threading.Thread):
    """Runs :meth:`GenerationRoller.step` every ``interval_s`` until :meth:`stop`; a broker
    that cannot be reached is waited out (logged)."""

    def __init__(self, roller: GenerationRoller, interval_s: float = 2.0) -> None:
        super().__init__(name="topic-generations", daemon=True)
        self.roller = roller
        self.interval_s = interval_s
        self._stopping = threading.Event()
        self.steps = 0
        self.deleted: list[str] = []

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.deleted += self.roller.step().deleted
            except NeardupError as exc:
                logger.warning("topic generations: %s", exc)
            self.steps += 1
            self._stopping.wait(self.interval_s)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout)
