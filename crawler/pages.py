"""A fetched response as a :class:`~dedup_worker.contract.messages.Page` message.

What the spider middleware (:mod:`crawler.middleware`) publishes for every HTML response of any
spider: the visible text, title and canonical outlinks from the configured extractor
(:mod:`crawler.extractors`), the requested and final URLs, the depth and the content checksum.
"""

from __future__ import annotations

import time
from typing import Any

from scrapy.http import HtmlResponse

from crawler.extract import ExtractOptions
from crawler.extractors import Extractor
from crawler.urls import host_of
from dedup_worker.contract.messages import Page
from dedup_worker.core.text import content_checksum

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def is_html_type(content_type: bytes | None, response: Any = None) -> bool:
    """True for an HTML media type; with no Content-Type, whatever Scrapy sniffed."""
    if not content_type:
        return response is None or isinstance(response, HtmlResponse)
    media = content_type.split(b";", 1)[0].strip().lower().decode("latin-1")
    return media in HTML_TYPES


def is_html(response: Any) -> bool:
    return is_html_type(response.headers.get(b"Content-Type"), response)


def page_from(response: Any, extractor: Extractor, options: ExtractOptions) -> Page:
    """The page message of an HTML response (the extractor may raise: the caller decides)."""
    content_type = response.headers.get(b"Content-Type") or b""
    declared = content_type.decode("latin-1") or None
    extracted = extractor(response.body, response.url, declared, options)
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
        outlinks=tuple(extracted.outlinks),
        depth=int(response.meta.get("depth", 0)),
        checksum=content_checksum(extracted.text),
    )
