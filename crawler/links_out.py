"""How released links go out of the link scheduler (:class:`crawler.links.LinkScheduler`, of
which :class:`LinksOut` is a part): the ``max_pages`` budget (:mod:`crawler.budget`), the
likely duplicates that wait for the crawl's idle moment under it, and the links handed to and
taken from the crawl's other processes (:mod:`crawler.sharing`). Kept apart from the decisions'
side so each module reads on its own; the state is the scheduler's.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scrapy.core.scheduler import Scheduler

from crawler.ahead import AHEAD_META, Queued
from crawler.budget import PageBudget
from crawler.config import CrawlConfig
from crawler.failed import FailedFetches, afresh
from crawler.frontier import Held, Ledger
from crawler.judging import DecidedPage, DecisionObserver, OutlinkJudge, RequestGate
from crawler.regroup import LIKELY_DUPLICATE_META, has_group, regroup
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
    _paced: dict[str, Any]
    _likely_later: list[Any]
    _claim_failed_at: float | None
    _released: Callable[[Any], bool]
    judge_again: Callable[[Sequence[DecidedPage]], None]
    release_held: Callable[[PageKey, Sequence[Held], int, float], None]
    judge: OutlinkJudge

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

    def send_likely_later(self) -> bool:
        """The crawl is idle, its shared list empty: the likely duplicates taken from it are
        judged again by their group (:mod:`crawler.regroup`), with the evidence this run's own
        groups of their rewrites gathered meanwhile; those without one go out claimed, when
        the gate may skip them by a rule this run's pages taught it. True if there were any."""
        if not self._likely_later:
            return False
        grouped = [r for r in self._likely_later if has_group(r)]
        self._likely_later = [r for r in self._likely_later if not has_group(r)]
        while self._likely_later:  # one at a time: a failure leaves the rest to the close
            request = self._likely_later.pop(0)
            request.meta.pop(LIKELY_DUPLICATE_META, None)
            self._send_claimed(request)
            self.stats.inc_value("dedup/likely_duplicates_sent_at_idle")
        self._judge_groups(grouped)
        return True

    def _judge_groups(self, requests: list[Any]) -> None:
        """Groups another run left (:mod:`crawler.regroup`), judged again page by page. A page
        whose judging fails, or any page under a judge that forms no groups (the URL rules
        off would drop them all), follows its requests, claimed as any link: following can
        only cost fetches. Never raises: a claim that fails is asked again at the next poll."""
        judges_groups = getattr(self.judge, "keepers", None) is not None
        for page in regroup(requests, self.config.extract_options.drop_params):
            self.stats.inc_value("dedup/likely_duplicates_judged_at_idle", len(page.held))
            if judges_groups:
                try:
                    self.judge_again([page])
                    continue
                except Exception:
                    logger.exception("judging again a group another run left failed; following it")
                    self.stats.inc_value("dedup/groups_judged_again_failed")
            try:
                self.release_held(page.key, page.held, page.depth, page.decision.priority)
            except Exception:  # kept by the link scheduler for the next poll's claim
                logger.exception("claiming the links of a group another run left failed")

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

    def leave_queue(self) -> int:
        """The spider stops before the end (Ctrl-C, a stall) without ``JOBDIR``: the requests
        still in its scheduler and those the rules hold back are claimed by the crawl, and
        Scrapy's memory queue dies with the process. They go to the crawl's shared list, where
        a live peer or a run of the same crawl id takes them. How many."""
        sharing = self.sharing
        if sharing is None or self.budget.keep_deferred:  # JOBDIR keeps its own queue
            return 0
        given = 0
        later = self._likely_later  # with their group, or their flag, as they came
        for request in [*self._in_scheduler(), *self._paced.values(), *later]:
            # A copy sent ahead of its turn goes as a plain request: the taker never sent it.
            meta = {k: v for k, v in request.meta.items() if k != AHEAD_META}
            if sharing.hand_over(
                request.replace(meta={**meta, LINK_META: True}), self.crawler.spider
            ):
                self._seen().used(request.url, request.method, request.body)
                given += 1
            elif not request.dont_filter and not has_group(request):
                self._unclaim(request)  # not JSON: the next link to it schedules it again
        self.stats.inc_value("dedup/requests_left_to_the_crawl", given)
        return given

    def _unclaim(self, request: Any) -> None:
        """Give back the claim of a request this process cannot send or hand over (and of the
        URLs that redirected to it)."""
        for url in [*request.meta.get("redirect_urls", ()), request.url]:
            try:
                self._seen().release(url, request.method, request.body)
            except Exception:  # the crawl is over: it stays claimed
                logger.exception("un-claiming %s failed", url)

    def _in_scheduler(self) -> list[Any]:
        """The requests still in Scrapy's own scheduler, taken out of its memory queue (the
        process is closing): the released ones, and those no decision released (redirects,
        retries, the seeds), which the ``queued`` cache misses, as it misses what it forgot
        when full; not one whose URL went ahead of it, nor one a correction cancelled (it is
        un-claimed, as on its way out). Another scheduler (scrapy-redis's queue outlives the
        process): what the ``queued`` cache knows."""
        scheduler = _scrapy_scheduler(self.crawler.engine)
        if scheduler is None:
            return self.queued.waiting()
        drop_params, waiting = self.config.extract_options.drop_params, []
        while len(scheduler) and (request := scheduler.next_request()) is not None:
            if not self.queued.leaving(canonicalize_url(request.url, drop_params), request):
                continue  # its URL was fetched ahead of it
            # Cancelled by a correction: un-claimed, unless another page wanted it meanwhile
            # (or the release failed): then it is left to the crawl, as going_out fetches it.
            if not self.ledger.start_fetch(request.url) and self._released(request):
                continue
            waiting.append(request)
        return waiting

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

    def take_shared(self) -> bool:
        """Requests other processes of the crawl handed over go out from here (claimed by the
        crawl: past the filter), each taking a place in the budget. False: none."""
        if self.sharing is None:
            return False
        unreadable = self.sharing.unreadable
        taken = self.sharing.take(self.budget.room(), self.crawler.spider)
        if self.sharing.unreadable > unreadable:
            self.stats.inc_value(
                "dedup/requests_taken_unreadable", self.sharing.unreadable - unreadable
            )
        grouped = [r for r in taken if has_group(r)]  # claimed as they are judged again
        for request in taken:
            if has_group(request):
                if not self.budget.keep_deferred:  # a JOBDIR crawl judges them now
                    self._likely_later.append(request)
            elif request.meta.get(LIKELY_DUPLICATE_META) and not self.budget.keep_deferred:
                self.budget.take()  # there was room for it
                self._likely_later.append(request)
            else:
                self.budget.take()
                request.meta.pop(LIKELY_DUPLICATE_META, None)
                self._send_claimed(request)
        if self.budget.keep_deferred and grouped:
            self._judge_groups(grouped)
        self.stats.inc_value("dedup/requests_taken_over", len(taken))
        return bool(taken)

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


def _scrapy_scheduler(engine: Any) -> Scheduler | None:
    """The engine's scheduler if it is Scrapy's own (memory queues, ``len``), else None."""
    slot = getattr(engine, "_slot", None)
    scheduler = getattr(slot, "scheduler", None)
    return scheduler if isinstance(scheduler, Scheduler) else None
