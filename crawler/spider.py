"""The ``neardup`` spider: seeds in, every outlink of every page yielded, nothing else.

It is a thin user of the components any Scrapy project adds (README, "Add neardup to your Scrapy
project"): the spider middleware extracts and publishes each HTML response and holds the
requests this callback yields until the page's decision; the link scheduler releases them for
a new page and drops them for a duplicate. The callback yields one request per canonical outlink
of the page, as the middleware extracted it (:meth:`NeardupSession.page_of`), except those the
crawl is known to have claimed already (:meth:`LinkScheduler.unclaimed`: a site's navigation
links, repeated on every page, would cost a request object each only to be filtered).

Arguments (``scrapy crawl neardup -a name=value``): ``seeds`` (comma/space separated URLs),
``seed_file`` (one URL per line), ``allowed_domains`` (default: the seeds' hosts),
``max_depth`` and ``max_pages`` (defaults: settings ``NEARDUP_MAX_DEPTH``/``NEARDUP_MAX_PAGES``,
empty means unlimited).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any, Self

import scrapy
from scrapy import signals
from scrapy.exceptions import IgnoreRequest, StopDownload
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.misc import load_object

from crawler.config import ConfigError, optional_int, parse_domains, parse_seeds
from crawler.pages import is_html_type
from crawler.session import NeardupSession

logger = logging.getLogger(__name__)

#: ``Request.meta`` flag of the spider's own page requests (robots.txt requests lack it).
PAGE_META = "neardup_page"
SEED_PRIORITY = 10_000  # seeds go before any decision-scheduled link


class NeardupSpider(scrapy.Spider):
    name = "neardup"
    #: HTTP statuses of a passing failure (Scrapy's ``RETRY_HTTP_CODES``), read at start-up.
    _passing: frozenset[int] = frozenset()
    #: Errors of a passing failure (Scrapy's ``RETRY_EXCEPTIONS``: timeouts, refused
    #: connections, DNS, ...); not a body over ``DOWNLOAD_MAXSIZE`` or an unsupported scheme.
    _passing_errors: tuple[type[BaseException], ...] = ()

    def __init__(
        self,
        seeds: str | list[str] | None = None,
        seed_file: str | None = None,
        allowed_domains: str | list[str] | None = None,
        max_depth: str | int | None = None,
        max_pages: str | int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.seeds = parse_seeds(seeds, seed_file)
        if not self.seeds:
            raise ConfigError("no seeds: pass -a seeds=URL[,URL...] or -a seed_file=PATH")
        self.allowed_domains = parse_domains(allowed_domains, self.seeds)
        self.max_depth = optional_int(max_depth, "max_depth")
        self.max_pages = optional_int(max_pages, "max_pages", minimum=1)

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Self:
        spider: Self = super().from_crawler(crawler, *args, **kwargs)
        config = NeardupSession.of(crawler).config
        if spider.max_depth is None:
            spider.max_depth = config.max_depth
        if spider.max_pages is None:
            spider.max_pages = config.max_pages
        crawler.signals.connect(spider.headers_received, signal=signals.headers_received)
        passing = crawler.settings.getlist("RETRY_HTTP_CODES")
        spider._passing = frozenset(int(code) for code in passing)
        spider._passing_errors = tuple(
            load_object(e) if isinstance(e, str) else e
            for e in crawler.settings.getlist("RETRY_EXCEPTIONS")
        )
        spider.logger.info(
            "seeds %s, allowed domains %s, max depth %s, max pages %s",
            spider.seeds,
            spider.allowed_domains,
            spider.max_depth,
            spider.max_pages,
        )
        return spider

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for url in self.seeds:
            yield self.page_request(url, depth=0, priority=SEED_PRIORITY)

    def page_request(self, url: str, depth: int, priority: int = 0, **meta: Any) -> scrapy.Request:
        """A page fetch (callbacks are spider methods, so requests survive JOBDIR
        serialisation)."""
        return scrapy.Request(
            url,
            callback=self.parse,
            errback=self.on_error,
            priority=priority,
            meta={"depth": depth, PAGE_META: True, **meta},
        )

    def headers_received(self, headers: Any, body_length: int, request: Any, spider: Any) -> None:
        """Stop downloading a non-HTML body as soon as its headers say what it is."""
        if request.meta.get(PAGE_META) and not is_html_type(headers.get(b"Content-Type")):
            raise StopDownload(fail=False)

    def parse(self, response: Any) -> Iterator[scrapy.Request]:
        session = NeardupSession.of(self.crawler)
        page = session.page_of(response)
        if page is None:  # not HTML, or its extraction failed (both counted)
            session.links.never_a_page(response.request)
            return
        session.links.redirected(response.request)
        for url in session.links.unclaimed(page.outlinks):
            yield self.page_request(url, page.depth + 1)

    def on_error(self, failure: Any) -> None:
        request = getattr(failure, "request", None)
        url = request.url if request is not None else "?"
        links = NeardupSession.of(self.crawler).links
        if failure.check(HttpError):  # an HTTP status (after Scrapy's retries, if it retries it)
            self.crawler.stats.inc_value("dedup/requests_ignored")
            # Sent, so it spent a budget place and brought no page (a dead link's 404)
            self.crawler.stats.inc_value("dedup/requests_http_error")
            if request is not None and failure.value.response.status in self._passing:
                links.fetch_failed(request)  # 503, 429, ...: a later run tries it again
            elif request is not None:
                links.never_a_page(request)
            self.logger.debug("not fetched: %s: %s", url, failure.getErrorMessage())
            return
        if failure.check(IgnoreRequest):  # robots.txt, offsite, cancelled: not a failure
            self.crawler.stats.inc_value("dedup/requests_ignored")
            if request is not None:  # refused before it was sent: its budget place comes back
                links.refused(request)
            self.logger.debug("not fetched: %s: %s", url, failure.getErrorMessage())
            return
        if request is not None and failure.check(*self._passing_errors):  # maybe passing
            links.fetch_failed(request)
        self.crawler.stats.inc_value("dedup/fetch_errors")
        self.logger.info("fetch failed: %s: %s", url, failure.getErrorMessage())
