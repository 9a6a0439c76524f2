"""One contract for the crawl's peer table and shared list (:mod:`crawler.sharing`): the
in-memory store, one Redis, a 3-node cluster. Each "process" is a store of its own over the
backend (for Redis its own client, as two crawler processes have); the memory store has no
other process, so its processes share one instance. Every crawl id is new."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.crc import key_slot

from crawler.seen import seen_key
from crawler.sharing import BUSY, HUNGRY, PEER_TIMEOUT, MemoryPeerStore, PeerStore
from crawler.sharing_redis import RedisPeerStore, peers_key, shared_key
from neardup.stack import RedisCluster, RedisServer

BACKENDS: list[Any] = [
    "memory",
    pytest.param("redis", marks=pytest.mark.integration),
    pytest.param("cluster", marks=pytest.mark.integration),
]

#: crawl id -> a new process's store of that crawl.
Processes = Callable[[str], PeerStore]


@pytest.fixture(params=BACKENDS)
def process(request: pytest.FixtureRequest) -> Iterator[Processes]:
    stores: list[PeerStore] = []
    memory: dict[str, MemoryPeerStore] = {}
    prefix = f"c{uuid.uuid4().hex[:8]}-"

    def make(crawl: str) -> PeerStore:
        crawl_id = prefix + crawl
        store: PeerStore
        if request.param == "memory":
            return memory.setdefault(crawl_id, MemoryPeerStore())
        if request.param == "redis":
            server: RedisServer = request.getfixturevalue("redis_server")
            store = RedisPeerStore.from_url(server.url, crawl_id)
        else:
            cluster: RedisCluster = request.getfixturevalue("redis_cluster")
            store = RedisPeerStore.from_url(cluster.url, crawl_id, cluster=True)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def test_every_process_sees_every_beat_with_its_state_and_age(process: Processes) -> None:
    """Ages come from the store's one clock (Redis's TIME): processes on machines whose
    clocks disagree age each other's beats alike."""
    first, second = process("a"), process("a")
    first.beat("p1", BUSY)
    time.sleep(0.3)
    table = second.beat("p2", HUNGRY)
    assert {token: peer.state for token, peer in table.items()} == {"p1": BUSY, "p2": HUNGRY}
    assert 0.3 <= table["p1"].age < PEER_TIMEOUT  # slept since (generous: a busy machine)
    assert 0.0 <= table["p2"].age < table["p1"].age  # just now
    assert first.beat("p1", HUNGRY)["p1"].state == HUNGRY  # a beat replaces the last


def test_a_process_that_leaves_is_out_of_the_table(process: Processes) -> None:
    first, second = process("a"), process("a")
    first.beat("p1", BUSY)
    first.leave("p1")
    assert set(second.beat("p2", BUSY)) == {"p2"}


def test_crawls_do_not_share_tables_or_lists(process: Processes) -> None:
    process("a").beat("p1", BUSY)
    process("a").push([b"r1"])
    other = process("b")
    assert set(other.beat("p2", BUSY)) == {"p2"}
    assert other.pop(10) == []


def test_requests_are_taken_in_order_up_to_the_count(process: Processes) -> None:
    giver, taker = process("a"), process("a")
    giver.push([b"r1", b"r2", b"r3"])
    assert taker.pop(2) == [b"r1", b"r2"]
    assert taker.pop(5) == [b"r3"]
    assert taker.pop(5) == []
    assert taker.pop(0) == []


def test_two_takers_never_take_the_same_request(process: Processes) -> None:
    giver = process("a")
    giver.push([f"r{i}".encode() for i in range(400)])
    takers = [process("a") for _ in range(4)]
    taken: list[list[bytes]] = [[] for _ in takers]

    def take(number: int) -> None:
        while got := takers[number].pop(7):
            taken[number].extend(got)

    threads = [threading.Thread(target=take, args=(n,)) for n in range(len(takers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [request for each in taken for request in each]
    assert sorted(everything) == sorted(f"r{i}".encode() for i in range(400))


def test_a_crawls_keys_share_one_cluster_slot_with_its_seen_set() -> None:
    slots = {key_slot(key.encode()) for key in (peers_key("x"), shared_key("x"), seen_key("x"))}
    assert len(slots) == 1
