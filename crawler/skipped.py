"""Requests a URL rule skipped or a group dropped, kept so that they can be fetched back if the
rule turns out wrong (:mod:`crawler.rules.fetch_back` decides which). Pure: the caller sends them
(:meth:`crawler.links.LinkScheduler.fetch_back`).

Each is kept with whether the crawl's seen set holds it for this process (``claimed``): a
request skipped just before its fetch was claimed when it was scheduled, and is sent back past
the filter; one skipped before scheduling, or dropped with a group, never was, and another link
may have claimed and fetched it since: it must be claimed first, or it is fetched twice (seen in
held-out crawls: 123 of 191 group members fetched back had been fetched already)."""

from __future__ import annotations

from typing import Any

#: Requests kept at most (~0.6 KB each); past this the oldest is forgotten (only not fetched
#: back: a wipe of the whole cache forgot the skips of a young rule too).
SKIPPED_LIMIT = 100_000


class SkippedRequests:
    """Skipped requests by canonical URL, with whether they are claimed (a bounded cache)."""

    def __init__(self, limit: int = SKIPPED_LIMIT) -> None:
        self.limit = limit
        self._requests: dict[str, tuple[Any, bool]] = {}

    def add(self, url: str, request: Any, claimed: bool = False) -> tuple[Any, bool] | None:
        """Keep ``request``; past the limit the oldest is forgotten and returned (with whether
        it was claimed: the caller gives such a claim back, or nobody would ever fetch it)."""
        self._requests.pop(url, None)  # a skip again is the newest
        forgotten = None
        if len(self._requests) >= self.limit:
            forgotten = self._requests.pop(next(iter(self._requests)))  # the oldest
        self._requests[url] = (request, claimed)
        return forgotten

    def pop(self, url: str) -> tuple[Any, bool] | None:
        """The request and whether this process claimed it, or None if not kept."""
        return self._requests.pop(url, None)

    def __len__(self) -> int:
        return len(self._requests)
