"""How released links go out of the link scheduler (:class:`crawler.links.LinkScheduler`, of
which :class:`LinksOut` is a part): the ``max_pages`` budget (:mod:`crawler.budget`), the
likely duplicates that wait for the crawl's idle moment under it, and the links handed to the
crawl's other processes (:mod:`crawler.sharing`; taking them: :mod:`crawler.links_left`). Kept
apart from the decisions' side so each module reads on its own; the state is the scheduler's.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from crawler.ahead import AHEAD_META, Queued
from crawler.budget import PageBudget
from crawler.config import CrawlConfig
from crawler.failed import FailedFetches, afresh
from crawler.frontier import Held, Ledger
from crawler.judging import DecisionObserver, RequestGate
from crawler.scope import spider_limit
from crawler.seen import CLAIMED_META, CrawlSeen, past_the_filter
from crawler.sharing import WorkSharing
from crawler.skipped import SkippedRequests
from crawler.urls import canonicalize_url
from dedup_worker.contract.reading import PageKey
from dedup_worker.errors import NeardupError

logger = logging.getLogger(__name__)

#: ``Request.meta`` flag of requests released by a decision (the ones a correction may cancel).
LINK_META = "neardup_link"


@dataclass
class Want:
    """A link a decided page wants: its held request, the page, the decision's priority level."""

    held: Held
    source: PageKey
    level: int


