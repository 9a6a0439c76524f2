"""The ``max_pages`` budget of one crawler process (pure: no Scrapy, Kafka or Redis here).

A released link takes a place as it is scheduled; the ``neardup`` spider's seeds hold theirs
from the start. A link that never goes out (skipped by a URL rule just before its fetch,
cancelled, refused by Scrapy's scheduler) gives its place back, so the budget counts requests
sent, not requests planned. Links over the budget are dropped, or with ``JOBDIR`` kept for a
resume (``deferred``); the first of those kept takes a place given back.

With two seed hosts or more the budget is shared out: each seed host's share is ``limit //
hosts``, and a link of a host past its share waits (``held``) rather than take a place another
seed host has not used of its share yet. The crawl's first idle moment (no host has anything
left to fetch) sends what waits out, first come first served, into the places still free:
nothing waits for a host that will never use its share. Before, one host's release copies,
scheduled while another host's contents page waited for its decision, could take the whole
budget: the click fixture at 50 pages missed 16 unique pages in some crawls and 69-70 in
others, the other host getting one page. Links of hosts that are not seeds take only
unreserved places. A resumed ``JOBDIR`` crawl counts the hosts' places from its restart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from crawler.rules.rewrite import split_url
from crawler.urls import canonicalize_url


def origin_of(url: str) -> str:
    """The origin a URL's place is counted against (canonical: ``http://a.example:81``)."""
    return split_url(canonicalize_url(url))[0]


class PageBudget:
    """Places taken and given back against a limit read when asked (None: no budget)."""

    def __init__(self, limit: Callable[[], int | None]) -> None:
        self.limit = limit
        self.spent = 0  # places taken (seeds of the neardup spider included)
        self.deferred: list[Any] = []  # requests over the budget, kept for a resume
        self.keep_deferred = False  # with JOBDIR: requests over the budget wait for a resume
        self.hosts: frozenset[str] = frozenset()  # the seeds' origins, which share the budget
        self.by_host: Counter[str] = Counter()  # places taken by each origin in this run
        self.held: list[tuple[str, Any]] = []  # (origin, request) past the host's share

    def share_out(self, seed_origins: Iterable[str]) -> None:
        """Share the budget between the seeds' origins; each seed holds a place already."""
        origins = list(seed_origins)
        self.hosts = frozenset(origins)
        self.by_host = Counter(origins)

    def take(self, origin: str | None = None) -> bool:
        limit = self.limit()
        if limit is not None and self.spent >= limit:
            return False
        self.spent += 1
        if origin is not None:
            self.by_host[origin] += 1
        return True

    def over_share(self, origin: str) -> bool:
        """Whether a place for ``origin`` would be one another seed host has not used of its
        share yet (so the request should wait, :attr:`held`)."""
        limit = self.limit()
        if limit is None or len(self.hosts) < 2:
            return False
        share = limit // len(self.hosts)
        if origin in self.hosts and self.by_host[origin] < share:
            return False
        unused = sum(max(0, share - self.by_host[h]) for h in self.hosts if h != origin)
        return unused > 0 and limit - self.spent <= unused

    def release_held(self) -> list[tuple[str, Any]]:
        """The requests that waited past their host's share, oldest first: the crawl is idle,
        so no host will use its share now; each still needs a place (:meth:`take`)."""
        held, self.held = self.held, []
        return held

    def give_back(self, to_deferred: bool = True, origin: str | None = None) -> Any | None:
        """A place comes back: the deferred request that takes it (``to_deferred``), if any."""
        self.spent -= 1
        if origin is not None and self.by_host[origin] > 0:
            self.by_host[origin] -= 1
        if to_deferred and self.deferred and self.take():
            return self.deferred.pop(0)
        return None
