"""The spider middleware and the spider's callback on in-memory responses: what a page carries,
what is skipped, which requests the ``neardup`` spider yields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from scrapy.exceptions import IgnoreRequest, StopDownload
from scrapy.http import HtmlResponse, Request, Response, TextResponse
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.test import get_crawler
from twisted.internet.defer import CancelledError
from twisted.internet.error import DNSLookupError
from twisted.python.failure import Failure

from crawler.middleware import NeardupSpiderMiddleware
from crawler.seen import CrawlSeen, MemorySeenStore
from crawler.session import NeardupSession
from crawler.spider import PAGE_META, NeardupSpider
from dedup_worker.contract.checksum import content_checksum
from dedup_worker.contract.reading import PageKey

HTML = (
    b"<html><head><title>T</title></head><body><p>Hello <b>world</b></p>"
    b'<a href="/next#frag">n</a><a href="https://other.test/?utm_source=x">o</a></body></html>'
)


def spider(**kwargs: Any) -> NeardupSpider:
    crawler = get_crawler(NeardupSpider, {"NEARDUP_MAX_DEPTH": "4"})
    result: NeardupSpider = crawler._create_spider(seeds="http://a.test/", **kwargs)
    crawler.spider = result
    crawler.stats.open_spider()
    return result


def middleware(s: NeardupSpider) -> NeardupSpiderMiddleware:
    """The middleware as Scrapy builds it with Kafka configured (built directly: without
    NEARDUP_KAFKA_BOOTSTRAP its from_crawler says NotConfigured)."""
    return NeardupSpiderMiddleware(s.crawler, NeardupSession.of(s.crawler))


def response(
    url: str,
    body: bytes,
    content_type: bytes = b"text/html; charset=utf-8",
    meta: dict[str, Any] | None = None,
    cls: type[Response] = HtmlResponse,
) -> Response:
    request = Request(url, meta={PAGE_META: True, "depth": 2, **(meta or {})})
    return cls(url, body=body, headers={"Content-Type": content_type}, request=request)


def test_a_page_carries_text_links_depth_and_the_requested_url() -> None:
    s = spider()
    meta = {"redirect_urls": ["http://a.test/old"]}
    fetched = response("http://a.test/new", HTML, meta=meta)
    middleware(s).process_spider_input(fetched)
    page = NeardupSession.of(s.crawler).page_of(fetched)
    assert page is not None
    assert (page.url, page.requested_url, page.host) == (
        "http://a.test/new",
        "http://a.test/old",
        "a.test",
    )
    assert (page.title, page.text, page.depth, page.status) == ("T", "Hello world\nno", 2, 200)
    assert page.outlinks == ("http://a.test/next", "https://other.test/")
    assert page.checksum == content_checksum(page.text)
    assert page.content_type == "text/html; charset=utf-8"
    # The spider yields one request per outlink, one level deeper, back to its own callback.
    requests = list(s.parse(fetched))
    assert [(r.url, r.meta["depth"], r.callback) for r in requests] == [
        ("http://a.test/next", 3, s.parse),
        ("https://other.test/", 3, s.parse),
    ]
    assert s.crawler.stats.get_value("dedup/pages_fetched") == 1


def test_non_html_is_skipped_and_counted() -> None:
    s = spider()
    mw = middleware(s)
    pdf = response("http://a.test/r.pdf", b"%PDF", b"application/pdf", cls=Response)
    text = response("http://a.test/r.txt", b"hi", b"text/plain", cls=TextResponse)
    for fetched in (pdf, text):
        mw.process_spider_input(fetched)
    assert list(s.parse(pdf)) == [] and list(s.parse(text)) == []
    assert s.crawler.stats.get_value("dedup/non_html_skipped") == 2


def test_non_html_downloads_stop_at_the_headers() -> None:
    s = spider()
    request = Request("http://a.test/big.zip", meta={PAGE_META: True})
    with pytest.raises(StopDownload):
        s.headers_received({b"Content-Type": b"application/zip"}, 10**9, request, s)
    s.headers_received({b"Content-Type": b"text/html"}, 10, request, s)
    robots = Request("http://a.test/robots.txt")  # not a page request: left alone
    s.headers_received({b"Content-Type": b"text/plain"}, 10, robots, s)


def test_arguments_settings_and_defaults() -> None:
    s = spider(allowed_domains="a.test,b.test", max_pages="50")
    assert (s.allowed_domains, s.max_depth, s.max_pages) == (["a.test", "b.test"], 4, 50)
    start = s.page_request("http://a.test/x", depth=3, priority=7)
    assert (start.meta["depth"], start.priority, start.callback) == (3, 7, s.parse)


def test_no_seeds_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no seeds"):
        get_crawler(NeardupSpider)._create_spider()


def _failure(exc: Exception, request: Request) -> Any:
    failure = Failure(exc)
    failure.request = request  # type: ignore[attr-defined]  # as Scrapy sets it
    return failure


def test_a_download_that_failed_for_a_passing_reason_is_kept_for_a_later_run() -> None:
    """An error or a status Scrapy retries (RETRY_EXCEPTIONS, RETRY_HTTP_CODES) once its
    retries gave up; not a 404, a body over DOWNLOAD_MAXSIZE, or a request refused before it
    was sent."""
    s = spider()
    links = NeardupSession.of(s.crawler).links

    def status(url: str, code: int) -> Any:
        request = Request(url)
        return _failure(HttpError(Response(url, status=code, request=request)), request)

    s.on_error(status("http://a.test/busy", 503))
    s.on_error(status("http://a.test/gone", 404))
    s.on_error(_failure(DNSLookupError("b.test"), Request("http://b.test/")))
    s.on_error(_failure(IgnoreRequest("Forbidden by robots.txt"), Request("http://a.test/p")))
    s.on_error(_failure(CancelledError("over DOWNLOAD_MAXSIZE"), Request("http://a.test/big")))
    assert [r.url for r in links.failed.take()] == ["http://a.test/busy", "http://b.test/"]
    assert s.crawler.stats.get_value("dedup/fetch_errors") == 2
    assert s.crawler.stats.get_value("dedup/requests_ignored") == 3
    assert s.crawler.stats.get_value("dedup/requests_http_error") == 2  # the 503 and the 404


class SettledStore(MemorySeenStore):
    """The seen set, keeping what each claim reports settled (out of the journal)."""

    def __init__(self) -> None:
        super().__init__()
        self.settled: list[bytes] = []

    def claim_many(
        self,
        fingerprints: Sequence[bytes],
        done: Sequence[bytes],
        requests: Mapping[bytes, bytes] | None = None,
        settled: Sequence[bytes] = (),
    ) -> list[bool]:
        self.settled += settled
        return super().claim_many(fingerprints, done, requests, settled)


def test_a_request_that_ends_without_a_page_leaves_the_journal_with_its_redirects() -> None:
    """A 404, a body that is not HTML, and the URLs that redirected to a page will never be
    pages: they leave the journal (a kill used to leave them to be fetched again for nothing),
    the redirects with their page's decision. A passing failure stays (a later run tries it
    again), and so does a page until decided."""
    s = spider()
    session = NeardupSession.of(s.crawler)
    store = SettledStore()
    session._seen = seen = CrawlSeen(store)

    def status(url: str, code: int, **meta: Any) -> Any:
        request = Request(url, meta=meta)
        return _failure(HttpError(Response(url, status=code, request=request)), request)

    s.on_error(status("http://a.test/gone", 404, redirect_urls=["http://a.test/moved"]))
    s.on_error(status("http://a.test/busy", 503))
    pdf = response("http://a.test/r.pdf", b"%PDF", b"application/pdf", cls=Response)
    page = response("http://a.test/new", HTML, meta={"redirect_urls": ["http://a.test/old"]})
    for fetched in (pdf, page):
        middleware(s).process_spider_input(fetched)
        list(s.parse(fetched))
    seen.flush()
    urls = ["http://a.test/moved", "http://a.test/gone", "http://a.test/r.pdf"]
    assert store.settled == [seen.fingerprint(url) for url in urls]
    # The page's redirect leaves with the page's decision, not before: the page itself may not
    # be journaled (a retry's redirect passes the filter unclaimed).
    session.links.settle_page(PageKey("http://a.test/new", 1.0))
    seen.flush()
    urls += ["http://a.test/new", "http://a.test/old"]
    assert store.settled == [seen.fingerprint(url) for url in urls]