class LinksOut:
    """The sending part of the link scheduler (see the module docstring)."""

    crawler: Any
    config: CrawlConfig
    ledger: Ledger
    gate: RequestGate
    observer: DecisionObserver
    budget: PageBudget
    queued: Queued
    skipped: SkippedRequests
    failed: FailedFetches
    _reached: weakref.WeakSet[Any]
    sharing: WorkSharing | None
    _seen: Callable[[], CrawlSeen]
    _claim_failed: list[Want]
    _claim: Callable[[Sequence[Any]], list[bool]]
    _paced: dict[str, Any]
    _likely_later: list[Any]
    _claim_failed_at: float | None

    @property
    def stats(self) -> Any:
        return self.crawler.stats  # set when the crawl starts, after the spider (and us)

    def settle(self) -> bool:
        """The crawl has nothing left to fetch: the observer releases what waits for decisions
        that will not come (True if it released requests: the crawl goes on)."""
        if self._claim_failed and not self._give_up_claims():
            return True  # links whose claim failed: the next poll asks again
        standby = self.budget.free_places()  # places given back after the last link came
        for request in standby:
            self._send_claimed(request)
        return self.observer.settle() or bool(standby) or self._release_budget_waiting()

    def _give_up_claims(self) -> bool:
        """Links whose claim kept failing for ``NEARDUP_DECISION_TIMEOUT`` are given up (the
        crawl may close), as a stalled pipeline is."""
        since = self._claim_failed_at
        if since is None or time.monotonic() - since < self.config.decision_timeout:
            return False
        logger.error(
            "giving up %d links: the crawl's seen set (Redis) stayed out of reach for %.0f s",
            len(self._claim_failed),
            self.config.decision_timeout,
        )
        self.stats.inc_value("dedup/links_given_up", len(self._claim_failed))
        self._claim_failed, self._claim_failed_at = [], None
        return True

    def _waits_for_budget(self, want: Want) -> bool:
        return self._max_pages() is not None and self._likely_duplicate(want)

    def _likely_duplicate(self, want: Want) -> bool:
        likely = getattr(self.gate, "likely_duplicate", None)  # gates written before it: no
        queued = self.queued.get
        return likely is not None and bool(likely(want.held.url, lambda u: queued(u) is not None))

    def close_budget_waiting(self) -> None:
        """The crawl closes before its idle moment: what waits is over the budget, or with
        ``JOBDIR`` waits again in the resumed run (the resume file keeps it); what stood by for
        a place is un-claimed."""
        if not self.budget.keep_deferred:
            for want in self.budget.waiting:  # likely duplicates: not worth a peer's places
                self._over_budget(want.held.request, give=False)
            self.budget.waiting = []
        for request in self.budget.standby:
            self._let_go(request)
        self.budget.standby = []

    def _release_budget_waiting(self) -> bool:
        """The crawl is idle: what waited goes out, asking the gate again (crawler.budget)."""
        waiting, self.budget.waiting = self.budget.waiting, []
        sent = [self._send_scheduled(w) for w in waiting if self._gate_admits(w, claimed=True)]
        return any(sent)

    def _send_scheduled(self, want: Want) -> bool:
        """A claimed link takes a place in the budget and goes to Scrapy's scheduler (False:
        over the budget). Handed to a hungry process of the crawl instead, if one waits."""
        request = want.held.request
        if self._hands_over(want):
            return True
        if not self.take_budget():
            self._over_budget(request)
            return False
        self.ledger.scheduled(request.url, want.source)
        request.meta[LINK_META] = True
        request.priority += want.level
        self.crawler.engine.crawl(request)
        self.queued.add(want.held.url, request)
        self.stats.inc_value("dedup/outlinks_scheduled")
        return True

    def _hands_over(self, want: Want) -> bool:
        """A released link goes to a hungry process of the crawl (:mod:`crawler.sharing`),
        which takes a place in its own budget for it; this process forgets it. A likely
        duplicate is not given while this process has places left: the peer's queue is empty,
        so it would go out at once."""
        sharing = self.sharing
        spent = self.budget.room() == 0  # this process could not send it: give it away
        if sharing is None or not sharing.gives(len(self.queued), spent):
            return False
        if not spent and self._likely_duplicate(want):
            # Kept: it waits here while its rule gathers checks; a peer would fetch it now.
            return False
        request = want.held.request
        meta = {**request.meta, LINK_META: True}
        given = request.replace(priority=request.priority + want.level, meta=meta)
        if not sharing.hand_over(given, self.crawler.spider):
            return False
        self.ledger.dropped(request.url)
        self._seen().used(request.url, request.method, request.body)  # the peer's now
        self.stats.inc_value("dedup/requests_handed_over")
        return True

    def _unclaim(self, request: Any) -> None:
        """Give back the claim of a request this process cannot send or hand over (and of the
        URLs that redirected to it)."""
        for url in [*request.meta.get("redirect_urls", ()), request.url]:
            try:
                self._seen().release(url, request.method, request.body)
            except Exception:  # the crawl is over: it stays claimed
                logger.exception("un-claiming %s failed", url)

    def fetch_failed(self, request: Any) -> None:
        """``request``'s download failed for a passing reason, retries included
        (:mod:`crawler.failed`): it stays claimed while the crawl runs, and is left to a later
        run as the spider closes (:meth:`leave_failed`)."""
        self.stats.inc_value("dedup/fetches_failed")
        self.failed.add(request)

    def leave_failed(self) -> int:
        """At the close, each request whose download failed goes where a later run of the crawl
        fetches it again: with ``JOBDIR`` the resume file's deferred requests (sent as the
        budget has room); else the crawl's shared list (a live peer may take it at once);
        else (no sharing, or the hand-over is refused) it is un-claimed, with the URLs that
        redirected to it, for the next link to it. How many were kept."""
        left = 0
        adjust = self.crawler.settings.getint("RETRY_PRIORITY_ADJUST")
        while (request := self.failed.oldest()) is not None:
            again = afresh(request, frozenset({CLAIMED_META}), adjust, **{LINK_META: True})
            kept = True
            if self.budget.keep_deferred:
                self.budget.deferred.append(again)
            elif self.sharing is not None and self.sharing.hand_over(again, self.crawler.spider):
                self._seen().used(request.url, request.method, request.body)
            else:
                self._unclaim(request)
                kept = False
            self.failed.forget(request)  # placed: a failure above leaves the rest claimed
            left += kept
        self.stats.inc_value("dedup/failed_left_for_a_later_run", left)
        return left

    def _gate_admits(self, want: Want, claimed: bool = False) -> bool:
        """Ask the gate; a link it skips is kept (``claimed`` or not) to be fetched back."""
        reason = self.gate.admit(want.held.url, want.source)
        if reason is not None:
            self.stats.inc_value(f"dedup/requests_skipped/{reason}")
            self.ledger.dropped(want.held.request.url)
            self.keep_skipped(want.held.url, want.held.request, claimed=claimed)
        return reason is None

    def keep_skipped(self, url: str, request: Any, claimed: bool = False) -> None:
        """Keep a skipped request to fetch it back. One the full cache forgets cannot be
        fetched back: if this process claimed it, the claim is given back, so that the next
        link to it schedules it again (and the gate skips and keeps it again, if its rule
        still holds). Kept claimed, it was never fetched (a unique page lost)."""
        forgotten = self.skipped.add(url, request, claimed)
        if forgotten is None:
            return
        self.stats.inc_value("dedup/skipped_forgotten")
        old, was_claimed = forgotten
        if not was_claimed or old.dont_filter:  # dont_filter: the claim is nobody's, or another's
            return
        try:
            self._seen().release(old.url, old.method, old.body)
        except NeardupError as exc:  # called where no Redis call used to be: it stays claimed
            self.stats.inc_value("dedup/skipped_forgotten_still_claimed")
            logger.warning("a forgotten skip of %s stays claimed: %s", old.url, exc)

    def _max_pages(self) -> int | None:
        return spider_limit(getattr(self.crawler.spider, "max_pages", None), self.config.max_pages)

    def take_budget(self) -> bool:
        if self.budget.take():
            return True
        self.stats.inc_value("dedup/outlinks_over_budget")
        return False

    def refund(self, request: Any) -> bool:
        """A request the budget paid for never goes out (:mod:`crawler.budget`): its place
        goes to the next link, the first one a ``JOBDIR`` crawl kept over the budget if any.
        A seed counts as paid for (the budget counts the spider's seeds as it opens). A redirect
        or a retry copies its request's meta, but follows a request that went out: no refund.
        True if the place came back."""
        if not (request.meta.get(LINK_META) or self._is_seed(request)):
            return False
        if request.meta.get("redirect_urls") or request.meta.get("retry_times"):
            return False
        self.stats.inc_value("dedup/budget_returned")
        waiting = self.budget.give_back(to_deferred=self.crawler.crawling)
        if waiting is not None:
            self._send_claimed(waiting)
        return True

    def _is_seed(self, request: Any) -> bool:
        seeds = getattr(self.crawler.spider, "seeds", None)
        if not seeds or request.meta.get("depth") != 0:
            return False
        return canonicalize_url(request.url) in seeds

    def _send_claimed(self, request: Any) -> None:
        """A request this crawl claimed already (over the budget, taken from a peer, held back
        by the rules, fetched back) goes out past the filter. It is queued as it waits in
        Scrapy's scheduler: a stop before the end leaves it to the crawl (``leave_queue``)."""
        request.meta[LINK_META] = True
        sent = past_the_filter(request)
        self.queued.add(canonicalize_url(sent.url, self.config.extract_options.drop_params), sent)
        self.crawler.engine.crawl(sent)

    def _over_budget(self, request: Any, give: bool = True) -> None:
        self.ledger.dropped(request.url)
        if not self.budget.keep(request, self.crawler.crawling):
            self._let_go(request, give)

    def _let_go(self, request: Any, give: bool = True) -> None:
        """A claimed request this process will not send: to the crawl's shared list while a
        peer lives (``give``), else un-claimed for whoever wants it. Un-claiming it under a
        live peer lost it: a peer that found it claimed caches that and never asks again."""
        sharing = self.sharing
        if give and sharing is not None and sharing.gives(0, spent=True):
            request.meta[LINK_META] = True
            if sharing.hand_over(request, self.crawler.spider):
                self._seen().used(request.url, request.method, request.body)
                self.stats.inc_value("dedup/requests_handed_over")
                return
        self._seen().release(request.url, request.method, request.body)

    # ---- out of turn: ahead of it, or back after a skip that was wrong --------------------

    def fetch_ahead(self, url: str) -> bool:
        """Send canonical ``url``'s request, waiting in this process's scheduler, out now,
        ahead of its turn (:mod:`crawler.ahead`); False if no such request waits here."""
        request = self.queued.get(url)
        if request is None or not self.crawler.crawling or not self.ledger.waiting(request.url):
            return False
        self.queued.sent_ahead(url)
        first = request.priority + self.config.priority_levels + 1  # above every level
        meta = {**request.meta, AHEAD_META: True}
        self.crawler.engine.crawl(past_the_filter(request, priority=first, meta=meta))
        self.stats.inc_value("dedup/requests_fetched_ahead")
        return True

    def fetch_back(self, urls: Iterable[str]) -> None:
        """Send out requests the gate skipped or a group dropped, by canonical URL: their rule
        turned out wrong (:mod:`crawler.rules.fetch_back`). One never claimed is claimed first
        (one round trip), and left alone if another link claimed it meanwhile: it was fetched,
        or is on its way. Each takes a place in the budget."""
        kept = [k for url in urls if (k := self.skipped.pop(url)) is not None]
        if not self.crawler.crawling:
            return
        # Queued here by another link: it goes out in its turn.
        kept = [(r, claimed) for r, claimed in kept if not self.ledger.waiting(r.url)]
        unclaimed = [request for request, claimed in kept if not claimed]
        fresh = iter(self._claim(unclaimed)) if unclaimed else iter(())  # journaled there
        if self.sharing is not None:  # a skip left the journal: back in, till its decision
            again = [r for r, claimed in kept if claimed]
            for request in again:  # a skip's settling not reported yet must not undo that
                self._seen().unsettle(request.url, request.method, request.body)
            self.sharing.journal_again(again, self.crawler.spider)
        for request, claimed in kept:
            if not claimed and not next(fresh):
                continue
            if not self.take_budget():
                self._over_budget(request)  # stands by, deferred or un-claimed: never lost
                continue
            # Claimed by us before: past the filter. Claimed just now: the filter lets it by.
            if claimed:
                self._send_claimed(request)
            else:
                request.meta[LINK_META] = True
                self.crawler.engine.crawl(request)
            self.stats.inc_value("dedup/requests_fetched_back")
