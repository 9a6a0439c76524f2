"""Whether a followed request is in the crawl's scope: its depth and its domain.

The link scheduler (:mod:`crawler.links`) asks before it wants a request, and again to count
the requests it suppressed (only those in scope are fetches saved). The spider's attributes
(the neardup spider's ``-a max_depth=``) win over the settings, and the domains are Scrapy's
offsite rule (``allowed_domains``), cached per ``scheme://netloc``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from crawler.config import CrawlConfig
from crawler.frontier import Held, domain_allowed
from crawler.urls import host_of

#: Origins whose offsite answer is cached; past this the cache starts over.
ORIGIN_LIMIT = 100_000


class Scope:
    """Depth and domain of followed requests, for one crawler. Not thread-safe."""

    def __init__(self, crawler: Any, config: CrawlConfig) -> None:
        self.crawler = crawler
        self.config = config
        self._origins: dict[str, bool] = {}

    def keep(self, held: Iterable[Held], default_depth: int) -> list[Held]:
        """The requests in scope; the others are counted (``dedup/outlinks_too_deep``,
        ``dedup/outlinks_offsite``). A request without a depth in its meta is at
        ``default_depth``."""
        max_depth = spider_limit(getattr(self.crawler.spider, "max_depth", None),
                                 self.config.max_depth)  # fmt: skip
        stats = self.crawler.stats
        kept: list[Held] = []
        for item in held:
            request = item.request
            depth = int(request.meta.get("depth", default_depth))
            if max_depth is not None and depth > max_depth:
                stats.inc_value("dedup/outlinks_too_deep")
            elif not self.allowed(request):
                stats.inc_value("dedup/outlinks_offsite")
            else:
                kept.append(item)
        return kept

    def allowed(self, request: Any) -> bool:
        """Scrapy's offsite rule, cached per ``scheme://netloc``."""
        if request.dont_filter or request.meta.get("allow_offsite"):
            return True
        url = request.url
        end = url.find("/", url.find("//") + 2)
        origin = url if end < 0 else url[:end]
        allowed = self._origins.get(origin)
        if allowed is None:
            domains = tuple(getattr(self.crawler.spider, "allowed_domains", None) or ())
            allowed = domain_allowed(host_of(url), domains)
            if len(self._origins) >= ORIGIN_LIMIT:
                self._origins.clear()
            self._origins[origin] = allowed
        return allowed


def spider_limit(spider_value: int | None, setting: int | None) -> int | None:
    """A spider attribute (the neardup spider's ``-a max_pages=``) wins over the setting."""
    return spider_value if spider_value is not None else setting
