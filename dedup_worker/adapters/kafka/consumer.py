"""The worker's pages consumer: a group member with manual commits, read_committed, batch polls.

Why librdkafka (confluent-kafka): kafka-python builds and parses every record in pure Python,
about 100 us of the worker's one core per page; librdkafka does it in C on its own threads,
which is what lets one worker process reach its 10k pages/s target (see the README).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from dedup_worker.adapters.kafka.errors import kafka_errors, translate_error
from dedup_worker.adapters.kafka.group_generations import (
    ROLLING_GROUP_TIMEOUTS,
    GroupGenerations,
)
from dedup_worker.adapters.kafka.records import (
    Offsets,
    Partition,
    Record,
    first_offsets,
    record_of,
    topic_partitions,
)
from dedup_worker.adapters.kafka.settings import GROUP_TIMEOUTS, KafkaSettings

logger = logging.getLogger(__name__)

#: How long ``close`` keeps polling to finish a rebalance it is part of before leaving.
LEAVE_AFTER_REBALANCE_S = 10.0

#: How long a member of a rolling topic's group polls before it leaves, once its turn came:
#: the member that left before it needs ~0.5 s (a heartbeat) to be noticed and ~1.5 s to be
#: rebalanced away; leaving within that wedges a Tansu 0.6.0 group (``redis_leave_turn``).
ROLLING_SETTLE_S = 3.0

#: The longer group heartbeat of the two sets of timeouts (a member learns of a rebalance
#: from a heartbeat's answer).
HEARTBEAT_INTERVAL_MS = max(
    GROUP_TIMEOUTS["heartbeat.interval.ms"], ROLLING_GROUP_TIMEOUTS["heartbeat.interval.ms"]
)

#: A rebalance callback: ("assigned" or "revoked", the partitions).
RebalanceListener = Callable[[str, list[Partition]], None]
#: ``with turn(poll): leave``: one member of the group leaves at a time (``redis_leave_turn``);
#: ``poll`` is called while waiting, so this member keeps taking part in rebalances.
LeaveTurn = Callable[[Callable[[], None]], AbstractContextManager[None]]


class GroupMetadata:
    """The consumer's group metadata (opaque): a transaction commits offsets with it."""

    def __init__(self, handle: object) -> None:
        self.handle = handle


