"""Requests whose download failed for a passing reason, kept for the spider's close (pure).

A page whose fetch fails after Scrapy's retries (a timeout, a refused connection, a DNS error,
or a status Scrapy retries, ``RETRY_HTTP_CODES``: 503, 429, ...) stays claimed in the crawl's
seen set while the crawl runs, so the next link to it does not fetch it again (a dead host
linked from every page would cost a failed fetch per page). It used to stay claimed for good,
and a later run of the crawl id never tried it again: a unique page lost to a passing failure.
At the close the spider leaves these requests where a later run fetches them
(:meth:`crawler.links_out.LinksOut.leave_failed`), each as a fresh request (:func:`afresh`).
"""

from __future__ import annotations

from typing import Any

#: Requests kept at most; past this the oldest is forgotten (it stays claimed, as before).
FAILED_LIMIT = 10_000

#: ``Request.meta`` keys of one try (Scrapy's retries, redirects and timings): a request tried
#: again in a later run starts without them.
ONE_TRY_META = frozenset(
    {
        "retry_times",
        "redirect_times",
        "redirect_ttl",
        "redirect_urls",
        "redirect_reasons",
        "download_latency",
        "download_timeout",
    }
)


class FailedFetches:
    """Failed requests by URL, oldest first (a bounded list)."""

    def __init__(self, limit: int = FAILED_LIMIT) -> None:
        self.limit = limit
        self._requests: dict[str, Any] = {}

    def add(self, request: Any) -> None:
        self._requests.pop(request.url, None)
        if len(self._requests) >= self.limit:
            del self._requests[next(iter(self._requests))]
        self._requests[request.url] = request

    def oldest(self) -> Any | None:
        """The oldest request kept (None: none); it stays kept until :meth:`forget`."""
        return next(iter(self._requests.values()), None)

    def forget(self, request: Any) -> None:
        self._requests.pop(request.url, None)

    def take(self) -> list[Any]:
        """Every request kept, oldest first, and forget them."""
        requests, self._requests = list(self._requests.values()), {}
        return requests

    def __len__(self) -> int:
        return len(self._requests)


def afresh(
    request: Any, drop: frozenset[str] = frozenset(), priority_adjust: int = -1, **meta: Any
) -> Any:
    """A copy of ``request`` for another try, as its first try went out: without the meta of
    its last one (and ``drop``), with ``meta`` added, filtered (a retry sets ``dont_filter``,
    and a redirect copies it), and at its priority before the retries lowered it (Scrapy's
    ``RETRY_PRIORITY_ADJUST`` once per retry)."""
    kept = {k: v for k, v in request.meta.items() if k not in ONE_TRY_META and k not in drop}
    priority = request.priority - int(request.meta.get("retry_times", 0)) * priority_adjust
    return request.replace(meta={**kept, **meta}, dont_filter=False, priority=priority)
