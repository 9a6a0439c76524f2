"""One contract for every ``SlotStore``: the in-memory reference, one Redis, a 3-node cluster.

Leases that must stay held get a ten-minute ttl; leases that must lapse get 50 ms, and the test
waits until the store's clock has passed it (the memory store's clock is advanced instead), so
no assertion depends on how fast the machine is.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dedup_worker.adapters.redis_slots import RedisSlotStore, slots_key
from dedup_worker.core.slots import Lease, MemorySlotStore, SlotStore, Taken
from neardup.stack import RedisCluster, RedisServer

BACKENDS: list[Any] = [
    "memory",
    pytest.param("redis", marks=pytest.mark.integration),
    pytest.param("cluster", marks=pytest.mark.integration),
]
HELD_MS = 600_000
SHORT_MS = 50


@dataclass
class Harness:
    make: Callable[[int], SlotStore]  # max_slots -> a new, empty table
    lapse: Callable[[], None]  # let every SHORT_MS lease written so far lapse


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _wait_real_time() -> None:
    """Redis runs on this machine, so its TIME is our clock: wait until SHORT_MS passed."""
    deadline = time.time() + (SHORT_MS + 5) / 1000
    while time.time() < deadline:
        time.sleep(0.005)


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    if request.param == "memory":
        clock = ManualClock()

        def advance() -> None:
            clock.now += SHORT_MS

        yield Harness(lambda n: MemorySlotStore(n, clock), advance)
        return
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        client: Any = server.client()
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        client = cluster.client()
    namespace = f"s{uuid.uuid4().hex[:10]}"

    def make(max_slots: int) -> SlotStore:
        return RedisSlotStore(client, namespace, f"g{uuid.uuid4().hex[:6]}", max_slots)

    yield Harness(make, _wait_real_time)
    client.close()


def test_workers_get_the_lowest_free_slots_and_none_when_all_are_held(harness: Harness) -> None:
    store = harness.make(3)
    assert [store.acquire(f"w{i}", HELD_MS) for i in range(3)] == [
        Taken(0, False),
        Taken(1, False),
        Taken(2, False),
    ]
    assert store.acquire("w3", HELD_MS) is None
    assert store.leases() == {i: Lease(f"w{i}", lapsed=False) for i in range(3)}


def test_only_the_owner_renews_or_frees_a_slot(harness: Harness) -> None:
    store = harness.make(4)
    store.acquire("a", HELD_MS)
    store.acquire("b", HELD_MS)
    assert store.renew(0, "a", HELD_MS)
    assert not store.renew(0, "b", HELD_MS)
    assert not store.release(0, "b")
    assert not store.renew(3, "a", HELD_MS)  # no entry
    assert store.release(0, "a")
    assert not store.renew(0, "a", HELD_MS)  # freed: the old owner may not use it again
    assert store.acquire("c", HELD_MS) == Taken(0, False)  # freed cleanly: nothing to fence


def test_a_lapsed_slot_is_taken_over_and_its_old_owner_cannot_renew(harness: Harness) -> None:
    store = harness.make(4)
    store.acquire("dead", SHORT_MS)
    store.acquire("alive", HELD_MS)
    harness.lapse()
    assert store.leases() == {0: Lease("dead", True), 1: Lease("alive", False)}
    assert store.acquire("restarted", HELD_MS) == Taken(0, True)
    assert not store.renew(0, "dead", HELD_MS)
    assert store.leases()[0] == Lease("restarted", False)


def test_a_lapsed_lease_nobody_took_is_renewed_by_its_owner(harness: Harness) -> None:
    """A worker that could not reach the store for a while keeps its slot if no one took it."""
    store = harness.make(4)
    store.acquire("slow", SHORT_MS)
    harness.lapse()
    assert store.renew(0, "slow", HELD_MS)
    assert store.leases() == {0: Lease("slow", False)}
    assert store.acquire("other", HELD_MS) == Taken(1, False)


def test_claiming_lapsed_slots_lowest_first_to_fence_and_free_them(harness: Harness) -> None:
    store = harness.make(5)
    for owner, ttl in (("alive", HELD_MS), ("dead1", SHORT_MS), ("dead2", SHORT_MS)):
        store.acquire(owner, ttl)
    assert store.claim_lapsed("fencer", HELD_MS) is None  # nothing lapsed yet
    harness.lapse()
    assert store.claim_lapsed("fencer", HELD_MS) == 1
    # While it fences slot 1 the claim holds it: no worker starts under that id meanwhile.
    assert store.acquire("new", HELD_MS) == Taken(2, True)
    assert store.claim_lapsed("fencer", HELD_MS) is None
    assert store.release(1, "fencer")
    assert store.acquire("newer", HELD_MS) == Taken(1, False)
    assert store.leases() == {
        0: Lease("alive", False),
        1: Lease("newer", False),
        2: Lease("new", False),
    }


def test_workers_starting_at_once_get_distinct_slots(harness: Harness) -> None:
    store = harness.make(64)
    taken: list[Taken | None] = []
    lock = threading.Lock()
    start = threading.Barrier(16)

    def start_worker(i: int) -> None:
        start.wait()
        slot = store.acquire(f"w{i}", HELD_MS)
        with lock:
            taken.append(slot)

    threads = [threading.Thread(target=start_worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(t.slot for t in taken if t is not None) == list(range(16))


@pytest.mark.integration
def test_groups_have_their_own_tables_in_one_cluster_slot(redis_cluster: RedisCluster) -> None:
    client: Any = redis_cluster.client()
    namespace = f"s{uuid.uuid4().hex[:10]}"
    first = RedisSlotStore(client, namespace, "group-a", 4)
    second = RedisSlotStore(client, namespace, "group-b", 4)
    assert first.acquire("x", HELD_MS) == second.acquire("y", HELD_MS) == Taken(0, False)
    key_slots = {client.keyslot(slots_key(namespace, group)) for group in ("group-a", "group-b")}
    assert len(key_slots) == 1  # the namespace's tag: one slot for all its groups' tables
    client.close()


@pytest.mark.integration
def test_an_unreachable_redis_is_backend_unavailable(redis_server: RedisServer) -> None:
    from dedup_worker.adapters.redis_client import connect
    from dedup_worker.errors import BackendUnavailable

    store = RedisSlotStore(connect(redis_server.url), f"s{uuid.uuid4().hex[:8]}", "g", 4)
    assert store.acquire("a", HELD_MS) == Taken(0, False)
    redis_server.pause()
    try:
        with pytest.raises(BackendUnavailable):
            store.renew(0, "a", HELD_MS)
    finally:
        redis_server.resume()
    assert store.renew(0, "a", HELD_MS)
