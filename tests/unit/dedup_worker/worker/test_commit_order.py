"""The worker loop's commit-order rules, against an in-process stand-in of the broker.

``Broker`` stands behind the loop's own Protocols (``worker.ports.PageSource`` and
``Publisher``): a partitioned pages topic, the group's committed offsets, a generation that a
rebalance bumps, and transactional output (records become visible only when their transaction
commits, together with the offsets). The engine is the real one on the in-memory backends.
The same rules are tested against the real broker in ``tests/integration/dedup_worker/worker``;
these pin them without one, including the interleavings a live broker makes hard to force.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import pytest

from dedup_worker.adapters.kafka import GroupMetadata, Offsets, Partition, Record, first_offsets
from dedup_worker.contract.messages import Decision, Page, decode_decision, decode_page
from dedup_worker.core.engine import Prepared
from dedup_worker.errors import BackendUnavailable, OwnershipLost
from dedup_worker.worker.config import WorkerConfig, load_config
from dedup_worker.worker.main import build_engine
from dedup_worker.worker.metrics import WorkerMetrics
from dedup_worker.worker.ports import Engine
from dedup_worker.worker.service import Worker

PAGES_TOPIC = "pages"
WORDS = [f"w{i}" for i in range(3000)]


def make_pages(count: int, partitions: int) -> dict[int, list[Record]]:
    """``count`` distinct pages spread over the partitions, as consumed records."""
    log: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    rng = random.Random(7)
    for i in range(count):
        host = f"h{i % 5}.example"
        page = Page(
            url=f"https://{host}/p{i}",
            host=host,
            fetched_at=1000.0 + i,
            text=" ".join(rng.choice(WORDS) for _ in range(120)),
        )
        part = log[i % partitions]
        part.append(Record(PAGES_TOPIC, i % partitions, len(part), host.encode(), page.to_json()))
    return log


# ---- the stand-in --------------------------------------------------------------------------


@dataclass
class Broker:
    """The pages topic, the group's committed offsets and the committed output, in process."""

    pages: dict[int, list[Record]]
    committed: dict[Partition, int] = field(default_factory=dict)
    published: list[tuple[str, bytes]] = field(default_factory=list)
    #: Every offsets commit, in order: (how, offsets).
    commits: list[tuple[str, Offsets]] = field(default_factory=list)
    generation: int = 0

    def commit_offsets(self, how: str, offsets: Offsets) -> None:
        """The rule under test: offsets move only past pages whose decisions are published."""
        decided = {d.url for d in self.decisions()}
        for (topic, partition), end in offsets.items():
            for record in self.pages[partition][:end]:
                page_url = _url_of(record)
                assert page_url in decided, (
                    f"offset {topic}[{partition}]@{end} committed "
                    f"before the decision of {page_url} was published"
                )
        self.committed.update(offsets)
        self.commits.append((how, dict(offsets)))

    def decisions(self) -> list[Decision]:
        return [decode_decision(value) for topic, value in self.published if topic == "decisions"]

    def end_offsets(self) -> dict[Partition, int]:
        return {(PAGES_TOPIC, p): len(records) for p, records in self.pages.items()}


def _url_of(record: Record) -> str:
    assert record.value is not None
    return decode_page(record.value).url


