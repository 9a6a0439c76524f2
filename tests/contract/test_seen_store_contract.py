"""One contract for the crawl's seen set: the in-memory store, one Redis, a 3-node cluster.

Each "process" is a :class:`CrawlSeen` of its own over the backend: for Redis a store with its
own client (as two crawler processes would have), for memory one shared ``MemorySeenStore``
(the in-process fallback has no other process to share with; sharing it is the closest
stand-in, and its lock makes the same atomicity hold). Every crawl id is new, so tests never
see each other's sets.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from crawler.seen import (
    CrawlSeen,
    MemorySeenStore,
    SeenStore,
    legacy_seen_key,
    seen_key,
    url_fingerprint,
)
from crawler.seen_redis import RedisSeenStore
from neardup.stack import RedisCluster, RedisServer

BACKENDS: list[Any] = [
    "memory",
    pytest.param("redis", marks=pytest.mark.integration),
    pytest.param("cluster", marks=pytest.mark.integration),
]

#: crawl id -> a new process's view of that crawl's seen set.
Processes = Callable[[str], CrawlSeen]


@pytest.fixture(params=BACKENDS)
def process(request: pytest.FixtureRequest) -> Iterator[Processes]:
    stores: list[SeenStore] = []
    memory: dict[str, MemorySeenStore] = {}
    prefix = f"c{uuid.uuid4().hex[:8]}-"

    def make(crawl: str) -> CrawlSeen:
        crawl_id = prefix + crawl
        if request.param == "memory":
            return CrawlSeen(memory.setdefault(crawl_id, MemorySeenStore()))
        if request.param == "redis":
            server: RedisServer = request.getfixturevalue("redis_server")
            store = RedisSeenStore.from_url(server.url, crawl_id)
        else:
            cluster: RedisCluster = request.getfixturevalue("redis_cluster")
            store = RedisSeenStore.from_url(cluster.url, crawl_id, cluster=True)
        stores.append(store)
        return CrawlSeen(store)

    yield make
    for store in stores:
        store.close()


def test_two_processes_sharing_a_crawl_claim_each_url_once(process: Processes) -> None:
    one, two, other_crawl = process("c1"), process("c1"), process("c2")
    urls = [f"http://a.test/{i}" for i in range(100)]
    won: list[list[bool]] = [[], []]

    def claim(seen: CrawlSeen, out: list[bool]) -> None:
        for i in range(0, 100, 10):
            out.extend(seen.claim_many(urls[i : i + 10]))

    threads = [
        threading.Thread(target=claim, args=(one, won[0])),
        threading.Thread(target=claim, args=(two, won[1])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a + b for a, b in zip(*won, strict=True)] == [1] * 100  # exactly one winner each
    assert other_crawl.claim_many(urls[:3]) == [True, True, True]  # crawls are separate
    assert one.store.size() == 100
    # A stopped crawl resumes with its set: a new process sees what the others claimed.
    resumed = process("c1")
    assert resumed.request_seen("http://A.test:80/7#x")
    resumed.release("http://a.test/7")
    assert not resumed.request_seen("http://a.test/7")


def test_the_scheduler_check_claims_once_and_counts_method_and_body(process: Processes) -> None:
    seen = process("filter")
    assert seen.claim_many(["http://a.test/1"]) == [True]
    assert not seen.request_seen("http://a.test/1")  # preclaimed a moment ago: passes once
    assert seen.request_seen("http://a.test/1")
    assert not seen.request_seen("http://a.test/form", "POST", b"a=1")
    assert not seen.request_seen("http://a.test/form", "POST", b"a=2")
    assert seen.request_seen("http://a.test/form", "POST", b"a=1")
    assert not seen.request_seen("http://a.test/form")  # the GET is another request
    fps = [url_fingerprint(u) for u in ("http://a.test/1", "http://a.test/9")]
    assert seen.store.contains_many(fps) == [True, False]
    assert seen.store.add_many([*fps, fps[1]]) == [False, True, False]


def test_a_cancelled_link_another_process_wanted_is_kept(process: Processes) -> None:
    """A claims a link; B's page links to it too and finds it seen; A's source page is then
    corrected to a duplicate. A must fetch the link after all: B filtered it."""
    a, b = process("wanted"), process("wanted")
    assert a.claim_many(["http://a.test/x", "http://a.test/y"]) == [True, True]
    assert b.claim_many(["http://a.test/x"]) == [False]
    assert not a.release_unwanted("http://a.test/x")  # wanted elsewhere: kept, fetch it
    assert a.release_unwanted("http://a.test/y")  # nobody else wanted it: un-claimed
    assert a.contains_many(["http://a.test/x", "http://a.test/y"]) == [True, False]
    assert b.claim_many(["http://a.test/y"]) == [True]  # now free for whoever wants it


def test_a_link_released_before_another_process_wants_it_is_claimed_again(
    process: Processes,
) -> None:
    """The other order: A cancels (and un-claims) first, then B's page links to it: B claims
    and schedules it. Either way the link is fetched exactly once."""
    a, b = process("released"), process("released")
    assert a.claim_many(["http://a.test/x"]) == [True]
    assert a.release_unwanted("http://a.test/x")
    assert b.claim_many(["http://a.test/x"]) == [True]
    assert a.claim_many(["http://a.test/x"]) == [False]  # and A's next page finds B's claim


def test_the_in_flight_marks_hold_the_frontier_not_the_crawl(process: Processes) -> None:
    """Outlinks that went out leave the in-flight and wanted sets with the next claim; a URL
    wanted after it went out is not marked (nothing can cancel it any more)."""
    a, b = process("frontier"), process("frontier")
    urls = [f"http://a.test/{i}" for i in range(3)]
    assert a.claim_many(urls) == [True] * 3
    assert b.claim_many(urls[:2]) == [False] * 2
    assert a.store.in_flight() == (3, 2)
    for url in urls:
        a.sent(url)
    a.flush()
    assert a.store.in_flight() == (0, 0)
    assert b.claim_many([f"{urls[2]}?again", *urls[2:]]) == [True, False]
    assert a.store.in_flight() == (1, 0)  # only the new one
    assert a.store.size() == 4
    b.store.remove(url_fingerprint(f"{urls[2]}?again"))  # un-claim, whatever the marks
    assert a.store.in_flight() == (0, 0) and a.store.size() == 3


@pytest.mark.integration
def test_a_crawls_sets_share_one_cluster_slot(redis_cluster: RedisCluster) -> None:
    key = seen_key("one-crawl")
    slots = {key_slot(k.encode()) for k in (key, f"{key}:inflight", f"{key}:wanted")}
    assert len(slots) == 1
    # The claim script touches all three: on the cluster it runs, and is atomic, in that slot.
    seen = CrawlSeen(RedisSeenStore.from_url(redis_cluster.url, "one-crawl", cluster=True))
    assert seen.claim_many(["http://a.test/"]) == [True]
    assert seen.store.in_flight() == (1, 0)
    seen.store.close()


@pytest.mark.integration
def test_a_crawl_of_an_earlier_release_resumes_with_its_set(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """Before the hash tag the sets were ``neardup:crawl:<id>:seen[...]``: the first store
    opened on a single Redis moves them, so a crawl started before the upgrade resumes."""
    legacy = legacy_seen_key("old")
    redis_client.sadd(legacy, url_fingerprint("http://a.test/done"))
    redis_client.sadd(f"{legacy}:inflight", url_fingerprint("http://a.test/done"))
    seen = CrawlSeen(RedisSeenStore.from_url(redis_server.url, "old"))
    assert seen.request_seen("http://a.test/done")
    assert seen.store.in_flight() == (1, 0)
    assert not redis_client.exists(legacy)
    # Opened again (another process): nothing left to move, nothing overwritten.
    assert RedisSeenStore.from_url(redis_server.url, "old").move_legacy_keys() == 0
    assert seen.store.size() == 1
