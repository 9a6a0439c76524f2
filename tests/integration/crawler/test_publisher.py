"""The bounded page publisher, against the real broker (the seen set has its contract suite:
``tests/contract/test_seen_store_contract.py``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from crawler.pipelines import reserve
from dedup_worker.adapters.kafka import PagePublisher
from dedup_worker.errors import BrokerError, NeardupError
from neardup.stack import KafkaBroker
from tests.support.crawl_helpers import read_topic

pytestmark = pytest.mark.integration


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
