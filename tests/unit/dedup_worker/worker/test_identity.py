"""Worker identity: slot leases over the in-memory slot store (a manual clock lets leases lapse
without waiting), the producer that only produces under a held slot, and the memory-mode lock.

The same rule on Redis is checked by ``tests/contract/test_slot_store_contract.py``, and with
real worker processes by ``tests/integration/dedup_worker/worker/test_worker_scaling.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from dedup_worker.core.slots import LeaseStatus, MemorySlotStore
from dedup_worker.errors import BackendUnavailable, ConfigError, ProducerFenced
from dedup_worker.worker.config import WorkerConfig, load_config
from dedup_worker.worker.identified_producer import IdentifiedProducer
from dedup_worker.worker.identity import HostLock, SlotLease

TTL_MS, RENEW_MS = 10_000, 2_000


class Clock:
    """One manual clock, read in seconds by the lease holders and in ms by the store."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def ms(self) -> int:
        return int(self.now * 1000)


def config(**overrides: str) -> WorkerConfig:
    env = {
        "NEARDUP_REDIS_URL": "redis://127.0.0.1:1/0",
        "NEARDUP_GROUP_ID": "g",
        "NEARDUP_LEASE_TTL_MS": str(TTL_MS),
        "NEARDUP_LEASE_RENEW_MS": str(RENEW_MS),
    }
    return load_config([], env | {f"NEARDUP_{k.upper()}": v for k, v in overrides.items()})


class Fences:
    def __init__(self, fail: bool = False) -> None:
        self.fenced: list[str] = []
        self.fail = fail

    def __call__(self, transactional_id: str) -> None:
        if self.fail:
            raise BackendUnavailable("broker down")
        self.fenced.append(transactional_id)


def lease(store: MemorySlotStore, clock: Clock, fences: Fences | None = None) -> SlotLease:
    held = SlotLease(store, config(), fences or Fences(), clock)
    held.acquire()
    return held


class FlakyStore(MemorySlotStore):
    """The memory store, unreachable while ``down``."""

    down = False

    def renew(self, slot: int, owner: str, ttl_ms: int) -> bool:
        if self.down:
            raise BackendUnavailable("redis unreachable")
        return super().renew(slot, owner, ttl_ms)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> MemorySlotStore:
    return MemorySlotStore(8, clock.ms)


def test_workers_of_one_environment_get_distinct_transactional_ids(
    store: MemorySlotStore, clock: Clock
) -> None:
    leases = [lease(store, clock) for _ in range(3)]
    assert [held.transactional_id for held in leases] == ["g.slot-0", "g.slot-1", "g.slot-2"]
    assert len({held.owner for held in leases}) == 3


def test_a_lease_lapses_locally_one_renew_interval_before_the_store_lets_it_go(
    store: MemorySlotStore, clock: Clock
) -> None:
    held = lease(store, clock)
    clock.now += (TTL_MS - RENEW_MS) / 1000 - 0.001
    assert held.status() is LeaseStatus.HELD
    clock.now += 0.002
    assert held.status() is LeaseStatus.LAPSING  # stops producing...
    assert not store.leases()[0].lapsed  # ...while no one may take the slot yet
    assert held._renew_once()  # the store was only slow: the slot is still ours
    assert held.status() is LeaseStatus.HELD


def test_a_dead_workers_slot_is_fenced_freed_and_reused(
    store: MemorySlotStore, clock: Clock
) -> None:
    fences = Fences()
    dead, alive = lease(store, clock), lease(store, clock, fences)
    clock.now += 5
    assert alive._renew_once()
    assert not alive._fence_one()  # the dead one's lease has not lapsed yet
    clock.now += 6  # 11 s since the dead worker's last renewal, 6 since the live one's
    assert alive._fence_one()
    assert fences.fenced == ["g.slot-0"]
    assert 0 not in store.leases()  # freed after fencing: nothing is open under its id
    assert lease(store, clock).transactional_id == "g.slot-0"
    # Had the dead worker only been paused, it learns on waking that the slot is gone.
    assert not dead._renew_once()
    assert dead.status() is LeaseStatus.LOST
    assert dead.refresh() is LeaseStatus.LOST
    assert dead.reacquire() == "g.slot-2"


