"""Fetching a queued link ahead of its turn, so that another request need not be fetched.

When a request is about to go out and an active URL rule maps it onto a page this process has
queued but not fetched (a shop's ``/p/17.html?ref=also`` going out while ``/p/17.html`` waits
at a low priority), fetching the request first costs a fetch and leaves the queued page to be
fetched later anyway: two fetches for one content. Fetching the queued page instead, ahead of
its turn, and holding the request until that page's decision arrives lets the rule skip it:
one fetch. Nothing is lost: the held request is re-judged on the decision (fetched if the rule
does not skip it, or if no decision comes, as every held request is after its expiry), and
the queued page was going to be fetched anyway.

:class:`Queued` keeps the queued requests by canonical URL (a bounded cache: a forgotten one
is only not fetched ahead) and the URLs fetched ahead, whose original request is dropped when
it leaves the scheduler. Pure: the caller sends the request (:mod:`crawler.links`).
"""

from __future__ import annotations

from typing import Any

#: ``Request.meta`` flag of a request sent ahead of its turn.
AHEAD_META = "neardup_ahead"
#: Queued requests remembered at most (each one a reference to a request in the scheduler).
QUEUED_LIMIT = 200_000


class Queued:
    """Requests waiting in this process's scheduler, and the URLs sent ahead of them."""

    def __init__(self, limit: int = QUEUED_LIMIT) -> None:
        self.limit = limit
        self._requests: dict[str, Any] = {}
        self._ahead: set[str] = set()

    def add(self, url: str, request: Any) -> None:
        """Canonical ``url``'s ``request`` entered the scheduler."""
        if len(self._requests) >= self.limit:
            self._requests.clear()
        self._requests[url] = request

    def get(self, url: str) -> Any | None:
        """The queued request of canonical ``url``, if one is known."""
        return self._requests.get(url)

    def sent_ahead(self, url: str) -> None:
        """``url``'s request was sent ahead of its turn: its queued original is dropped when it
        leaves the scheduler."""
        self._requests.pop(url, None)
        self._mark(url)

    def leaving(self, url: str, request: Any) -> bool:
        """A request of ``url`` leaves the scheduler: False if it is the original of one sent
        ahead (drop it: its URL was fetched already)."""
        self._requests.pop(url, None)
        if request.meta.get(AHEAD_META):
            # Marked again: after a JOBDIR resume both requests are in the queue and this
            # process never sent this one; it leaves first (its priority), its original after.
            self._mark(url)
            return True
        if url in self._ahead:
            self._ahead.discard(url)
            return False
        return True

    def _mark(self, url: str) -> None:
        if len(self._ahead) >= self.limit:
            self._ahead.clear()
        self._ahead.add(url)

    def discard(self, url: str) -> None:
        """The scheduler refused ``url``'s request, or it was dropped on the way out."""
        self._requests.pop(url, None)

    def waiting(self) -> list[Any]:
        """The requests still in the scheduler (as far as this bounded cache knows)."""
        return list(self._requests.values())

    def __len__(self) -> int:
        return len(self._requests)
