"""Spider middleware of neardup: any spider's HTML responses published, their requests held.

For every HTML response that reaches the spider's callback (``process_spider_input`` runs after
Scrapy's ``HttpErrorMiddleware``, order 50):

1. the page is extracted before the callback runs (``NEARDUP_EXTRACTOR``; the callback may read
   it with ``NeardupSession.of(crawler).page_of(response)``): visible text, title, canonical
   outlinks, checksum. An extractor that raises is logged with the URL and counted
   (``dedup/extract_errors``); that page is not published and its requests go out undecided;
2. the page is published to ``pages`` (through :class:`~crawler.pipelines.KafkaPagePipeline`);
3. every request the callback yields (plain callbacks, ``CrawlSpider`` rules, ``response.follow``)
   is held until the page's decision (:class:`~crawler.links.LinkScheduler`): released for a
   new page, dropped for a duplicate; items pass through unchanged, or, with
   ``NEARDUP_ITEM_VERDICT``, once the decision is in, with the page's verdict in their
   ``neardup_verdict`` field (dict items, and items that declare the field).

Responses that are not HTML (feeds, sitemaps, JSON, files) are not published; their output
passes through untouched. Start requests go out as the spider makes them; those Scrapy does not
filter (``dont_filter``, the default of ``start_urls``) are claimed in the crawl's seen set all
the same, so a page linking back to a start URL does not fetch it again.

Order 100 in ``SPIDER_MIDDLEWARES``: after ``HttpErrorMiddleware`` on the way in, after
``DepthMiddleware`` (900), ``UrlLengthMiddleware`` and ``RefererMiddleware`` on the way out, so
held requests carry their depth and were length-checked.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, Self

from itemadapter import ItemAdapter
from scrapy import Request
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import maybe_deferred_to_future

from crawler.pages import is_html, page_from
from crawler.session import NeardupSession
from dedup_worker.contract.reading import PageKey

logger = logging.getLogger(__name__)

#: The field ``NEARDUP_ITEM_VERDICT`` sets on items.
VERDICT_FIELD = "neardup_verdict"


class NeardupSpiderMiddleware:
    """``SPIDER_MIDDLEWARES`` entry (see the module docstring)."""

    def __init__(self, crawler: Any, session: NeardupSession) -> None:
        self.crawler = crawler
        self.session = session
        self.stats = crawler.stats
        self.links = session.links

    @classmethod
    def from_crawler(cls, crawler: Any) -> Self:
        session = NeardupSession.of(crawler)
        if not session.config.publishing:
            raise NotConfigured("NEARDUP_KAFKA_BOOTSTRAP is not set: pages are not published")
        session.check_components()
        return cls(crawler, session)

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for output in start:
            if isinstance(output, Request) and output.dont_filter:
                self.session.seen().request_seen(output.url, output.method, output.body)
            yield output

    def process_spider_input(self, response: Any) -> None:
        if not is_html(response):
            self.stats.inc_value("dedup/non_html_skipped")
            return
        config = self.session.config
        try:
            page = page_from(response, self.session.extractor, config.extract_options)
        except Exception as exc:  # the page's problem, not the crawl's
            self.stats.inc_value("dedup/extract_errors")
            logger.error(
                "extracting %s with NEARDUP_EXTRACTOR=%s failed, the page is not published: %s: %s",
                response.url,
                config.extractor,
                type(exc).__name__,
                exc,
                exc_info=logger.isEnabledFor(logging.DEBUG),
            )
            return
        self.stats.inc_value("dedup/pages_fetched")
        self.stats.inc_value("dedup/html_bytes", len(response.body))
        self.session.remember_page(response, page)

    async def process_spider_output(
        self, response: Any, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        page = self.session.page_of(response)
        publisher = self.session.publisher
        if page is None or publisher is None or not await publisher.publish(page):
            async for output in result:
                yield output
            return
        key = PageKey(page.url, page.fetched_at)
        waiting: list[Any] = []
        try:
            async for output in result:
                if isinstance(output, Request):
                    if not self.links.hold(key, output):
                        yield output  # the page's publication failed: undecided, let it go
                elif self.session.config.item_verdict:
                    waiting.append(output)
                else:
                    yield output
        finally:
            self.links.close(key)
        if waiting:
            verdict = await maybe_deferred_to_future(self.links.verdicts.of(key))
            for item in waiting:
                yield with_verdict(item, verdict)


def with_verdict(item: Any, verdict: str | None) -> Any:
    """``item`` with ``neardup_verdict`` set if it is a dict or declares the field; other
    items unchanged."""
    if not ItemAdapter.is_item(item):
        return item
    adapter = ItemAdapter(item)
    if isinstance(item, dict) or VERDICT_FIELD in adapter.field_names():
        adapter[VERDICT_FIELD] = verdict
    return item