class StandInConsumer:
    """A ``PageSource``: polls in partition order from its positions, rewinds, and fails
    loudly if two threads use it at once (the loop promises they never do)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.assigned = {(PAGES_TOPIC, p) for p in broker.pages}
        self.positions = {tp: 0 for tp in self.assigned}
        self.rebalances = 0
        self.revoked_at: dict[Partition, int] = {}
        self.polls: list[list[tuple[int, int]]] = []  # (partition, offset) of each poll
        self.lingers: list[int] = []  # the linger_ms each poll was given
        #: Called at the start of poll number n (1-based), in the polling thread.
        self.on_poll: dict[int, Callable[[], None]] = {}
        self.closed = False
        self._busy = threading.Lock()

    def _enter(self) -> None:
        assert self._busy.acquire(blocking=False), "the consumer is used by two threads at once"

    def poll_batch(self, max_records: int, max_wait_ms: int, linger_ms: int = 0) -> list[Record]:
        self._enter()
        self.lingers.append(linger_ms)
        try:
            hook = self.on_poll.get(len(self.polls) + 1)
            if hook is not None:
                hook()
            batch: list[Record] = []
            for tp in sorted(self.assigned):
                records = self.broker.pages[tp[1]]
                while len(batch) < max_records and self.positions[tp] < len(records):
                    batch.append(records[self.positions[tp]])
                    self.positions[tp] += 1
            self.polls.append([(r.partition, r.offset) for r in batch])
            return batch
        finally:
            self._busy.release()

    def rebalance(self, keep: set[int]) -> None:
        """A rebalance inside a poll: only ``keep`` stay assigned, and each starts again from
        the committed offset (as a (re)assigned partition does); the generation moves on."""
        self.rebalances += 1
        self.broker.generation += 1
        for tp in self.assigned:  # eager: every partition is revoked, then assigned anew
            self.revoked_at[tp] = self.rebalances
        self.assigned = {(PAGES_TOPIC, p) for p in keep}
        self.positions = {tp: self.broker.committed.get(tp, 0) for tp in self.assigned}

    def cooperative_rebalance(self, revoke: set[int], add: set[int]) -> None:
        """A cooperative rebalance: only ``revoke`` move away, ``add`` are assigned from the
        committed offset, the other partitions keep their positions."""
        self.rebalances += 1
        self.broker.generation += 1
        for p in revoke:
            self.revoked_at[(PAGES_TOPIC, p)] = self.rebalances
            self.assigned.discard((PAGES_TOPIC, p))
        for p in add:
            self.assigned.add((PAGES_TOPIC, p))
            self.positions[(PAGES_TOPIC, p)] = self.broker.committed.get((PAGES_TOPIC, p), 0)

    def revoked_since(self, rebalances: int, partitions: Iterable[Partition]) -> bool:
        return any(self.revoked_at.get(tp, 0) > rebalances for tp in partitions)

    def rewind(self, records: Sequence[Record]) -> None:
        self._enter()
        try:
            for tp, offset in first_offsets(records).items():
                if tp in self.assigned:
                    self.positions[tp] = offset
        finally:
            self._busy.release()

    def commit(self, offsets: Offsets) -> None:
        self.broker.commit_offsets("consumer", offsets)

    def group_metadata(self) -> GroupMetadata:
        return GroupMetadata(self.broker.generation)

    def lag(self) -> dict[Partition, int]:
        return {
            tp: end - self.positions.get(tp, 0) for tp, end in self.broker.end_offsets().items()
        }

    def close(self) -> None:
        self.closed = True


class StandInProducer:
    """A ``Publisher``: one transaction at a time; records are published on commit (with the
    offsets, if the group generation still holds) or on flush when not transactional."""

    def __init__(self, broker: Broker, transactional: bool) -> None:
        self.broker = broker
        self.transactional = transactional
        self.staged: list[tuple[str, bytes]] = []
        self.in_transaction = False
        self.aborts = 0
        #: Raised by the next commit (then cleared), to inject a failure.
        self.fail_next_commit: Exception | None = None
        self.closed = False

    def begin(self) -> None:
        if self.transactional:
            assert not self.in_transaction, "a transaction began while another was open"
            self.in_transaction = True

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        assert self.in_transaction or not self.transactional, "sent outside a transaction"
        self.staged.append((topic, value))

    def commit(self, offsets: Offsets, group_metadata: GroupMetadata) -> None:
        assert self.transactional and self.in_transaction
        failure, self.fail_next_commit = self.fail_next_commit, None
        if failure is not None:
            raise failure
        if group_metadata.handle != self.broker.generation:
            raise OwnershipLost("the group's generation moved on: a rebalance ran")
        self.broker.published += self.staged
        self.staged, self.in_transaction = [], False
        self.broker.commit_offsets("transaction", offsets)

    def flush(self) -> None:
        assert not self.transactional
        self.broker.published += self.staged
        self.staged = []

    def abort(self) -> None:
        if self.in_transaction:
            self.aborts += 1
        self.staged, self.in_transaction = [], False

    def close(self) -> None:
        self.closed = True


class HookedEngine:
    """The real engine, with a hook run at the start of decide call number n (1-based)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.decides = 0
        self.on_decide: dict[int, Callable[[], None]] = {}

    def process(self, pages: Sequence[Page]) -> list[Decision]:
        return self.engine.process(pages)

    def prepare(self, pages: Sequence[Page]) -> Prepared:
        return self.engine.prepare(pages)

    def decide(self, prepared: Prepared) -> list[Decision]:
        self.decides += 1
        hook = self.on_decide.get(self.decides)
        if hook is not None:
            hook()
        return self.engine.decide(prepared)


