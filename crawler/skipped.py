"""Requests a URL rule skipped, kept so that they can be fetched back if the rule turns out wrong
(:mod:`crawler.rules.fetch_back` decides which). Pure: the caller sends them
(:meth:`crawler.links.LinkScheduler.fetch_back`)."""

from __future__ import annotations

from typing import Any

#: Requests kept at most (~0.6 KB each); past this the cache starts over, and a request it
#: forgot is only not fetched back.
SKIPPED_LIMIT = 100_000


class SkippedRequests:
    """Skipped requests by canonical URL (a bounded cache)."""

    def __init__(self, limit: int = SKIPPED_LIMIT) -> None:
        self.limit = limit
        self._requests: dict[str, Any] = {}

    def add(self, url: str, request: Any) -> None:
        if len(self._requests) >= self.limit:
            self._requests.clear()
        self._requests[url] = request

    def pop(self, url: str) -> Any | None:
        return self._requests.pop(url, None)

    def __len__(self) -> int:
        return len(self._requests)
