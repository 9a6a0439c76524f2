"""The decisions producer under this worker's identity (the worker loop's ``Publisher``).

``IdentifiedProducer`` wraps a ``DecisionProducer`` built for the identity's transactional id
and enforces the identity's one rule: no transaction begins or commits under an id the worker
may no longer hold. When a leased slot is *lapsing* (not renewed lately: Redis unreachable, or
this process was paused) it raises ``BackendUnavailable``, so the loop rewinds the batch and
retries after a backoff, by when the lease is renewed again; when the slot was *lost* (taken
over after it lapsed) it opens a producer under a newly leased slot before the next
transaction. A fenced commit after the slot was taken over is the same case seen from the
broker: the batch is redone, not a fatal error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from dedup_worker.adapters.kafka import DecisionProducer, GroupMetadata, Offsets
from dedup_worker.core.slots import LeaseStatus
from dedup_worker.errors import BackendUnavailable, ProducerFenced
from dedup_worker.worker.identity import Identity

logger = logging.getLogger(__name__)


class IdentifiedProducer:
    """A ``ports.Publisher`` that produces only while its identity is held (see the module
    doc)."""

    def __init__(self, identity: Identity, connect: Callable[[str], DecisionProducer]) -> None:
        self._identity = identity
        self._connect = connect
        self._producer: DecisionProducer | None = connect(identity.transactional_id)
        self.transactional = self._producer.transactional
        # No transaction of ours may be open under the id (so the slot can be freed at close).
        self._clean = True
        self._closed = False
        if not self.transactional:  # the broker has no transactions: the id names nothing
            self._close_identity()

    @property
    def transactional_id(self) -> str:
        return self._identity.transactional_id

    def _current(self) -> DecisionProducer:
        if self._producer is None:
            raise BackendUnavailable("no producer: its worker slot was lost (re-acquiring)")
        return self._producer

    def warm_up(self, topics: Sequence[str]) -> None:
        self._current().warm_up(topics)

    def begin(self) -> None:
        if self.transactional:
            self._ensure_identity()
            self._clean = False
        self._current().begin()

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._current().send(topic, key, value)

    def commit(self, offsets: Offsets, group_metadata: GroupMetadata) -> None:
        status = self._identity.status()
        if status is not LeaseStatus.HELD:
            status = self._identity.refresh()
        if status is not LeaseStatus.HELD:
            raise BackendUnavailable(
                f"not committing under {self.transactional_id}: {self._identity.lapse_detail()}"
            )
        try:
            self._current().commit(offsets, group_metadata)
        except ProducerFenced as exc:
            if self._identity.refresh() is LeaseStatus.HELD:
                raise  # our slot, yet someone else initialised its id: not ours to paper over
            raise BackendUnavailable(
                f"{self.transactional_id} was fenced after this worker's slot was taken over; "
                "the batch is redone under a new slot"
            ) from exc
        self._clean = True

    def flush(self) -> None:
        self._current().flush()

    def abort(self) -> None:
        if self._producer is not None:
            self._producer.abort()

    def close(self) -> None:
        try:
            if self._producer is not None:
                self._producer.close()
        finally:
            self._close_identity()

    def _close_identity(self) -> None:
        if not self._closed:
            self._closed = True
            self._identity.close(clean=self._clean)

    def _ensure_identity(self) -> None:
        """Begin only under a held id: wait out a lapsing lease, replace a lost one."""
        status = self._identity.status()
        if status is LeaseStatus.LAPSING:  # the renew thread may not have run: ask the store now
            status = self._identity.refresh()
        if status is LeaseStatus.HELD and self._producer is not None:
            return
        if status is LeaseStatus.LAPSING:
            raise BackendUnavailable(
                f"not producing under {self.transactional_id}: {self._identity.lapse_detail()}"
            )
        if self._producer is not None:
            old, self._producer = self._producer, None
            logger.warning("closing the producer of %s: its slot was lost", old.transactional_id)
            old.close()
        if status is LeaseStatus.LOST:
            self._identity.reacquire()
        # Opening the producer fences the slot's previous holder, if it had lapsed.
        self._producer = self._connect(self._identity.transactional_id)
        self._clean = True
        logger.info("producing under %s from now on", self._identity.transactional_id)