def test_a_slot_whose_fencing_failed_is_fenced_again_once_the_claim_lapses(
    store: MemorySlotStore, clock: Clock
) -> None:
    lease(store, clock)
    failing, working = Fences(fail=True), Fences()
    first, second = lease(store, clock, failing), lease(store, clock, working)
    clock.now += 11
    first._renew_once()
    second._renew_once()
    with pytest.raises(BackendUnavailable):
        first._fence_one()
    assert not second._fence_one()  # claimed by the first: not fenced twice at once
    clock.now += 11
    second._renew_once()
    assert second._fence_one()
    assert working.fenced == ["g.slot-0"]


def test_after_an_outage_of_the_store_live_workers_get_a_ttl_to_renew_before_fencing(
    clock: Clock,
) -> None:
    store = FlakyStore(8, clock.ms)
    fences = Fences()
    first, second = lease(store, clock), lease(store, clock, fences)
    store.down = True
    assert not second._renew_once()
    clock.now += 30  # every lease lapsed, the live ones included
    store.down = False
    assert second._renew_once()
    assert not second._fence_one()  # the first one may be alive: give it a ttl to renew
    assert first._renew_once()
    clock.now += 5
    assert first._renew_once()
    clock.now += 5
    assert second._renew_once()
    assert not second._fence_one()  # allowed again, and nothing lapsed
    assert fences.fenced == []
    clock.now += 11  # now the first one really stopped renewing
    assert second._renew_once()
    assert second._fence_one()
    assert fences.fenced == ["g.slot-0"]


def test_close_frees_a_clean_slot_and_leaves_an_unclean_one_to_lapse(
    store: MemorySlotStore, clock: Clock
) -> None:
    clean, unclean = lease(store, clock), lease(store, clock)
    clean.close(clean=True)
    unclean.close(clean=False)
    assert list(store.leases()) == [1]
    clock.now += 11
    assert store.claim_lapsed("fencer", TTL_MS) == 1


def test_more_workers_than_slots_is_a_configuration_error(clock: Clock) -> None:
    store = MemorySlotStore(2, clock.ms)
    lease(store, clock)
    lease(store, clock)
    with pytest.raises(ConfigError, match="raise NEARDUP_WORKER_SLOTS"):
        lease(store, clock)


def test_background_threads_renew_and_fence_a_silent_slot() -> None:
    """Real time and threads: a holder that never renews (a dead worker) is fenced by a live
    one's fencing thread; the live one keeps its own slot all along."""
    store = MemorySlotStore(4)
    fences = Fences()
    settings = config(lease_ttl_ms="1000", lease_renew_ms="100")
    dead = SlotLease(store, settings, Fences())
    dead.acquire()
    alive = SlotLease(store, settings, fences)
    alive.acquire()
    alive.start()
    try:
        deadline = time.monotonic() + 60
        while not fences.fenced:
            assert time.monotonic() < deadline, "the silent slot was never fenced"
            time.sleep(0.05)
        assert fences.fenced == ["g.slot-0"]
        assert store.leases()[1].owner == alive.owner
    finally:
        alive.close(clean=True)
    assert store.leases() == {}


# ---- the producer under a lease ----------------------------------------------------------------


class FakeProducer:
    """Stands in for ``DecisionProducer`` (the real one is tested against the broker)."""

    def __init__(self, transactional_id: str, connections: Connections) -> None:
        self.transactional_id = transactional_id
        self.transactional = True
        self.connections = connections
        self.calls: list[str] = []

    def begin(self) -> None:
        self.calls.append("begin")

    def commit(self, offsets: Any, metadata: Any) -> None:
        self.connections.during_commit()
        self.calls.append("commit")

    def abort(self) -> None:
        self.calls.append("abort")

    def close(self) -> None:
        self.calls.append("close")


class Connections:
    def __init__(self) -> None:
        self.made: list[FakeProducer] = []
        self.during_commit: Callable[[], None] = lambda: None

    def __call__(self, transactional_id: str) -> Any:
        self.made.append(FakeProducer(transactional_id, self))
        return self.made[-1]


