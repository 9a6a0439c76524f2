"""The Redis seen set and the bounded page publisher, against the real servers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from crawl_helpers import read_topic

from crawler.pipelines import reserve
from crawler.seen import CrawlSeen, MemorySeenStore, RedisSeenStore, seen_key
from dedup_worker.adapters.kafka import PagePublisher
from dedup_worker.errors import BrokerError, NeardupError
from neardup.stack import KafkaBroker, RedisServer

pytestmark = pytest.mark.integration


def test_two_processes_sharing_a_crawl_claim_each_url_once(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    one = CrawlSeen(RedisSeenStore.from_url(redis_server.url, "c1"))
    two = CrawlSeen(RedisSeenStore.from_url(redis_server.url, "c1"))
    other_crawl = CrawlSeen(RedisSeenStore.from_url(redis_server.url, "c2"))
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
    assert redis_client.scard(seen_key("c1")) == 100
    # A stopped crawl resumes with its set: a new process sees what the others claimed.
    resumed = CrawlSeen(RedisSeenStore.from_url(redis_server.url, "c1"))
    assert resumed.request_seen("http://A.test:80/7#x")
    resumed.release("http://a.test/7")
    assert not resumed.request_seen("http://a.test/7")


def _processes(redis_server: RedisServer | None, crawl: str) -> tuple[CrawlSeen, CrawlSeen]:
    """Two crawler processes' views of one crawl's seen set (Redis, or one shared memory)."""
    if redis_server is None:
        store = MemorySeenStore()
        return CrawlSeen(store), CrawlSeen(store)
    return (
        CrawlSeen(RedisSeenStore.from_url(redis_server.url, crawl)),
        CrawlSeen(RedisSeenStore.from_url(redis_server.url, crawl)),
    )


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_a_cancelled_link_another_process_wanted_is_kept(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A claims a link; B's page links to it too and finds it seen; A's source page is then
    corrected to a duplicate. A must fetch the link after all: B filtered it."""
    server = request.getfixturevalue("redis_server") if backend == "redis" else None
    a, b = _processes(server, f"wanted-{backend}")
    assert a.claim_many(["http://a.test/x", "http://a.test/y"]) == [True, True]
    assert b.claim_many(["http://a.test/x"]) == [False]
    assert not a.release_unwanted("http://a.test/x")  # wanted elsewhere: kept, fetch it
    assert a.release_unwanted("http://a.test/y")  # nobody else wanted it: un-claimed
    assert a.contains_many(["http://a.test/x", "http://a.test/y"]) == [True, False]
    assert b.claim_many(["http://a.test/y"]) == [True]  # now free for whoever wants it


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_a_link_released_before_another_process_wants_it_is_claimed_again(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """The other order: A cancels (and un-claims) first, then B's page links to it: B claims
    and schedules it. Either way the link is fetched exactly once."""
    server = request.getfixturevalue("redis_server") if backend == "redis" else None
    a, b = _processes(server, f"released-{backend}")
    assert a.claim_many(["http://a.test/x"]) == [True]
    assert a.release_unwanted("http://a.test/x")
    assert b.claim_many(["http://a.test/x"]) == [True]
    assert a.claim_many(["http://a.test/x"]) == [False]  # and A's next page finds B's claim


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_the_in_flight_marks_hold_the_frontier_not_the_crawl(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Outlinks that went out leave the in-flight and wanted sets with the next claim; a URL
    wanted after it went out is not marked (nothing can cancel it any more)."""
    server = request.getfixturevalue("redis_server") if backend == "redis" else None
    a, b = _processes(server, f"frontier-{backend}")
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


class Pump:
    """Stands in for the reactor: runs ``callFromThread`` calls on the test's thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.lock = threading.Lock()

    def __call__(self, f: Callable[..., Any], *args: Any) -> None:
        with self.lock:
            self.calls.append((f, args))

    def run_until(self, done: Callable[[], bool], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "timed out"
            with self.lock:
                calls, self.calls = self.calls, []
            for f, args in calls:
                f(*args)
            time.sleep(0.01)


def test_publisher_bounds_unacknowledged_bytes(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(partitions=2)
    pump = Pump()
    publisher = PagePublisher.connect(
        kafka_broker.settings, topic, max_inflight_bytes=10_000, max_message_bytes=1_000_000,
        call_from_thread=pump, linger_ms=50,
    )  # fmt: skip
    results: list[NeardupError | None] = []
    payload = b"x" * 4_000
    granted = [reserve(publisher, len(payload)) for _ in range(5)]
    fired = [d.called for d in granted]
    assert fired == [True, True, False, False, False]  # 8 KB in flight, the 3rd would be 12 KB
    assert publisher.inflight_bytes == 8_000
    for _ in range(2):
        publisher.send(b"k", payload, results.append)
    pump.run_until(lambda: all(d.called for d in granted[:4]))
    assert publisher.inflight_bytes <= 10_000
    assert not granted[4].called
    for _ in range(2):
        publisher.send(b"k", payload, results.append)
    pump.run_until(lambda: granted[4].called)  # the 5th waits for an acknowledgement
    publisher.send(b"k", payload, results.append)
    pump.run_until(lambda: len(results) == 5)
    assert results == [None] * 5 and publisher.inflight_bytes == 0
    publisher.close()
    assert len(read_topic(kafka_broker.bootstrap, topic, quiet=0.5)) == 5


def test_publisher_reports_delivery_errors(
    kafka_broker: KafkaBroker, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic()
    pump = Pump()
    publisher = PagePublisher.connect(
        kafka_broker.settings, topic, max_inflight_bytes=100_000, max_message_bytes=2_000,
        call_from_thread=pump,
    )  # fmt: skip
    results: list[NeardupError | None] = []
    assert publisher.reserve(5_000, lambda: None)
    publisher.send(b"k", b"y" * 5_000, results.append)  # larger than max_message_bytes
    pump.run_until(lambda: len(results) == 1)
    # A project error (not a client library's), and the reservation is returned.
    assert isinstance(results[0], BrokerError) and publisher.inflight_bytes == 0
    assert "MSG_SIZE_TOO_LARGE" in str(results[0])
    publisher.close()
