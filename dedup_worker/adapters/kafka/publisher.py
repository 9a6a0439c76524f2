"""The crawler's page publisher (a bound on unacknowledged bytes) and a plain "send these" helper.

Neither blocks its caller's event loop: librdkafka sends on its own threads, and a thread of
the publisher serves the delivery reports, handing each back to the owner's thread through
``call_from_thread`` (Twisted's ``reactor.callFromThread`` in the crawler). The publisher knows
nothing of Twisted: the crawler turns :meth:`PagePublisher.reserve` into a Deferred.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from dedup_worker.adapters.kafka.errors import kafka_errors, translate, translate_error
from dedup_worker.adapters.kafka.generations import Router
from dedup_worker.adapters.kafka.settings import REQUEST_TIMEOUT_S, KafkaSettings
from dedup_worker.errors import BackendUnavailable, NeardupError

logger = logging.getLogger(__name__)

#: Runs in the owner's thread with None or why the message was not delivered.
DeliveryCallback = Callable[[NeardupError | None], None]
#: Runs ``f(*args)`` in the owner's thread (e.g. ``reactor.callFromThread``).
CallFromThread = Callable[..., object]

_POLL_S = 0.1


class PagePublisher:
    """Idempotent producer of one topic with a bound on unacknowledged bytes.

    :meth:`reserve` grants ``size`` bytes once they fit under the bound (FIFO, so a big page
    cannot starve); the crawler's pipeline awaits the grant before :meth:`send`, which holds
    the item in Scrapy's scraper slot and so slows the downloads instead of buffering pages
    without limit. Every method but :meth:`flush` and :meth:`close` runs in the owner's
    thread, and so do the callbacks.
    """

    def __init__(
        self,
        producer: Producer,
        topic: str,
        max_inflight_bytes: int,
        call_from_thread: CallFromThread,
        router: Router | None = None,
    ) -> None:
        self._producer = producer
        self.topic = topic
        #: Where ``topic`` is written now (its newest generation if it rolls); refreshed by
        #: the reports thread, so the owner's thread never waits for metadata.
        self._router = router
        self.max_inflight_bytes = max_inflight_bytes
        self._call_from_thread = call_from_thread
        self.inflight_bytes = 0
        self.inflight_count = 0
        self._waiters: deque[tuple[int, Callable[[], None]]] = deque()
        self._stop = threading.Event()
        self._reports = threading.Thread(
            target=self._serve_reports, name="neardup-publisher", daemon=True
        )
        self._reports.start()

    @classmethod
    def connect(
        cls,
        settings: KafkaSettings,
        topic: str,
        *,
        max_inflight_bytes: int,
        max_message_bytes: int,
        call_from_thread: CallFromThread,
        linger_ms: int = 5,
    ) -> PagePublisher:
        """Blocking (run it in a thread): a publisher with the topic's metadata fetched, so
        the owner's first :meth:`send` does not wait for it."""
        producer = Producer(
            settings.producer_config(
                {
                    "linger.ms": linger_ms,
                    "batch.size": 256 * 1024,
                    "message.max.bytes": max(1000, max_message_bytes),
                }
            )
        )
        router = Router(settings, producer)
        with kafka_errors(f"reading the metadata of {topic}"):
            producer.list_topics(router.topic(topic), timeout=REQUEST_TIMEOUT_S)
        return cls(producer, topic, max_inflight_bytes, call_from_thread, router)

    def _fits(self, size: int) -> bool:
        # An oversized page still goes alone, or it could never be sent.
        return self.inflight_bytes == 0 or self.inflight_bytes + size <= self.max_inflight_bytes

    def reserve(self, size: int, granted: Callable[[], None]) -> bool:
        """True when ``size`` bytes are granted now; else False, and ``granted()`` runs once
        they are (counted as in flight from then on)."""
        if not self._waiters and self._fits(size):
            self._take(size)
            return True
        self._waiters.append((size, granted))
        return False

    def send(self, key: bytes, value: bytes, on_delivery: DeliveryCallback) -> None:
        """Queue one message whose size was reserved; ``on_delivery`` runs in the owner's
        thread with None or the delivery error."""
        size = len(value)

        def delivered(error: KafkaError | None, message: Message) -> None:
            failure = None if error is None else translate_error(error, f"delivering to {topic}")
            self._call_from_thread(self._done, size, failure, on_delivery)

        topic = self._router.topic(self.topic) if self._router is not None else self.topic
        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=delivered)
                return
            except BufferError:  # librdkafka's local queue is full: let it drain
                self._producer.poll(_POLL_S)
            except KafkaException as exc:
                self._done(size, translate(exc, f"producing to {topic}"), on_delivery)
                return

    def send_aside(
        self, topic: str, key: bytes, value: bytes, on_delivery: DeliveryCallback
    ) -> None:
        """Queue a small message on another topic, outside the in-flight bound (the crawler's
        predicted duplicates: a few hundred bytes each); ``on_delivery`` as for :meth:`send`."""

        def delivered(error: KafkaError | None, message: Message) -> None:
            failure = None if error is None else translate_error(error, f"delivering to {topic}")
            self._call_from_thread(on_delivery, failure)

        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=delivered)
                return
            except BufferError:  # librdkafka's local queue is full: let it drain
                self._producer.poll(_POLL_S)
            except KafkaException as exc:
                on_delivery(translate(exc, f"producing to {topic}"))
                return

    def _take(self, size: int) -> None:
        self.inflight_bytes += size
        self.inflight_count += 1

    def _done(self, size: int, error: NeardupError | None, on_delivery: DeliveryCallback) -> None:
        self.inflight_bytes -= size
        self.inflight_count -= 1
        try:
            on_delivery(error)
        finally:
            self._grant_waiters()

    def _grant_waiters(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            size, granted = self._waiters.popleft()
            self._take(size)
            granted()

    def _serve_reports(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(_POLL_S)
            if self._router is not None:
                self._router.refresh_if_due()

    def flush(self, timeout: float) -> None:
        """Blocking: wait for every queued message to be acknowledged; BackendUnavailable if
        some are not within ``timeout`` seconds."""
        with kafka_errors(f"flushing {self.topic}"):
            left = self._producer.flush(timeout)
        if left:
            raise BackendUnavailable(f"flushing {self.topic}: {left} messages not acknowledged")

    def close(self, timeout: float = 10.0) -> None:
        """Blocking: deliver what is queued (up to ``timeout`` seconds), then stop."""
        try:
            self._producer.flush(timeout)
        finally:
            self._stop.set()
            self._reports.join(timeout)


class Sender:
    """A plain producer for tools and tests: :meth:`send` queues, :meth:`flush` waits for
    every acknowledgement and raises the first delivery failure (as a ``NeardupError``)."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        max_message_bytes: int = 1_000_000,
        linger_ms: int = 5,
    ) -> None:
        self._failures: list[NeardupError] = []
        config = {"linger.ms": linger_ms, "message.max.bytes": max(1000, max_message_bytes)}
        with kafka_errors("configuring a Kafka producer"):
            self._producer = Producer(settings.producer_config(config))
        self._router = Router(settings, self._producer)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._failures.append(translate_error(error, f"delivering to {message.topic()}"))

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Queue one record (to the newest generation of a rolling ``topic``)."""
        self._router.refresh_if_due()
        topic = self._router.topic(topic)
        while True:
            try:
                with kafka_errors(f"producing to {topic}"):
                    self._producer.produce(topic, value, key, on_delivery=self._delivered)
                # Serve the delivery reports that are in (no wait): a message counts against
                # librdkafka's local queue (100k) until its report is served, so without this
                # every 100k sends stopped the sender to serve 100k reports at once (a burst
                # of late pages every 100 s in the 1,000 pages/s soak).
                self._producer.poll(0)
                return
            except BufferError:  # librdkafka's local queue is full: let it drain
                self._producer.poll(_POLL_S)

    def flush(self, timeout: float = REQUEST_TIMEOUT_S) -> None:
        with kafka_errors("flushing"):
            left = self._producer.flush(timeout)
        failures, self._failures = self._failures, []
        if failures:
            raise failures[0]
        if left:
            raise BackendUnavailable(f"flushing: {left} messages not acknowledged")


def produce_all(
    settings: KafkaSettings,
    topic: str,
    messages: Iterable[tuple[bytes | None, bytes]],
    *,
    max_message_bytes: int = 1_000_000,
    linger_ms: int = 5,
) -> int:
    """Send ``(key, value)`` messages and wait until all are acknowledged; the count sent.
    The first delivery failure is raised (as a ``NeardupError``)."""
    sender = Sender(settings, max_message_bytes=max_message_bytes, linger_ms=linger_ms)
    count = 0
    for key, value in messages:
        sender.send(topic, key, value)
        count += 1
    sender.flush()
    return count
