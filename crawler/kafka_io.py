"""kafka-python on the crawler side: a bounded page publisher and a background decision feed.

Neither blocks Twisted's reactor: the producer's I/O runs on kafka-python's sender thread and
its acknowledgements come back to the reactor through ``callFromThread``; the decisions are
polled on a thread of their own and handed over through a queue that the reactor drains.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import kafka.errors as kerr
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from twisted.internet.defer import Deferred, succeed

from dedup_worker.contract.messages import Decision, decode_decision
from dedup_worker.errors import ContractError

logger = logging.getLogger(__name__)

Offsets = dict[int, int]
DeliveryCallback = Callable[[Exception | None], None]


def ensure_topics(bootstrap: str, topics: list[str], partitions: int) -> list[str]:
    """Create the missing topics (the crawler may start before any worker); returns them."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        missing = [t for t in topics if t not in set(admin.list_topics())]
        for topic in missing:
            # Another process may create it between our listing and our request.
            with contextlib.suppress(kerr.TopicAlreadyExistsError):
                admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    if missing:
        logger.info("created topics %s (%d partitions)", missing, partitions)
    return missing


class PagePublisher:
    """Idempotent producer with a bound on unacknowledged bytes.

    kafka-python 3 has no ``buffer_memory``: its accumulator grows without limit, so this bound
    is the only thing that keeps a slow broker from filling the crawler's memory.

    :meth:`reserve` returns a Deferred that fires once ``size`` more bytes fit under the
    bound (FIFO, so a big page cannot starve); the item pipeline awaits it before :meth:`send`,
    which holds the item in Scrapy's scraper slot and so slows the downloads instead of
    buffering pages without limit.
    """

    def __init__(
        self,
        producer: Any,
        topic: str,
        max_inflight_bytes: int,
        call_from_thread: Callable[..., Any],
    ) -> None:
        self._producer = producer
        self.topic = topic
        self.max_inflight_bytes = max_inflight_bytes
        self._call_from_thread = call_from_thread
        self.inflight_bytes = 0
        self.inflight_count = 0
        self._waiters: deque[tuple[int, Deferred[None]]] = deque()

    @classmethod
    def connect(
        cls,
        bootstrap: str,
        topic: str,
        max_inflight_bytes: int,
        max_message_bytes: int,
        call_from_thread: Callable[..., Any],
    ) -> PagePublisher:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            batch_size=256 * 1024,
            max_request_size=max_message_bytes,
            client_id="neardup-crawler",
        )
        publisher = cls(producer, topic, max_inflight_bytes, call_from_thread)
        producer.partitions_for(topic)  # fetch metadata now, not in the reactor's first send()
        return publisher

    def _fits(self, size: int) -> bool:
        # An oversized page still goes alone, or it could never be sent.
        return self.inflight_bytes == 0 or self.inflight_bytes + size <= self.max_inflight_bytes

    def reserve(self, size: int) -> Deferred[None]:
        """Fires once ``size`` bytes are granted (counted as in flight from then on)."""
        if not self._waiters and self._fits(size):
            self._take(size)
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._waiters.append((size, waiter))
        return waiter

    def send(self, key: bytes, value: bytes, on_delivery: DeliveryCallback) -> None:
        """Queue one message whose size was reserved; ``on_delivery`` runs in the reactor
        thread with None or the delivery error."""
        size = len(value)
        try:
            future = self._producer.send(self.topic, key=key, value=value)
        except kerr.KafkaError as exc:
            self._done(size, exc, on_delivery)
            return
        future.add_callback(lambda _: self._call_from_thread(self._done, size, None, on_delivery))
        future.add_errback(lambda exc: self._call_from_thread(self._done, size, exc, on_delivery))

    def _take(self, size: int) -> None:
        self.inflight_bytes += size
        self.inflight_count += 1

    def _done(self, size: int, error: Exception | None, on_delivery: DeliveryCallback) -> None:
        self.inflight_bytes -= size
        self.inflight_count -= 1
        try:
            on_delivery(error)
        finally:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            size, waiter = self._waiters.popleft()
            self._take(size)
            waiter.callback(None)

    def flush(self, timeout: float) -> None:
        """Blocking: wait for every queued message to be acknowledged (run it in a thread)."""
        self._producer.flush(timeout=timeout)

    def close(self, timeout: float = 10.0) -> None:
        self._producer.close(timeout=timeout)


class DecisionFeed:
    """Reads every partition of ``decisions`` on a daemon thread into a queue.

    No consumer group: every crawler process must see the decisions for its own pages, wherever
    the worker published them, and it filters the others out. Start positions are the end of
    the topic when the crawl opens (so no decision for a page published later can be missed)
    or, when resuming, the positions saved by the previous run.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.queue: queue.SimpleQueue[Decision | ContractError] = queue.SimpleQueue()
        self.start_offsets: Offsets = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Any = None

    def start(self, resume_from: Offsets | None = None) -> Offsets:
        """Blocking (run it in a thread): assign, seek, start polling; returns start offsets."""
        self._consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            fetch_max_wait_ms=100,
            client_id="neardup-crawler-decisions",
        )
        partitions = self._partitions()
        self._consumer.assign(partitions)
        self.start_offsets = self._seek(partitions, resume_from or {})
        self._thread = threading.Thread(target=self._run, name="neardup-decisions", daemon=True)
        self._thread.start()
        return self.start_offsets

    def _partitions(self) -> list[TopicPartition]:
        deadline = time.monotonic() + 30
        while True:
            ids = self._consumer.partitions_for_topic(self.topic)
            if ids:
                return [TopicPartition(self.topic, p) for p in sorted(ids)]
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {self.topic!r} has no partitions after 30 s")
            time.sleep(0.2)

    def _seek(self, partitions: list[TopicPartition], resume_from: Offsets) -> Offsets:
        ends = self._consumer.end_offsets(partitions)
        offsets = {}
        for tp in partitions:
            offsets[tp.partition] = resume_from.get(tp.partition, ends[tp])
            self._consumer.seek(tp, offsets[tp.partition])
        return offsets

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batches = self._consumer.poll(timeout_ms=100, max_records=1000)
            except kerr.KafkaError as exc:
                logger.warning("polling %s failed (%s); retrying in 1 s", self.topic, exc)
                self._stop.wait(1.0)
                continue
            for records in batches.values():
                for record in records:
                    self.queue.put(_decode(record.value))
        with contextlib.suppress(Exception):
            self._consumer.close()

    def drain(self, limit: int) -> list[Decision | ContractError]:
        items: list[Decision | ContractError] = []
        while len(items) < limit:
            try:
                items.append(self.queue.get_nowait())
            except queue.Empty:
                break
        return items

    def stop(self, timeout: float = 5.0) -> None:
        """Blocking: stop the polling thread and close the consumer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        elif self._consumer is not None:
            self._consumer.close()


def _decode(raw: bytes | None) -> Decision | ContractError:
    try:
        return decode_decision(raw or b"")
    except ContractError as exc:
        return exc
