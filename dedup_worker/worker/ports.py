"""What the worker loop (``service.Worker``) needs from its engine, consumer and producer.

The deployed worker gets ``core.engine.DedupEngine``, ``adapters.kafka.PageConsumer`` and
``identified_producer.IdentifiedProducer`` (built in ``main``); the loop sees only these
Protocols, so its commit order can also be checked against an in-process stand-in
(``tests/unit/dedup_worker/worker/test_commit_order.py``) besides the real broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from dedup_worker.adapters.kafka import GroupMetadata, Offsets, Partition, Record
from dedup_worker.contract.messages import Decision, Page
from dedup_worker.core.engine import Prepared


class Engine(Protocol):
    """Decides pages (``DedupEngine``); ``decide`` writes the shared state, replay-safe."""

    def process(self, pages: Sequence[Page]) -> list[Decision]: ...
    def prepare(self, pages: Sequence[Page]) -> Prepared: ...
    def decide(self, prepared: Prepared) -> list[Decision]: ...


class PageSource(Protocol):
    """The consumer of the pages topic, a member of the workers' group (``PageConsumer``).

    Its methods raise ``BackendUnavailable`` when the broker cannot be reached, and
    ``OwnershipLost`` when a commit is refused because a rebalance moved the partitions.
    """

    @property
    def rebalances(self) -> int:
        """Rebalance callbacks run so far (they run inside a poll)."""
        ...

    def revoked_since(self, rebalances: int, partitions: Iterable[Partition]) -> bool:
        """True if a rebalance callback after the first ``rebalances`` revoked one of
        ``partitions`` (an eager rebalance revokes every partition, a cooperative one only
        those that move)."""
        ...

    def poll_batch(self, max_records: int, max_wait_ms: int, linger_ms: int = 0) -> list[Record]:
        """Up to ``max_records`` records: waits up to ``max_wait_ms`` for the first, then, until
        ``linger_ms`` after the call, for the batch to fill (0: the records already fetched)."""
        ...

    def rewind(self, records: Sequence[Record]) -> None:
        """Seek each still-assigned partition back to the records' first offset in it."""
        ...

    def commit(self, offsets: Offsets) -> None:
        """Commit offsets synchronously (only when transactions are off)."""
        ...

    def group_metadata(self) -> GroupMetadata: ...
    def lag(self) -> dict[Partition, int]: ...
    def close(self) -> None: ...


class Publisher(Protocol):
    """The decisions producer (``IdentifiedProducer``): transactional when ``transactional``,
    else idempotent with ``flush`` acknowledging every record sent."""

    @property
    def transactional(self) -> bool: ...

    def begin(self) -> None: ...
    def send(self, topic: str, key: bytes | None, value: bytes) -> None: ...
    def commit(self, offsets: Offsets, group_metadata: GroupMetadata) -> None:
        """Commit the open transaction together with the consumer's offsets."""
        ...

    def flush(self) -> None: ...
    def abort(self) -> None:
        """Abort the open transaction, if any (a no-op otherwise)."""
        ...

    def close(self) -> None: ...
