"""Item pipeline entry of neardup: the producer of the ``pages`` topic, keyed by host.

The pages are not items: the spider middleware (:mod:`crawler.middleware`) extracts one from
every HTML response and hands it to :meth:`KafkaPagePipeline.publish`; the spider's own items
pass through :meth:`~KafkaPagePipeline.process_item` unchanged, and none of the user's
pipelines or feeds ever sees a page. The producer lives in a pipeline for its lifecycle:
``open_spider`` runs before the first request, and a failure there stops the crawl (refused
credentials or TLS, with the settings to fix); ``close_spider`` runs after the last item, when
nothing more can be published.

Back-pressure: :meth:`~KafkaPagePipeline.publish` awaits room under
``NEARDUP_MAX_INFLIGHT_BYTES`` of unacknowledged messages before producing. While it waits, the
response stays in Scrapy's scraper slot, which makes the engine stop starting downloads: a slow
broker slows the crawl instead of filling memory.

Two signals tell other components about publication: :data:`page_publishing` right before the
message is produced (its decision cannot arrive earlier), and :data:`page_publish_failed` when
the broker never acknowledged it (no decision will come).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Self

from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred, succeed
from twisted.internet.threads import deferToThread

from crawler.session import NeardupSession
from dedup_worker.adapters.kafka import (
    DeliveryCallback,
    PagePublisher,
    check_access,
    ensure_topics,
)
from dedup_worker.contract.messages import Page
from dedup_worker.contract.reading import PageKey
from dedup_worker.errors import NeardupError

logger = logging.getLogger(__name__)

#: Sent with ``page=`` just before a page is produced.
page_publishing = object()
#: Sent with ``page=`` and ``error=`` when a page could not be delivered.
page_publish_failed = object()

FLUSH_TIMEOUT = 30.0


class KafkaPagePipeline:
    """Publishes the pages the spider middleware extracts; items pass through unchanged."""

    def __init__(self, crawler: Any, session: NeardupSession) -> None:
        self.crawler = crawler
        self.session = session
        self.config = session.config
        self.stats = crawler.stats
        self.publisher: PagePublisher | None = None

    @classmethod
    def from_crawler(cls, crawler: Any) -> Self:
        session = NeardupSession.of(crawler)
        if not session.config.publishing:
            raise NotConfigured("NEARDUP_KAFKA_BOOTSTRAP is not set: pages are not published")
        session.check_components()
        pipeline = cls(crawler, session)
        session.publisher = pipeline
        return pipeline

    async def open_spider(self) -> None:
        # Imported here: importing the reactor at module level would install the default one
        # before Scrapy installs the configured (asyncio) reactor.
        from twisted.internet import reactor

        config = self.config
        kafka = config.kafka()
        # Refused credentials or TLS stop the crawl here, with the settings to fix.
        await maybe_deferred_to_future(deferToThread(check_access, kafka))
        topics = [config.pages_topic, config.decisions_topic]
        await maybe_deferred_to_future(
            deferToThread(ensure_topics, kafka, topics, config.partitions)
        )
        self.publisher = await maybe_deferred_to_future(
            deferToThread(
                lambda: PagePublisher.connect(
                    kafka,
                    config.pages_topic,
                    max_inflight_bytes=config.max_inflight_bytes,
                    max_message_bytes=config.max_message_bytes,
                    call_from_thread=reactor.callFromThread,
                )
            )
        )
        logger.info("publishing pages to %s on %s", config.pages_topic, kafka.describe())

    def process_item(self, item: Any) -> Any:
        return item

    async def publish(self, page: Page) -> bool:
        """Produce ``page`` (waiting for room first) and register it with the link scheduler;
        False if it is not published (too large, or the publisher is closed)."""
        payload = page.to_json()
        if len(payload) > self.config.max_message_bytes:
            self.stats.inc_value("dedup/pages_too_large")
            logger.warning(
                "not publishing %s: %d bytes > NEARDUP_MAX_MESSAGE_BYTES", page.url, len(payload)
            )
            return False
        if self.publisher is None:
            return False
        await self._room(len(payload))
        publisher = self.publisher
        if publisher is None:  # closed while we waited
            return False
        key = self.session.links.published(page)
        self.crawler.signals.send_catch_log(page_publishing, page=page)
        publisher.send(page.host.encode("utf-8"), payload, self._on_delivery(page, key))
        self.stats.inc_value("dedup/pages_published")
        self.stats.inc_value("dedup/bytes_published", len(payload))
        return True

    async def _room(self, size: int) -> None:
        assert self.publisher is not None
        started = time.monotonic()
        await maybe_deferred_to_future(reserve(self.publisher, size))
        waited = time.monotonic() - started
        if waited > 0.001:
            self.stats.inc_value("dedup/publish_backpressure_waits")
            self.stats.inc_value("dedup/publish_backpressure_seconds", waited)

    def _on_delivery(self, page: Page, key: PageKey) -> DeliveryCallback:
        def done(error: NeardupError | None) -> None:
            if error is None:
                self.stats.inc_value("dedup/pages_acknowledged")
                return
            self.stats.inc_value("dedup/publish_errors")
            self.stats.inc_value(f"dedup/publish_errors/{type(error).__name__}")
            logger.error(
                "page %s was not delivered to %s: %s: %s (its requests go out undecided)",
                page.url,
                self.config.pages_topic,
                type(error).__name__,
                error,
            )
            self.session.links.publish_failed(key)
            self.crawler.signals.send_catch_log(page_publish_failed, page=page, error=error)

        return done

    async def close_spider(self) -> None:
        publisher, self.publisher = self.publisher, None
        if publisher is None:
            return
        unacked = publisher.inflight_count
        try:
            await maybe_deferred_to_future(deferToThread(publisher.flush, FLUSH_TIMEOUT))
        except NeardupError as exc:
            self.stats.inc_value("dedup/publish_flush_failed")
            logger.error("flushing %d unacknowledged pages failed: %s", unacked, exc)
        await maybe_deferred_to_future(deferToThread(publisher.close))
        logger.info("page publisher closed (%d pages were unacknowledged at close)", unacked)


def reserve(publisher: PagePublisher, size: int) -> Deferred[None]:
    """Fires once ``size`` bytes are granted under the publisher's in-flight bound."""
    granted: Deferred[None] = Deferred()
    if publisher.reserve(size, lambda: granted.callback(None)):
        return succeed(None)
    return granted
