"""One contract for the crawl's peer table and shared list (:mod:`crawler.sharing_store`): the
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

from crawler.redis_replies import SCRIPT_CHUNK
from crawler.seen import seen_key
from crawler.seen_redis import RedisSeenStore
from crawler.sharing import BUSY, HUNGRY, PEER_TIMEOUT
from crawler.sharing_redis import (
    RedisPeerStore,
    journal_key,
    peers_key,
    shared_key,
    taken_over_key,
)
from crawler.sharing_store import MemoryPeerStore, PeerStore
from dedup_worker.errors import NeardupError
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


def test_a_push_of_a_whole_queue_keeps_its_order(process: Processes) -> None:
    """A stopping spider hands its whole queue over: SCRIPT_CHUNK requests a script call."""
    giver, taker = process("a"), process("a")
    queue = [b'{"url":"http://a.test/product/%d"}' % i for i in range(3 * SCRIPT_CHUNK + 5)]
    giver.push(queue)
    assert taker.pop(len(queue) + 1) == queue


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


def test_a_process_that_beats_is_not_taken_over_and_one_that_stopped_is(
    process: Processes,
) -> None:
    first, second = process("a"), process("a")
    first.beat("p1", BUSY)
    assert second.take_over("p1", PEER_TIMEOUT) == -1  # alive: nothing done
    assert "p1" in second.beat("p2", BUSY)
    time.sleep(0.3)
    assert second.take_over("p1", 0.2) == 0  # dead: out of the table, nothing journaled
    assert set(second.beat("p2", BUSY)) == {"p2"}
    assert second.take_over("p1", 0.2) == -1  # not in the table: taken over already


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_a_killed_processs_journal_goes_to_the_shared_list(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """What a process claimed and had not settled (its journal, written by its claims: sent
    or not, its page undecided) goes to the shared list when it stops beating: not what was
    settled, handed over, un-claimed, or claimed by another process first."""
    crawl = f"c{uuid.uuid4().hex[:8]}-journal"
    if backend == "redis":
        url, cluster = request.getfixturevalue("redis_server").url, False
    else:
        url, cluster = request.getfixturevalue("redis_cluster").url, True
    dead_seen = RedisSeenStore.from_url(url, crawl, cluster=cluster)
    dead_seen.journal(journal_key(crawl, "dead"))
    other_seen = RedisSeenStore.from_url(url, crawl, cluster=cluster)
    dead, live = (RedisPeerStore.from_url(url, crawl, cluster=cluster) for _ in range(2))
    try:
        assert other_seen.claim_many([b"d"], []) == [True]
        assert dead_seen.add_many([b"s", b"d"], {b"s": b"rs", b"d": b"rd2"}) == [True, False]
        fresh = dead_seen.claim_many(
            [b"a", b"b", b"c", b"d"], [], {b"a": b"ra", b"b": b"rb", b"c": b"rc", b"d": b"rd"}
        )
        assert fresh == [True, True, True, False]
        dead.beat("dead", BUSY)
        assert dead_seen.claim_many([], [b"a"]) == []  # a went out: its page not decided yet
        assert dead_seen.claim_many([b"f"], [b"b"], {b"f": b"rf"}, [b"b"]) == [True]  # b was
        dead.push([b"rc"])
        dead.forget("dead", [b"c"])  # c handed over
        dead_seen.remove(b"f")  # f un-claimed (cancelled): out of the journal
        assert other_seen.claim_many([b"f"], []) == [True]  # the other process's now
        live.remember("live", {b"e": b"re"})
        assert (live.owes("dead"), live.owes("live")) == (2, 1)  # s (a seed), a; e
        assert live.take_over("dead", PEER_TIMEOUT) == -1
        time.sleep(0.3)
        assert live.take_over("dead", 0.2) == 2
        taken = live.pop(10)
        assert taken[0] == b"rc" and sorted(taken[1:]) == [b"ra", b"rs"]  # a: fetched again
        assert set(live.beat("live", BUSY)) == {"live"}
        assert live.owes("dead") == 0
        assert live.take_over("dead", 0.2) == -1  # taken over once
        live.leave("live")  # a process that leaves has no journal left
        assert live.owes("live") == 0
    finally:
        for store in (dead, live, dead_seen, other_seen):
            store.close()


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_a_journal_kept_for_a_jobdir_resume_is_adopted_or_handed_back(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A process leaving a ``JOBDIR`` crawl keeps its journal (Scrapy's queue and the resume
    file hold what it owed, still claimed): nobody takes it over, the resumed run adopts it
    whole as its own, once; or, when the resumed run discarded the queue (the run before was
    killed), hands it back, and the next beat takes it over to the shared list."""
    crawl = f"c{uuid.uuid4().hex[:8]}-kept"
    if backend == "redis":
        url, cluster = request.getfixturevalue("redis_server").url, False
    else:
        url, cluster = request.getfixturevalue("redis_cluster").url, True
    first, resumed, other = (RedisPeerStore.from_url(url, crawl, cluster=cluster) for _ in "abc")
    seen = RedisSeenStore.from_url(url, crawl, cluster=cluster)
    seen.journal(journal_key(crawl, "first"))
    try:
        first.beat("first", BUSY)
        assert seen.claim_many([b"a", b"b"], [], {b"a": b"ra", b"b": b"rb"}) == [True, True]
        first.leave("first", keep_journal=True)
        assert "first" not in other.beat("other", BUSY)
        assert other.take_over("first", 0.0) == -1  # not in the table: nobody takes it over
        assert resumed.adopt("resumed", "first") == 2
        assert (resumed.owes("first"), resumed.owes("resumed")) == (0, 2)
        assert resumed.adopt("resumed", "first") == 0  # adopted once
        with pytest.raises(NeardupError, match="adopted before any claim"):
            other.remember("other", {b"c": b"rc"})
            other.adopt("other", "resumed")
        resumed.leave("resumed", keep_journal=True)
        resumed.hand_back("resumed")  # its queue discarded: the crawl takes it over
        assert other.take_over("resumed", PEER_TIMEOUT) == 2
        assert sorted(other.pop(10)) == [b"ra", b"rb"]
        other.leave("other")
        assert other.owes("other") == 0  # a process that leaves keeps nothing by default
    finally:
        for store in (first, resumed, other, seen):
            store.close()


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_what_a_process_takes_is_in_its_journal_from_the_pop_on(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A pop with a token journals what it takes in the same step (each request under
    itself): a process killed before it filed them under their fingerprints leaves them to
    be taken over; filed, each is in the journal once."""
    crawl = f"c{uuid.uuid4().hex[:8]}-taken"
    if backend == "redis":
        url, cluster = request.getfixturevalue("redis_server").url, False
    else:
        url, cluster = request.getfixturevalue("redis_cluster").url, True
    dead, live = (RedisPeerStore.from_url(url, crawl, cluster=cluster) for _ in range(2))
    first, second, third = (b'{"url":"http://a.test/%d","method":"GET"}' % i for i in range(3))
    try:
        live.push([first, second, third])
        dead.beat("dead", BUSY)
        assert dead.pop(2, "dead") == [first, second]  # killed as the reply came back
        assert live.owes("dead") == 2
        time.sleep(0.3)
        assert live.take_over("dead", 0.2) == 2
        assert live.pop(10, "live") == [third, first, second]
        assert live.owes("live") == 3
        live.remember("live", {b"fp-of-first": first, b"fp-of-second": second})
        assert live.owes("live") == 3  # first and second filed under their fingerprints
        live.remember("live", {b"fp-of-third": third})
        live.push([first])
        assert live.pop(1) == [first]  # a pop without a token journals nothing
        assert live.owes("live") == 3
    finally:
        for store in (dead, live):
            store.close()


@pytest.mark.integration
@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_a_large_journal_is_taken_over_a_chunk_a_call_and_a_killed_taker_is_relayed(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A journal of thousands of numbered requests goes over in calls of SCRIPT_CHUNK (one
    script for all held Redis for seconds: Lua's string table chokes on long strings alike but
    for a few characters). A taker killed between two calls leaves the rest to the next one;
    every request reaches the shared list once."""
    crawl = f"c{uuid.uuid4().hex[:8]}-large"
    if backend == "redis":
        url, cluster = request.getfixturevalue("redis_server").url, False
    else:
        url, cluster = request.getfixturevalue("redis_cluster").url, True
    dead, killed_taker, taker = (
        RedisPeerStore.from_url(url, crawl, cluster=cluster) for _ in range(3)
    )
    n = 4 * SCRIPT_CHUNK + 7
    template = b'{"url":"http://a.test/product/%d","method":"GET"}'
    owed = {b"fp%06d" % i: template % i for i in range(n)}
    client: Any = dead._client
    try:
        client.hset(journal_key(crawl, "dead"), mapping=owed)
        client.sadd(seen_key(crawl), *owed)
        dead.beat("dead", BUSY)
        time.sleep(0.3)
        keys = [killed_taker.peers_key, killed_taker.shared_key, journal_key(crawl, "dead"),
                seen_key(crawl), taken_over_key(journal_key(crawl, "dead"))]  # fmt: skip
        args = ["dead", 0.2, "1", 64, "0"]  # one call of a take-over, as the store makes them
        status, first, _ = killed_taker._take_over(keys=keys, args=args)
        assert int(status) == 0 and 0 < int(first) < n  # then the taker is killed
        assert taker.owes("dead") == n - int(first)
        assert taker.take_over("dead", PEER_TIMEOUT) == -1  # its row was marked a moment ago
        time.sleep(0.3)
        assert taker.take_over("dead", 0.2, "taker", BUSY) == n - int(first)
        assert client.hget(peers_key(crawl), "taker").startswith(b"busy ")  # it beat meanwhile
        shared = client.lrange(shared_key(crawl), 0, -1)
        assert sorted(shared) == sorted(owed.values())  # each once
        assert taker.owes("dead") == 0 and set(taker.beat("taker", BUSY)) == {"taker"}
        assert taker.take_over("dead", 0.2) == -1
    finally:
        for store in (dead, killed_taker, taker):
            store.close()


@pytest.mark.integration
def test_a_process_that_beats_again_during_its_take_over_stops_it(
    request: pytest.FixtureRequest,
) -> None:
    """Only slow (a stop of the world), it beats again between two calls: the take-over
    stops, and what it left goes with the process's clean leave."""
    crawl = f"c{uuid.uuid4().hex[:8]}-slow"
    url = request.getfixturevalue("redis_server").url
    slow, taker = (RedisPeerStore.from_url(url, crawl) for _ in range(2))
    journal = journal_key(crawl, "slow")
    owed = {b"fp%06d" % i: b'{"url":"http://a.test/product/%d"}' % i for i in range(600)}
    client: Any = slow._client
    try:
        client.hset(journal, mapping=owed)
        client.sadd(seen_key(crawl), *owed)
        slow.beat("slow", BUSY)
        time.sleep(0.3)
        keys = [taker.peers_key, taker.shared_key, journal, seen_key(crawl),
                taken_over_key(journal)]  # fmt: skip
        status, moved, cursor = taker._take_over(keys=keys, args=["slow", 0.2, "1", 64, "0"])
        assert int(status) == 0 and 0 < int(moved) < len(owed)
        slow.beat("slow", BUSY)  # back
        args = ["slow", 0.2, "0", 64, cursor]
        assert int(taker._take_over(keys=keys, args=args)[0]) == -1
        assert taker.owes("slow") == len(owed) - int(moved)
        slow.leave("slow")
        assert taker.owes("slow") == 0
    finally:
        for store in (slow, taker):
            store.close()


def test_a_crawls_keys_share_one_cluster_slot_with_its_seen_set() -> None:
    journal = journal_key("x", "host:1:ab")
    keys = (peers_key("x"), shared_key("x"), seen_key("x"), journal, taken_over_key(journal))
    slots = {key_slot(key.encode()) for key in keys}
    assert len(slots) == 1
