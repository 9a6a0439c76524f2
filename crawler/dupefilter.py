"""Scrapy ``DUPEFILTER_CLASS`` of neardup: the crawl's shared URL-seen set.

As in scrapy-redis, every crawler process of a crawl (same ``NEARDUP_CRAWL_ID``) filters against
one set in Redis (``NEARDUP_REDIS_URL``; in process memory without it), and a stopped crawl
resumes with it. Requests released by a decision were claimed a moment before, in one round trip
for the batch (:mod:`crawler.links`); the filter then finds them in the local ``preclaimed`` set
instead of asking Redis a second time. Works without Kafka too (a shared seen filter only).
"""

from __future__ import annotations

import logging
from typing import Any, Self

from crawler.seen import CLAIMED_META
from crawler.session import NeardupSession

logger = logging.getLogger(__name__)


class SeenFilter:
    """Scrapy ``DUPEFILTER_CLASS`` backed by the crawl's shared seen set."""

    def __init__(self, crawler: Any, session: NeardupSession, debug: bool = False) -> None:
        self.crawler = crawler
        self.session = session
        self.debug = debug
        self._logged = False

    @classmethod
    def from_crawler(cls, crawler: Any) -> Self:
        return cls(
            crawler, NeardupSession.of(crawler), crawler.settings.getbool("DUPEFILTER_DEBUG")
        )

    def open(self) -> None:
        self.session.seen()  # connect early: a bad NEARDUP_REDIS_URL fails at start-up

    def close(self, reason: str) -> None:
        pass  # the set outlives the scheduler: the extension counts suppressed links after

    def request_seen(self, request: Any) -> bool:
        seen = self.session.seen()
        if request.meta.pop(CLAIMED_META, False):  # claimed by this crawl already: once
            seen.used(request.url, request.method, request.body)
            return False
        journaled = self.session.links.journal_entry(request)
        filtered = seen.request_seen(request.url, request.method, request.body, journaled)
        if filtered and request.meta.get("redirect_urls"):
            # A redirect to a URL claimed already: its claimant fetches it, so the URLs that
            # led here will be no page of this process's (they leave its journal).
            self.session.links.redirect_filtered(request)
        return filtered

    def log(self, request: Any, spider: Any) -> None:
        if self.debug or not self._logged:
            logger.debug("filtered already-seen request %s", request)
            self._logged = not self.debug
        self.crawler.stats.inc_value("dupefilter/filtered")