def test_the_producer_waits_out_a_lapsing_lease_and_replaces_a_lost_one(clock: Clock) -> None:
    store = FlakyStore(8, clock.ms)
    connections = Connections()
    producer = IdentifiedProducer(lease(store, clock), connections)
    producer.begin()
    producer.commit({}, None)
    store.down = True
    clock.now += 7.9
    producer.begin()  # renewed 7.9 s ago: still held (TTL 10 s less one renew interval)
    clock.now += 0.2
    with pytest.raises(BackendUnavailable, match=r"not committing under g\.slot-0.*8\.1 s ago"):
        producer.commit({}, None)
    store.down = False
    producer.begin()  # the store is back and the slot still ours: renewed, carries on
    producer.commit({}, None)
    store.down = True
    clock.now += 11  # lapsed in the store too; a live worker fences and frees it, another takes it
    store.claim_lapsed("fencer", TTL_MS)
    store.release(0, "fencer")
    lease(store, clock)  # takes slot 0
    with pytest.raises(BackendUnavailable, match=r"last renewed 11\.0 s ago"):
        producer.begin()
    store.down = False
    producer.begin()  # learns the slot is gone (renewal refused), takes slot 1
    assert [p.transactional_id for p in connections.made] == ["g.slot-0", "g.slot-1"]
    assert connections.made[0].calls == ["begin", "commit", "begin", "begin", "commit", "close"]
    assert connections.made[1].calls == ["begin"]


def test_a_fenced_commit_is_redone_when_the_slot_was_taken_over(
    store: MemorySlotStore, clock: Clock
) -> None:
    """The process pauses in the middle of a commit, past its lease; a live worker fences the
    slot meanwhile, so the commit fails as fenced: the batch is redone, the worker goes on."""
    connections = Connections()
    producer = IdentifiedProducer(lease(store, clock), connections)

    def paused_and_fenced() -> None:
        clock.now += 11
        store.claim_lapsed("fencer", TTL_MS)
        raise ProducerFenced("committing the transaction: _FENCED")

    connections.during_commit = paused_and_fenced
    producer.begin()
    with pytest.raises(BackendUnavailable, match="redone under a new slot"):
        producer.commit({}, None)
    connections.during_commit = lambda: None
    producer.abort()
    producer.begin()
    producer.commit({}, None)
    assert [p.transactional_id for p in connections.made] == ["g.slot-0", "g.slot-1"]


def test_a_fenced_commit_under_a_held_slot_stops_the_worker(
    store: MemorySlotStore, clock: Clock
) -> None:
    """Fenced while the slot is ours: something outside the slot table uses its id (e.g. a
    NEARDUP_WORKER_ID equal to a slot name); redoing would not help."""
    connections = Connections()
    producer = IdentifiedProducer(lease(store, clock), connections)

    def fenced() -> None:
        raise ProducerFenced("committing the transaction: _FENCED")

    connections.during_commit = fenced
    producer.begin()
    with pytest.raises(ProducerFenced):
        producer.commit({}, None)


def test_closing_frees_the_slot_only_after_a_commit(store: MemorySlotStore, clock: Clock) -> None:
    first = IdentifiedProducer(lease(store, clock), Connections())
    first.begin()
    first.commit({}, None)
    first.close()
    second = IdentifiedProducer(lease(store, clock), Connections())
    second.begin()
    second.abort()  # the abort may not have reached the broker
    second.close()
    assert list(store.leases()) == [0]  # slot 0 (the second) lapses and gets fenced


# ---- memory mode -------------------------------------------------------------------------------


def test_memory_mode_refuses_a_second_worker_on_the_host() -> None:
    settings = load_config([], {"NEARDUP_GROUP_ID": f"lock-test-{threading.get_ident()}"})
    assert settings.memory_backend and not settings.leased_identity
    first = HostLock(settings)
    try:
        with pytest.raises(ConfigError, match=r"one process only.*NEARDUP_REDIS_URL"):
            HostLock(settings)
    finally:
        first.release()
    HostLock(settings).release()  # free again once the first let go