@dataclass
class Rig:
    broker: Broker
    consumer: StandInConsumer
    producer: StandInProducer
    engine: HookedEngine
    worker: Worker

    def run_until_done(self, max_steps: int = 200) -> None:
        """Step the loop until every assigned partition is committed to its end."""
        for _ in range(max_steps):
            ends = self.broker.end_offsets()
            if all(self.broker.committed.get(tp) == ends[tp] for tp in self.consumer.assigned):
                return
            self.worker.step()
        raise AssertionError(f"not done after {max_steps} batches: {self.broker.committed}")

    def decided_once(self) -> Counter[str]:
        return Counter(d.url for d in self.broker.decisions() if not d.corrects)


def rig(
    pages: int = 22,
    partitions: int = 3,
    batch: int = 4,
    transactional: bool = True,
    interval_ms: int = 0,
) -> Rig:
    env = {
        "NEARDUP_REDIS_URL": "memory",
        "NEARDUP_BATCH_MAX_RECORDS": str(batch),
        "NEARDUP_BATCH_INTERVAL_MS": str(interval_ms),
        "NEARDUP_BACKOFF_MAX_MS": "10",
        "NEARDUP_TRANSACTIONAL": "on" if transactional else "off",
    }
    config: WorkerConfig = load_config([], env)
    metrics = WorkerMetrics()
    broker = Broker(make_pages(pages, partitions))
    consumer = StandInConsumer(broker)
    producer = StandInProducer(broker, transactional)
    engine = HookedEngine(build_engine(config, metrics))
    worker = Worker(config, engine, consumer, producer, metrics)
    return Rig(broker, consumer, producer, engine, worker)


def all_urls(broker: Broker, partitions: set[int] | None = None) -> set[str]:
    return {
        _url_of(r)
        for p, records in broker.pages.items()
        if partitions is None or p in partitions
        for r in records
    }


# ---- the rules -----------------------------------------------------------------------------


@pytest.mark.parametrize("transactional", [True, False])
def test_offsets_are_committed_only_after_their_decisions_are_published(
    transactional: bool,
) -> None:
    """Every commit (checked inside the stand-in as it happens) moves offsets only past pages
    whose decisions are out: in the transaction, or flushed before the consumer commits."""
    r = rig(transactional=transactional)
    r.run_until_done()
    assert r.decided_once() == Counter(all_urls(r.broker))  # one decision per page
    how = "transaction" if transactional else "consumer"
    assert r.broker.commits and {c[0] for c in r.broker.commits} == {how}
    assert r.broker.committed == r.broker.end_offsets()


def test_a_backlog_is_prefetched_yet_each_batch_commits_before_the_next_is_decided() -> None:
    """Full batches: the next batch is polled during this one's decide (the consumer is never
    used by two threads: the stand-in asserts it), and the commits come one per batch, in
    order, each before the next decide."""
    r = rig(pages=24, partitions=2, batch=4)
    commits_at_decide: list[int] = []
    for n in range(1, 7):
        r.engine.on_decide[n] = lambda: commits_at_decide.append(len(r.broker.commits))
    r.run_until_done()
    assert commits_at_decide == [0, 1, 2, 3, 4, 5]
    assert len(r.consumer.polls) >= 7  # six full batches, then a poll that finds nothing new
    assert r.worker.metrics.value("neardup_worker_prefetched_batches_total") == 6
    assert r.decided_once() == Counter(all_urls(r.broker))


def test_batches_wait_out_the_interval_since_the_previous_batch_and_no_longer() -> None:
    """With ``batch_interval_ms`` a poll may linger for the rest of the interval since the
    previous batch's poll (never more, never on the first batch); without it, never."""
    r = rig(pages=6, partitions=1, batch=100, interval_ms=5_000)
    r.worker.step()
    r.worker.step()
    first, second = r.consumer.lingers[:2]
    assert first == 0  # no batch before it: nothing to space it from
    assert 4_000 < second <= 5_000  # a batch was polled a moment ago
    plain = rig(pages=6, partitions=1, batch=100)
    plain.worker.step()
    plain.worker.step()
    assert plain.consumer.lingers[:2] == [0, 0]


def test_a_failed_decide_rewinds_and_redoes_the_batch() -> None:
    """Redis unreachable in batch 2's decide: nothing of it (nor of the prefetched batch 3) is
    committed; the consumer is rewound, the same records are polled again and decided once."""
    r = rig()
    r.engine.on_decide[2] = _raise(BackendUnavailable("redis: connection refused"))
    r.run_until_done()
    second = r.consumer.polls[1]
    assert r.consumer.polls.count(second) == 2, "batch 2 was not polled again"
    assert r.worker.metrics.value("neardup_worker_backend_retries_total") == 1
    assert r.producer.aborts == 0  # the failure came before its transaction began
    assert r.decided_once() == Counter(all_urls(r.broker))


