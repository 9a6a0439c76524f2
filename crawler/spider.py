"""The ``neardup`` spider: fetch, extract, publish; never follow a link by itself.

Its callback turns an HTML response into a :class:`~dedup_worker.contract.messages.Page` item
(visible text, title, canonical outlinks, depth, requested vs final URL). Which outlinks get
fetched is decided by the dedup worker and applied by :mod:`crawler.scheduling`, which builds
its requests with :meth:`NeardupSpider.page_request`.

Arguments (``scrapy crawl neardup -a name=value``): ``seeds`` (comma/space separated URLs),
``seed_file`` (one URL per line), ``allowed_domains`` (default: the seeds' hosts),
``max_depth`` and ``max_pages`` (defaults: settings ``NEARDUP_MAX_DEPTH``/``NEARDUP_MAX_PAGES``,
empty means unlimited).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Self

import scrapy
from scrapy import signals
from scrapy.exceptions import IgnoreRequest, StopDownload

from crawler.config import ConfigError, optional_int, parse_domains, parse_seeds
from crawler.extract import DEFAULT_OPTIONS, ExtractOptions, extract
from crawler.urls import DEFAULT_DROP_PARAMS, host_of
from dedup_worker.contract.checksum import content_checksum
from dedup_worker.contract.messages import Page

logger = logging.getLogger(__name__)

#: ``Request.meta`` flag of the spider's own page requests (robots.txt requests lack it).
PAGE_META = "neardup_page"
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
SEED_PRIORITY = 10_000  # seeds go before any decision-scheduled link


class NeardupSpider(scrapy.Spider):
    name = "neardup"

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
        self.extract_options: ExtractOptions = DEFAULT_OPTIONS

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Self:
        spider: Self = super().from_crawler(crawler, *args, **kwargs)
        settings = crawler.settings
        if spider.max_depth is None:
            spider.max_depth = optional_int(settings.get("NEARDUP_MAX_DEPTH"), "NEARDUP_MAX_DEPTH")
        if spider.max_pages is None:
            spider.max_pages = optional_int(
                settings.get("NEARDUP_MAX_PAGES"), "NEARDUP_MAX_PAGES", minimum=1
            )
        spider.extract_options = ExtractOptions(
            include_alt_text=settings.getbool("NEARDUP_INCLUDE_ALT_TEXT", False),
            respect_nofollow=settings.getbool("NEARDUP_RESPECT_NOFOLLOW", True),
            drop_params=frozenset(settings.getlist("NEARDUP_DROP_PARAMS") or DEFAULT_DROP_PARAMS),
        )
        crawler.signals.connect(spider.headers_received, signal=signals.headers_received)
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

    def page_request(self, url: str, depth: int, priority: int, **meta: Any) -> scrapy.Request:
        """A page fetch whose response becomes a Page item (callbacks are spider methods, so
        requests survive JOBDIR serialisation)."""
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

    def parse(self, response: Any) -> Iterator[Page]:
        stats = self.crawler.stats
        if not is_html_type(response.headers.get(b"Content-Type"), response):
            stats.inc_value("dedup/non_html_skipped")
            return
        page = self.page_from(response)
        stats.inc_value("dedup/pages_fetched")
        stats.inc_value("dedup/html_bytes", len(response.body))
        yield page

    def page_from(self, response: Any) -> Page:
        content_type = response.headers.get(b"Content-Type") or b""
        declared = content_type.decode("latin-1") or None
        extracted = extract(response.body, response.url, declared, self.extract_options)
        redirects = response.request.meta.get("redirect_urls") or [response.url]
        return Page(
            url=response.url,
            host=host_of(response.url),
            fetched_at=time.time(),
            text=extracted.text,
            requested_url=redirects[0],
            status=response.status,
            content_type=declared or "text/html",
            title=extracted.title,
            outlinks=extracted.outlinks,
            depth=int(response.meta.get("depth", 0)),
            checksum=content_checksum(extracted.text),
        )

    def on_error(self, failure: Any) -> None:
        request = getattr(failure, "request", None)
        url = request.url if request is not None else "?"
        if failure.check(IgnoreRequest):  # robots.txt, offsite, cancelled: not a failure
            self.crawler.stats.inc_value("dedup/requests_ignored")
            self.logger.debug("not fetched: %s: %s", url, failure.getErrorMessage())
            return
        self.crawler.stats.inc_value("dedup/fetch_errors")
        self.logger.info("fetch failed: %s: %s", url, failure.getErrorMessage())


def is_html_type(content_type: bytes | None, response: Any = None) -> bool:
    """True for an HTML media type; with no Content-Type, whatever Scrapy sniffed."""
    if not content_type:
        return response is None or isinstance(response, scrapy.http.HtmlResponse)
    media = content_type.split(b";", 1)[0].strip().lower().decode("latin-1")
    return media in HTML_TYPES
