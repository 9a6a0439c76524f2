"""Rolling topic generations: bounded work per fetch on a broker that never drops old records.

Why: the embedded broker (Tansu, memory storage) lists every batch a partition holds on each
fetch, never enforces retention and cannot delete records, so a topic that only grows makes
every fetch slower (and, past a point, makes a short fetch wait deliver nothing at all); only
deleting a topic frees anything. So, when ``KafkaSettings.rolling`` names a topic (the
embedded stack does it, ``NEARDUP_TOPIC_GENERATIONS=on`` opts in), that topic lives as
generations ``<topic>.g0``, ``<topic>.g1``, ... and the bare name is never used. The default
(nothing rolling) keeps the topic names exactly as they are for Apache Kafka.

Every process decides from the broker's state alone, so they agree without talking:

- the newest generation is a *spare*: created ahead, empty, so that every consumer has it
  assigned before it is written to (a group rebalance takes seconds on Tansu); producers
  write to the *current* one, the second newest (:func:`current_generation`), re-read from
  the metadata every ``REFRESH_S`` (:class:`Router`); a transaction uses the one it began with;
- a group consumer subscribes to the *live* generations: the current one and the spare, and
  any older one its group has not consumed to the end (:func:`live_generations`); a record
  that lands late in an older generation makes it live again, so nothing there is stranded;
- a reader (no group) reads every new generation from its start and lets an older one go
  once it read it to the log end (an open transaction keeps it) and producers had time to
  leave it (``LET_GO_AFTER_S``), and takes it back if the end
  moves later (a producer that had not re-read the metadata yet; ``reader_generations.py``);
- the roller (``roller.py``, one per stack) rolls once a partition of the current generation
  holds ``roll_records`` offsets, and deletes an old generation only once no client can be
  fetching it. That order matters: librdkafka crashes (SIGSEGV, librdkafka issue #5093) on
  the answer Tansu 0.6.0 gives to a Fetch of a deleted topic (``current_leader`` 0/0 and a
  zero topic id), so deletion follows what clients *did*:

  * every client commits a *fetch marker* for each partition of a generation it fetches:
    :data:`HELD` before it fetches, :data:`RELEASED` after it unassigned it (group consumers
    under ``<group>.fetching``, in their rebalance callbacks: the group protocol orders one
    member's revoke before the next member's assign; readers under their own group id's
    marker group, around their assign and unassign, and on close). Tansu's DescribeGroups
    lists no assignments, so nobody could tell who holds what; the markers do;
  * clients place those partitions at absolute offsets only (a "beginning" lookup whose
    partition is unassigned meanwhile restarts and fetches it again: ``group_generations.py``);
  * the roller deletes only after every condition held for a grace (a fetch sent just before
    a release is still answered after it: ``roller.py``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from dedup_worker.adapters.kafka.errors import kafka_errors
from dedup_worker.adapters.kafka.settings import REQUEST_TIMEOUT_S, KafkaSettings
from dedup_worker.errors import NeardupError

logger = logging.getLogger(__name__)

#: How often a producer re-reads which generation is current.
REFRESH_S = 1.0
#: How often a consumer or reader re-reads which generations exist and how far they were
#: consumed (each look costs the broker a few requests; nothing waits on it, thanks to the
#: spare).
FOLLOW_S = 3.0
#: A generation consumed (or read out) this many behind the newest is not looked at again:
#: producers left it rolls ago (generations are kept when deletion is off, and looking at
#: each of them every few seconds would cost more and more).
SETTLED_AFTER = 3
#: A generation this many behind the newest (the spare) may be deleted, once nobody fetches it.
DELETE_AFTER = 2
#: The fetch markers of a consumer group live under this group id suffix.
MARKER_SUFFIX = ".fetching"
#: Fetch marker values (committed "offsets" of the marker group).
HELD = 1
RELEASED = 2
#: Readers' group ids start so (one group each; they never join, only commit fetch markers).
READER_PREFIX = "neardup-reader-"
_SUFFIX = ".g"


def generation_name(base: str, number: int) -> str:
    """``pages`` generation 3 is ``pages.g3``."""
    return f"{base}{_SUFFIX}{number}"


def generation_number(base: str, topic: str) -> int | None:
    """The generation ``topic`` is of rolling topic ``base``, or None."""
    match = re.fullmatch(re.escape(base + _SUFFIX) + r"(0|[1-9][0-9]{0,8})", topic)
    return int(match.group(1)) if match else None


def generations_of(base: str, topics: Iterable[str]) -> list[int]:
    """The generations of ``base`` among ``topics``, oldest first."""
    found = (generation_number(base, topic) for topic in topics)
    return sorted(number for number in found if number is not None)


def current_generation(numbers: list[int]) -> int | None:
    """The generation producers write to, of the sorted ``numbers`` that exist: the second
    newest (the newest is the spare), or the only one."""
    if not numbers:
        return None
    return numbers[-2] if len(numbers) > 1 else numbers[-1]


def live_generations(numbers: list[int], consumed: Callable[[int], bool]) -> list[int]:
    """What a group consumer subscribes to: the current generation and the spare, and every
    older one not ``consumed`` to its end yet."""
    return [n for n in numbers[:-2] if not consumed(n)] + numbers[-2:]


#: A new spare is subscribed to at most this many looks late while an older generation is
#: about to be dropped (:func:`merge_changes`).
MERGE_LOOKS = 2


def merge_changes(subscribed: list[str], wanted: list[str], held: int) -> tuple[list[str], int]:
    """What a group consumer subscribes to after a look that found ``wanted`` (it follows
    ``subscribed``, and held a new spare back ``held`` looks so far), and the new count.

    Every change of subscription is a rebalance (seconds on Tansu), and a roll makes two: a new
    spare appears, and a look or two later the generation producers just left is consumed and
    dropped. So a new spare waits while an older generation is about to go, up to
    :data:`MERGE_LOOKS` looks, and both go in one rebalance: the spare is written to only at
    the next roll."""
    adds = any(topic not in subscribed for topic in wanted)
    drops_soon = len(wanted) > 2  # an older generation not consumed to its end yet
    if adds and drops_soon and held < MERGE_LOOKS:
        return list(subscribed), held + 1
    return list(wanted), 0


def looks_like_generation(name: str, bases: Iterable[str]) -> bool:
    """True if ``name`` would be taken for a generation of one of ``bases`` (config check)."""
    return any(generation_number(base, name) is not None for base in bases)


class MetadataClient(Protocol):
    """What every librdkafka client offers: the cluster's topics."""

    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...