class PageConsumer:
    """The group consumer of the pages topic: manual commits, read_committed, batch polls."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        group_id: str,
        *,
        fetch_wait_ms: int,
        max_message_bytes: int,
        on_rebalance: RebalanceListener | None = None,
        leave_turn: LeaveTurn | None = None,
    ) -> None:
        self.topic = topic
        self._leave_turn = leave_turn
        self._on_rebalance = on_rebalance or _log_change
        #: Rebalance callbacks run so far (they run inside a poll): lets the worker notice that
        #: a batch's partitions may have moved between its poll and its commit.
        self.rebalances = 0
        #: The value of ``rebalances`` at each partition's last revocation.
        self._revoked_at: dict[Partition, int] = {}
        # Revoked (or new), and the rebalance's assignment not yet in. A member stopped while
        # the group first forms leaves it forming too: Tansu then never assigns anyone again
        # (``_finish_rebalance``), as two crawls in a row showed when the first was stopped
        # 1.6 s after its workers started. Only where the turn is taken (Tansu's bug): on a
        # Kafka cluster a stop must not wait for it.
        self._awaiting_assignment = leave_turn is not None
        self._closing = False  # close() runs: the revoke callback runs inside it
        fetch_max = max(52_428_800, max_message_bytes)
        #: A rolling topic (``generations.py``): the subscription follows its live generations,
        #: and cooperative rebalances add or drop one without revoking the others.
        self._generations = (
            GroupGenerations(settings, topic, group_id) if topic in settings.rolling else None
        )
        rolling = {"partition.assignment.strategy": "cooperative-sticky", **ROLLING_GROUP_TIMEOUTS}
        self._subscribed = [topic] if self._generations is None else self._generations.wanted()
        self._consumer = Consumer(
            settings.client_config(
                {
                    "group.id": group_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": "read_committed",
                    "auto.offset.reset": "earliest",
                    "max.partition.fetch.bytes": 8 * 1024 * 1024,
                    "fetch.max.bytes": fetch_max,
                    "receive.message.max.bytes": min(2_147_483_647, fetch_max + (1 << 20)),
                    # Kafka answers a waiting fetch as soon as pages arrive; Tansu only when the
                    # wait is over, so this bounds what an idle fetch adds to a page's latency.
                    "fetch.wait.max.ms": fetch_wait_ms,
                    **GROUP_TIMEOUTS,
                    **(rolling if self._generations is not None else {}),
                }
            )
        )
        self._subscribe()

    def _subscribe(self) -> None:
        with kafka_errors("subscribing to pages"):
            self._consumer.subscribe(
                list(self._subscribed), on_assign=self._assigned, on_revoke=self._revoked
            )

    def _follow_generations(self) -> None:
        """Rolling topic: subscribe to the live generations if the last look changed them."""
        if self._generations is None:
            return
        wanted = self._generations.wanted()
        if wanted != self._subscribed:
            logger.info("following generations %s (was %s)", wanted, self._subscribed)
            self._subscribed = wanted
            self._subscribe()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self._awaiting_assignment = False
        if self._generations is not None:
            assigned = [(tp.topic, tp.partition) for tp in partitions]
            with kafka_errors("assigning generations"):
                self._generations.hold(assigned)  # before any fetch: the roller keeps them
                # At absolute offsets, never a "beginning" lookup (group_generations.py).
                offsets = self._generations.start_offsets(assigned)
                consumer.incremental_assign(
                    [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
                )
        self._on_rebalance("assigned", sorted((p.topic, p.partition) for p in partitions))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self._awaiting_assignment = True
        if self._generations is not None:
            # Stop fetching first (the wrapper would unassign after this callback), then
            # release: the roller may delete a generation once every partition is released.
            with kafka_errors("unassigning revoked generations"):
                unassign_revoked(consumer, partitions, closing=self._closing)
            self._generations.release([(tp.topic, tp.partition) for tp in partitions])
        for tp in partitions:
            self._revoked_at[(tp.topic, tp.partition)] = self.rebalances
        self._on_rebalance("revoked", sorted((p.topic, p.partition) for p in partitions))

    def revoked_since(self, rebalances: int, partitions: Iterable[Partition]) -> bool:
        """True if a rebalance callback after the first ``rebalances`` revoked one of
        ``partitions`` (a batch's partitions: its records may go to their next owner)."""
        return any(self._revoked_at.get(tp, 0) > rebalances for tp in partitions)

    def poll_batch(self, max_records: int, max_wait_ms: int, linger_ms: int = 0) -> list[Record]:
        """Up to ``max_records`` records; when none are fetched, waits up to ``max_wait_ms`` for
        the first one. Until ``linger_ms`` after the call, it then waits for the batch to fill
        (0: it takes the records already fetched). Records keep their per-partition order.

        Taking what is there instead of waiting to fill the batch ("smart batching") lets the
        batch size follow the load: pages that arrive while a batch is being decided make up
        the next one. The worker asks for a linger only to keep its batches at most
        ``batch_interval_ms`` apart (``Worker._linger_ms``).
        """
        called = time.monotonic()
        self._follow_generations()
        with kafka_errors("polling pages"):
            first = self._consumer.poll(max_wait_ms / 1000)
            if first is None:
                return []
            more = max_records - 1
            linger_s = max(0.0, called + linger_ms / 1000 - time.monotonic())
            rest = self._consumer.consume(more, linger_s) if more > 0 else []
            messages = [first, *rest]
        records = [record_of(m) for m in messages if not self._failed(m)]
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

    def group_metadata(self) -> GroupMetadata:
        with kafka_errors("reading the group metadata"):
            return GroupMetadata(self._consumer.consumer_group_metadata())

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
        """Leave the group (its partitions move at once) without committing anything more.

        With a leave turn (workers sharing Redis), one member leaves at a time, after the one
        before it is gone (see ``redis_leave_turn`` for the Tansu bug this avoids). A rolling
        topic's member first polls ``ROLLING_SETTLE_S``: its cooperative rebalances revoke
        nothing when a peer leaves, so ``_finish_rebalance`` alone cannot tell that one is under
        way; another sees the rebalance revoke its partitions and waits for the new ones."""
        if self._leave_turn is None:
            self._leave()
            return
        with self._leave_turn(self._poll_while_waiting):
            if self._generations is None:
                self._leave()
            else:
                self._leave(ROLLING_SETTLE_S)

    def _poll_while_waiting(self) -> None:
        """A poll whose records are dropped (not committed: the next owner reads them)."""
        self._consumer.poll(0.1)

    def _leave(self, settle_s: float = 2 * HEARTBEAT_INTERVAL_MS / 1000) -> None:
        self._finish_rebalance(settle_s)
        self._closing = True
        with kafka_errors("closing the pages consumer"):
            self._consumer.close()  # the revoke callback releases what it held
        if self._generations is not None:
            self._generations.stop()

    def _finish_rebalance(self, settle_s: float) -> None:
        """Before leaving, see a rebalance this member is part of through (bounded).

        Tansu (the embedded broker, 0.6.0) loses a group for good when its leader leaves while
        the group is forming: the members left, and any that join later, wait forever for the
        departed leader's assignment (its ``Inner<Forming>::leave`` keeps ``state.leader``;
        an eviction after a missed heartbeat clears it). A worker stopping while another one
        joined, e.g. a fenced one or a rolling restart, did exactly that: the survivor never got
        a partition. So a member first polls for two heartbeats (it learns of a rebalance from
        a heartbeat's answer) and, once revoked, until its new assignment. Records polled here
        are not processed and their offsets are not committed: the next owner reads them again.
        """
        noticed_by = time.monotonic() + settle_s
        deadline = time.monotonic() + LEAVE_AFTER_REBALANCE_S
        if self.rebalances == 0 and not self._consumer.memberid():
            # Never joined (the broker out of reach, the topic missing): it sends no leave,
            # so it cannot wedge the group, and waiting would only delay the stop.
            self._awaiting_assignment = False
        with kafka_errors("finishing a rebalance before leaving the group"):
            while time.monotonic() < (deadline if self._awaiting_assignment else noticed_by):
                self._consumer.poll(0.1)
        if self._awaiting_assignment:
            logger.warning(
                "leaving the group in the middle of a rebalance (no assignment within %.0f s)",
                LEAVE_AFTER_REBALANCE_S,
            )


class Seekable(Protocol):
    """The part of a librdkafka consumer :func:`unassign_revoked` uses."""

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None: ...

    def assignment(self) -> list[TopicPartition]: ...

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...

    def seek(self, partition: TopicPartition) -> None: ...


def unassign_revoked(
    consumer: Seekable, partitions: list[TopicPartition], *, closing: bool
) -> None:
    """A rolling topic's revoke callback: stop fetching ``partitions`` now (the wrapper would
    unassign only after the callback), and wake the fetchers of the kept ones.

    In ``close()`` the callback runs while librdkafka destroys the handle: a call may then fail
    with ``_DESTROY`` ("Broker handle destroyed for termination"), which made a worker stopped
    by SIGTERM exit 1 now and then. Closing, there is nothing to wake, and a destroyed handle
    has unassigned everything anyway, so that error is expected there and ignored.
    """
    try:
        consumer.incremental_unassign(partitions)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if not (closing and isinstance(error, KafkaError) and error.code() == KafkaError._DESTROY):
            raise
    if not closing:
        wake_fetchers(consumer)


def wake_fetchers(consumer: Seekable) -> None:
    """After a revoke callback unassigned some partitions: make the kept ones fetch again now.

    librdkafka pauses every assigned partition while a rebalance callback is pending and
    resumes the kept ones when the callback unassigns, but the resume does not wake the thread
    that fetches from their leader: with nothing else to fetch it sleeps out its 1 s I/O wait
    first (confluent-kafka-go#630 shows the same on a plain resume). Every roll of the topic
    generations drops one, so every roll stalled the worker for ~1 s (measured at 1,000 pages/s:
    no batch between the revoke and the fetch thread's next wake, and p99 of the soak's windows
    was that stall). A seek of a kept partition to its own position changes its fetch state,
    which wakes that thread; it is queued behind the resume, so it runs after it. A partition
    with no position yet (nothing consumed) is left alone: one seek per leader is enough. The
    seek carries no leader epoch, so librdkafka does not validate it with the broker.
    """
    kept = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
    for tp in kept:
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset))


def _log_change(change: str, partitions: list[Partition]) -> None:
    logger.info("partitions %s: %s", change, [f"{t}[{p}]" for t, p in partitions])