def test_an_aborted_commit_discards_its_decisions_and_redoes_the_batch() -> None:
    """The broker gives up on a commit: the transaction is aborted (its decisions never
    appear), the batch and the prefetched one are rewound and redone: one decision per page."""
    r = rig()
    r.engine.on_decide[3] = lambda: setattr(
        r.producer, "fail_next_commit", BackendUnavailable("broker: commit timed out")
    )
    r.run_until_done()
    assert r.producer.aborts == 1
    assert r.worker.metrics.value("neardup_worker_backend_retries_total") == 1
    assert r.decided_once() == Counter(all_urls(r.broker))


def test_a_rebalance_during_the_prefetch_redoes_the_batch_rather_than_commit_over_the_new_owner(
) -> None:  # fmt: skip
    """The prefetch's poll runs a rebalance that takes partition 0 away while batch 1 is
    decided: batch 1 is not committed (its partition-0 pages belong to the new owner now, from
    the last commit); the kept partitions are redone and committed once each."""
    r = rig(pages=24, partitions=3, batch=4)
    r.consumer.on_poll[2] = lambda: r.consumer.rebalance(keep={1, 2})
    r.run_until_done()
    assert all((PAGES_TOPIC, 0) not in offsets for _, offsets in r.broker.commits)
    assert (PAGES_TOPIC, 0) not in r.broker.committed  # the new owner starts from the start
    assert r.decided_once() == Counter(all_urls(r.broker, {1, 2}))
    assert r.worker.metrics.value("neardup_worker_backend_retries_total") == 0  # no backoff


def test_a_cooperative_rebalance_that_revokes_none_of_the_batch_lets_it_commit() -> None:
    """A rolling topic generation comes and a consumed one goes: the prefetch's poll runs a
    cooperative rebalance that takes partition 2 (not in batch 1, which holds partitions 0
    and 1) and gives nothing back of it. Batch 1 commits as it is, nothing is redone."""
    r = rig(pages=24, partitions=3, batch=4)
    r.consumer.assigned.discard((PAGES_TOPIC, 2))  # partition 2: consumed, about to go
    r.consumer.on_poll[2] = lambda: r.consumer.cooperative_rebalance(revoke={2}, add=set())
    r.run_until_done()
    assert r.consumer.polls[0] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert r.producer.aborts == 0
    assert r.consumer.polls.count(r.consumer.polls[0]) == 1, "batch 1 was redone"
    assert r.decided_once() == Counter(all_urls(r.broker, {0, 1}))


def test_a_cooperative_rebalance_that_revokes_a_partition_of_the_batch_redoes_it() -> None:
    """The same, but the revoked partition is one the batch holds: the batch is not committed
    over the partition's next owner; the kept partition is redone and committed once."""
    r = rig(pages=24, partitions=2, batch=4)
    r.consumer.on_poll[2] = lambda: r.consumer.cooperative_rebalance(revoke={0}, add=set())
    r.run_until_done()
    assert all((PAGES_TOPIC, 0) not in offsets for _, offsets in r.broker.commits)
    assert r.decided_once() == Counter(all_urls(r.broker, {1}))


def test_a_commit_refused_after_a_rebalance_redoes_the_batch() -> None:
    """The broker refuses the commit (the group moved on): the transaction is aborted and the
    batch redone without a backoff; every page still ends with one decision."""
    r = rig()
    r.producer.fail_next_commit = OwnershipLost("REBALANCE_IN_PROGRESS: the group is rebalancing")
    r.run_until_done()
    assert r.producer.aborts == 1
    assert r.worker.metrics.value("neardup_worker_backend_retries_total") == 0
    assert r.decided_once() == Counter(all_urls(r.broker))


def test_a_graceful_stop_finishes_and_commits_the_batch_then_closes() -> None:
    """stop() arrives while batch 2 is decided (batch 3 being prefetched): batch 2 commits,
    batch 3 is left for the group, the consumer and the producer close; published decisions
    are exactly the committed pages."""
    r = rig(pages=24, partitions=2, batch=4)
    r.engine.on_decide[2] = r.worker.stop
    r.worker.run()
    assert r.consumer.closed and r.producer.closed and not r.producer.in_transaction
    assert len(r.broker.commits) == 2
    committed = {
        _url_of(record)
        for (_, partition), end in r.broker.committed.items()
        for record in r.broker.pages[partition][:end]
    }
    assert len(committed) == 8
    assert r.decided_once() == Counter(committed)


def _raise(exc: Exception) -> Callable[[], None]:
    def hook() -> None:
        raise exc

    return hook