def topic_partitions_of(
    client: MetadataClient, timeout: float = REQUEST_TIMEOUT_S
) -> dict[str, list[int]]:
    """Every topic the broker has, with its partition ids."""
    with kafka_errors("reading the topic generations"):
        topics = client.list_topics(timeout=timeout).topics
    return {
        name: sorted(meta.partitions)
        for name, meta in topics.items()
        if meta.error is None and meta.partitions
    }


class Router:
    """Which topic a producer writes for a name: the current generation of a rolling topic,
    the name itself otherwise. :meth:`topic` answers from the last :meth:`refresh` (I/O), done
    at most every ``REFRESH_S`` by :meth:`refresh_if_due` or on first use."""

    def __init__(self, settings: KafkaSettings, client: MetadataClient) -> None:
        self.rolling = settings.rolling
        self._client = client
        self._newest: dict[str, str] = {}
        self._warmed: set[str] = set()
        self._due = 0.0
        self._lock = threading.Lock()

    def topic(self, name: str) -> str:
        if name not in self.rolling:
            return name
        if name not in self._newest:
            self.refresh()
        return self._newest.get(name, generation_name(name, 0))

    def refresh_if_due(self) -> None:
        if self.rolling and time.monotonic() >= self._due:
            self.refresh()

    def refresh(self) -> None:
        """Re-read the current generations; a failure keeps the last answer (logged)."""
        self._due = time.monotonic() + REFRESH_S
        try:
            names = topic_partitions_of(self._client, timeout=5.0)
        except NeardupError as exc:
            logger.warning("topic generations not refreshed: %s", exc)
            return
        with self._lock:
            for base in self.rolling:
                numbers = generations_of(base, names)
                current = current_generation(numbers)
                if current is not None:
                    self._newest[base] = generation_name(base, current)
                    self._warm(generation_name(base, numbers[-1]))

    def _warm(self, spare: str) -> None:
        """Fetch the spare's metadata once, so the first record written to it after the next
        roll does not wait for a metadata round trip (seen as latency spikes at each roll)."""
        if spare in self._warmed:
            return
        try:
            with kafka_errors(f"reading the metadata of {spare}"):
                self._client.list_topics(spare, timeout=5.0)
        except NeardupError as exc:
            logger.debug("spare generation %s not warmed: %s", spare, exc)
            return
        self._warmed.add(spare)


def marker_group(group_id: str) -> str:
    """Where the group consumers of ``group_id`` commit their fetch markers."""
    return group_id + MARKER_SUFFIX


def committed_at_least(committed: Mapping[int, int], ends: Mapping[int, int]) -> bool:
    """True if every partition of ``ends`` has a committed offset at or past its end."""
    return all(committed.get(p, -1) >= end for p, end in ends.items())
