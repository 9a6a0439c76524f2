"""The ``max_pages`` budget of one crawler process (pure: no Scrapy, Kafka or Redis here).

A released link takes a place as it is scheduled; the ``neardup`` spider's seeds hold theirs
from the start. A link that never goes out (skipped by a URL rule just before its fetch,
cancelled, refused by Scrapy's scheduler) gives its place back, so the budget counts requests
sent, not requests planned. Links over the budget are dropped, or with ``JOBDIR`` kept for a
resume (``deferred``); the first of those kept takes a place given back.

A link the gate calls a likely duplicate (a candidate URL rule with no failed check, or before
any rule the same page in a sibling release, maps it onto a page fetched or queued in this
process: ``RequestGate.likely_duplicate``, :mod:`crawler.rules.likely`) does not take a place
when it is released: it ``waits`` until the crawl is idle. Then what waits goes out, oldest
first, each asking the gate again (a rule that became active meanwhile skips its pages) and
taking a place while there are any. Each place so buys first the pages the crawl knows least
about. A budgeted crawl used to spend a third to half of its fetches on the copies that teach a
young rule (a release and its ``/latest/`` alias reached together), a unique page lost for
each; measured on the held-out sites at half their size, unique pages missed fell from 487-514
to 166-262. Without a budget nothing waits: those fetches are the rule's checks.

Without ``JOBDIR`` the first ``STANDBY`` requests over the budget stay claimed, *standing by*:
places given back after the last link came (a rule skipped a page just before its fetch) go
to them when the crawl is idle, instead of staying empty; at the close they are un-claimed. A
place given back while links still come goes to the next link, as before (handing it to the
oldest request over the budget at once measured worse on the generated demo site).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Requests over the budget a crawl without ``JOBDIR`` keeps for places given back.
STANDBY = 100


class PageBudget:
    """Places taken and given back against a limit read when asked (None: no budget)."""

    def __init__(self, limit: Callable[[], int | None]) -> None:
        self.limit = limit
        self.spent = 0  # places taken (seeds of the neardup spider included)
        self.deferred: list[Any] = []  # requests over the budget, kept for a resume
        self.keep_deferred = False  # with JOBDIR: requests over the budget wait for a resume
        self.waiting: list[Any] = []  # likely duplicates, claimed, waiting for the idle moment
        #: Without JOBDIR, the first requests over the budget (claimed, at most STANDBY): places
        #: still free when the crawl is idle go to them.
        self.standby: list[Any] = []

    def take(self) -> bool:
        limit = self.limit()
        if limit is not None and self.spent >= limit:
            return False
        self.spent += 1
        return True

    def room(self) -> int | None:
        """Places still free (None: no budget)."""
        limit = self.limit()
        return None if limit is None else max(0, limit - self.spent)

    def keep(self, request: Any, crawling: bool) -> bool:
        """A request over the budget: kept (deferred with ``JOBDIR``, else standing by while
        the crawl runs and there is room), or False: un-claim it."""
        if self.keep_deferred:
            self.deferred.append(request)  # a resumed crawl starts with these
        elif crawling and len(self.standby) < STANDBY:
            self.standby.append(request)
        else:
            return False
        return True

    def free_places(self) -> list[Any]:
        """The crawl is idle: the requests standing by that take the places still free."""
        taken = []
        while self.standby and self.take():
            taken.append(self.standby.pop(0))
        return taken

    def give_back(self, to_deferred: bool = True) -> Any | None:
        """A place comes back: the deferred request that takes it (``to_deferred``), if any."""
        self.spent -= 1
        if to_deferred and self.deferred and self.take():
            return self.deferred.pop(0)
        return None
