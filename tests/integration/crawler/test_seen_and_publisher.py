"""The Redis seen set and the bounded page publisher, against the real servers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from crawl_helpers import read_topic
from kafka import KafkaProducer

from crawler.kafka_io import PagePublisher
from crawler.seen import CrawlSeen, RedisSeenStore, seen_key
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
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=50)
    publisher = PagePublisher(producer, topic, max_inflight_bytes=10_000, call_from_thread=pump)
    results: list[Exception | None] = []
    payload = b"x" * 4_000
    granted = [publisher.reserve(len(payload)) for _ in range(5)]
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
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, max_request_size=2_000)
    publisher = PagePublisher(producer, topic, 100_000, pump)
    results: list[Exception | None] = []
    publisher.reserve(5_000)
    publisher.send(b"k", b"y" * 5_000, results.append)  # larger than max_request_size
    pump.run_until(lambda: len(results) == 1)
    assert isinstance(results[0], Exception) and publisher.inflight_bytes == 0
    publisher.close()
