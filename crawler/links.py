"""The link scheduler: requests held by their page's decision, released, cancelled.

One per crawler (:class:`~crawler.session.NeardupSession`). The spider middleware registers each
published page and holds the requests its callback yields (:meth:`LinkScheduler.hold`); the
scheduling extension feeds it the decisions (:meth:`LinkScheduler.apply`); each decided page is
judged (:class:`~crawler.judging.OutlinkJudge`, the place outlinks become requests), what it
follows is checked against scope (:mod:`crawler.scope`), the gate
(:class:`~crawler.judging.RequestGate`, the place a request is about to be scheduled), the
crawl's seen set (one claim round trip per batch) and the ``max_pages`` budget, and goes to
Scrapy's scheduler at the decision's priority. A correction cancels the page's released links
still waiting (:meth:`LinkScheduler.going_out`, called by the download handler as a request
goes out), or lets them go with a judge that keeps them (the URL rules'
:class:`~crawler.subtree_judge.SubtreeJudge`: a duplicate's outlinks are judged, and a
correction has no sample to judge by). Only :meth:`apply` (the extension's poll, on the
reactor) schedules anything.

How a link then goes out (the budget, likely duplicates waiting for the crawl's idle moment
under it, links handed to the crawl's other processes, links sent ahead of their turn or back
after a wrong skip) is :class:`crawler.links_out.LinksOut`; what a process stopped before the
end leaves to the crawl, and what the run that takes it does with it,
:class:`crawler.links_left.LinksLeft`; when a request leaves the crawl's journal,
:class:`crawler.links_journal.LinksJournal`.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from scrapy.exceptions import IgnoreRequest

from crawler import stats as dedup_stats
from crawler.ahead import AHEAD_META, Queued
from crawler.budget import PageBudget
from crawler.config import CrawlConfig
from crawler.failed import FailedFetches
from crawler.frontier import (
    Action,
    Claim,
    Held,
    Ledger,
    Outcome,
    judged_last,
    overtaken,
    request_priority,
)
from crawler.judging import (
    HOLD,
    AdmitAll,
    DecidedPage,
    DecisionJudge,
    DecisionObserver,
    IgnoreDecisions,
    OutlinkJudge,
    RequestGate,
)
from crawler.links_journal import LinksJournal
from crawler.links_left import LinksLeft
from crawler.links_out import LINK_META, Want
from crawler.scope import Scope
from crawler.seen import CrawlSeen
from crawler.sharing import WorkSharing
from crawler.skipped import SkippedRequests
from crawler.urls import canonicalize_url
from crawler.verdicts import VerdictWaiters
from dedup_worker.contract.messages import Decision, Page
from dedup_worker.contract.reading import PageKey, page_key
from dedup_worker.errors import NeardupError

logger = logging.getLogger(__name__)

__all__ = ["LINK_META", "LinkScheduler", "Want"]


class LinkScheduler(LinksLeft, LinksJournal):
    """Held requests in, scheduled requests out (see the module docstring)."""

    def __init__(self, crawler: Any, config: CrawlConfig, seen: Callable[[], CrawlSeen]) -> None:
        self.crawler = crawler
        self.config = config
        self.ledger = Ledger()
        self.judge: OutlinkJudge = DecisionJudge()
        self.gate: RequestGate = AdmitAll()
        self.observer: DecisionObserver = IgnoreDecisions()
        self._seen = seen
        self.scope = Scope(crawler, config)
        self.suppressed: set[str] = set()  # in-scope requests not followed (checked at close)
        self.budget = PageBudget(self._max_pages)
        self.last_progress = time.monotonic()
        self._ready: list[Outcome] = []  # decisions that applied when their page closed
        self.verdicts = VerdictWaiters(self.ledger)  # items' verdicts (the middleware)
        self._drop_params = config.extract_options.drop_params
        self._paced: dict[str, Any] = {}  # requests the gate holds back, by canonical URL
        self._likely_later: list[Any] = []  # taken likely duplicates, for the idle moment
        self._wanting: set[str] = set()  # canonical URLs wanted by the poll being applied
        self._claim_failed: list[Want] = []  # wanted links whose claim failed: next poll
        self._claim_failed_at: float | None = None  # monotonic time of the first failure
        self._redirected: dict[str, list[tuple[str, str, bytes]]] = {}  # see LinksJournal
        self.queued = Queued()  # released requests in the scheduler, to fetch one ahead
        self.skipped = SkippedRequests()  # requests the gate skipped, to fetch one back
        self.failed = FailedFetches()  # requests whose download failed, for a later run
        #: Requests that passed every downloader middleware (Scrapy's request_reached_downloader)
        #: still alive: a request object, not a meta flag, which copies sent again would carry.
        self._reached: weakref.WeakSet[Any] = weakref.WeakSet()
        self.sharing: WorkSharing | None = None  # the crawl's other processes (crawler.sharing)

    # ---- pages and their requests (the pipeline, the middleware) -----------------------------

    def published(self, page: Page) -> PageKey:
        """``page`` goes to the broker now; its requests follow with :meth:`hold`."""
        if not self.ledger.outstanding:
            # The stall clock runs while decisions are owed; publishing more does not reset it.
            self.last_progress = time.monotonic()
        key = PageKey(page.url, page.fetched_at)
        self.ledger.published(key, page.depth, page.outlinks, collecting=True)
        return key

    def publish_failed(self, key: PageKey) -> None:
        """No decision will come: the page's requests go out as the callback yielded them."""
        held = self.ledger.publish_failed(key)
        if self.crawler.crawling:
            for item in held:
                self.crawler.engine.crawl(item.request)
        self.stats.inc_value("dedup/requests_released_unpublished", len(held))
        self.verdicts.resolve(key, None)
        self.settle_page(key)  # its requests are claimed as they go out: it owes nothing more

    def hold(self, key: PageKey, request: Any) -> bool:
        """Hold ``request`` until page ``key``'s decision; False: let it through now."""
        url = canonicalize_url(request.url, self.config.extract_options.drop_params)
        if not self.ledger.hold(key, Held(url, request)):
            return False
        self.stats.inc_value("dedup/requests_held")
        return True

    def unclaimed(self, urls: Iterable[str]) -> list[str]:
        """The URLs worth a request: not known to be claimed by the crawl already (the seen
        filter would drop them), or waiting in this process's scheduler (a second page that
        wants one keeps it alive if the first page is corrected). Saves a spider building
        requests for the navigation links every page repeats."""
        seen = self._seen()
        return [url for url in urls if not seen.known_claimed(url) or self.ledger.is_tracked(url)]

    def close(self, key: PageKey) -> None:
        """Page ``key``'s callback is done; a decision that came meanwhile applies next poll."""
        outcome = self.ledger.close(key)
        if outcome is not None:
            self._ready.append(outcome)

    # ---- decisions (the extension's poll) -----------------------------------------------------

    def apply(self, decisions: Sequence[Decision]) -> None:
        self.observer.observe(decisions)
        wanted: dict[str, Want] = {}
        self._wanting = set()
        try:
            # Duplicates last: one decided in the same poll as its keeper (mirrors fetched
            # together) is judged once the keeper's outlinks are wanted (``wanted_now``).
            ready, corrected = overtaken(self._ready, decisions)
            self._ready = []
            for decision in sorted(decisions, key=judged_last):
                outcome = self.ledger.apply(decision)
                if not (decision.corrects and page_key(decision) in corrected):
                    self._handle(outcome, wanted)
            for outcome in sorted(ready, key=lambda o: judged_last(o.decision)):
                self._handle(outcome, wanted)
            self._schedule(wanted)
        finally:
            self._wanting = set()

    def wanted_now(self, url: str) -> bool:
        """Whether a page decided in the poll being applied wants canonical ``url``: it is
        about to be claimed, as if it were already (a judge asks while the poll applies)."""
        return url in self._wanting

    def _handle(self, outcome: Outcome, wanted: dict[str, Want]) -> None:
        self.stats.inc_value(f"dedup/decisions_{outcome.action.value}")
        decision = outcome.decision
        if outcome.action in (Action.FOREIGN, Action.DUPLICATE, Action.WAITING):
            return
        assert decision is not None
        self.last_progress = time.monotonic()
        dedup_stats.count_verdict(self.stats, decision)
        key = PageKey(decision.url, decision.fetched_at)
        self.verdicts.resolve(key, decision.verdict.value)
        if outcome.action is Action.CORRECT and outcome.cancelled:
            if getattr(self.judge, "keeps_corrected_links", False):
                self.ledger.revive(outcome.cancelled, key)
                self.stats.inc_value("dedup/links_of_corrected_pages_kept", len(outcome.cancelled))
            else:
                self._suppress([], outcome.cancelled, outcome.depth + 1)
            return
        self._judged(
            DecidedPage(key, outcome.depth, outcome.outlinks, decision, outcome.held), wanted
        )

    def _judged(self, page: DecidedPage, wanted: dict[str, Want]) -> None:
        """The judge's word on a decided page's requests: wanted (claimed with the poll's
        other links) or suppressed."""
        judgement = self.judge.judge(page)
        if not self._holds(page.key):
            # Its outlinks are claimed (journaled) with this poll's claim, which settles it.
            self.settle_page(page.key)
        level = request_priority(page.decision.priority, self.config.priority_levels)
        for held in self.scope.keep(judgement.follow, page.depth + 1):
            self._want(wanted, held, page.key, level)
        self._suppress(judgement.drop, (), page.depth + 1)

    def judge_again(self, pages: Sequence[DecidedPage]) -> None:
        """Groups another run's judge held back on a sample when it stopped
        (:mod:`crawler.regroup`): judged as if their pages were decided now, with this run's
        evidence of their rewrites; what they follow is claimed as any link is."""
        wanted: dict[str, Want] = {}
        try:
            for page in pages:
                self._judged(page, wanted)
            self._schedule(wanted)
        finally:
            self._wanting = set()

    def release_held(
        self, source: PageKey, held: Sequence[Held], depth: int, priority: float
    ) -> None:
        """Schedule requests a judge kept back when page ``source`` (at ``depth``, decision
        priority ``priority``) was decided: as if it had followed them then."""
        wanted: dict[str, Want] = {}
        level = request_priority(priority, self.config.priority_levels)
        for item in self.scope.keep(held, depth + 1):
            self._want(wanted, item, source, level)
        self._schedule(wanted)

    def _holds(self, source: PageKey) -> bool:
        holds = getattr(self.judge, "holds", None)  # a judge of one's own keeps nothing back
        return bool(holds(source)) if holds is not None else False

    def drop_held(self, held: Sequence[Held], depth: int) -> None:
        """Drop requests a judge kept back, counted as suppressed (as if dropped at once), and
        kept to be fetched back if their pair turns out to differ."""
        self._suppress(held, (), depth + 1)
        for item in held:
            self.keep_skipped(item.url, item.request)

    def _want(self, wanted: dict[str, Want], held: Held, source: PageKey, level: int) -> None:
        url = held.request.url
        if url in wanted:
            wanted[url].level = max(wanted[url].level, level)
            self.ledger.scheduled(url, source)  # a second source of a link already chosen
        elif self.ledger.claim(url, source) is Claim.NEW:
            wanted[url] = Want(held, source, level)
            self._wanting.add(held.url)
        else:
            self.stats.inc_value("dedup/outlinks_already_pending")

    def _schedule(self, wanted: dict[str, Want]) -> None:
        admitted = self._claim_failed + [want for want in wanted.values() if self._admit(want)]
        self._claim_failed = []
        if not admitted:
            return
        try:
            fresh = self._claim([want.held.request for want in admitted])
        except Exception:
            # Redis restarting: the links are out of the ledger's pages already, and their
            # pages are claimed, so nothing would find them again. Asked again next poll.
            self._claim_failed = admitted
            self._claim_failed_at = self._claim_failed_at or time.monotonic()
            self.stats.inc_value("dedup/claim_errors")
            raise
        self._claim_failed_at = None
        self.stats.inc_value("dedup/outlinks_seen", fresh.count(False))
        for want, new in zip(admitted, fresh, strict=True):
            request = want.held.request
            if not new:
                self.ledger.dropped(request.url)
            elif self._waits_for_budget(want):
                self.budget.waiting.append(want)
                self.stats.inc_value("dedup/outlinks_waiting_for_budget")
            else:
                self._send_scheduled(want)

    def _admit(self, want: Want) -> bool:
        # A link this process claimed already (scheduled, maybe fetched) goes on to the claim,
        # which drops it as seen: asked, a rule that became active since would skip it and
        # publish as a predicted duplicate a page that is fetched after all.
        return self._seen().known_claimed(want.held.request.url) or self._gate_admits(want)

    def _claim(self, requests: Sequence[Any]) -> list[bool]:
        """Claim the requests in the seen set (one round trip); those that skip the dupefilter
        (``dont_filter``) are claimed by nobody and always fresh."""
        filtered = [r for r in requests if not r.dont_filter]
        seen = self._seen()
        fps = [seen.fingerprint(r.url, r.method, r.body) for r in filtered]
        answers = iter(seen.claim(fps, self._journaled(fps, filtered)))
        return [True if r.dont_filter else next(answers) for r in requests]

    def _suppress(self, held: Iterable[Held], urls: Iterable[str], depth: int) -> None:
        """Requests not followed (in scope: counted as saved if nobody fetches them) and
        cancelled links (``urls``, in scope when they were released)."""
        held = list(held)
        urls = list(urls)
        if not held and not urls:
            return
        self.stats.inc_value("dedup/outlinks_of_suppressed_pages", len(held) + len(urls))
        self.suppressed.update(item.request.url for item in self.scope.keep(held, depth))
        self.suppressed.update(urls)

    # ---- requests leaving (the download handler, the engine) ---------------------------------

    def going_out(self, request: Any) -> None:
        """A released request goes out: raise IgnoreRequest if a correction cancelled it,
        unless a page of another process wanted it meanwhile (that process filtered it)."""
        seen = self._seen()
        url = canonicalize_url(request.url, self._drop_params)
        if not self.queued.leaving(url, request):
            self.stats.inc_value("dedup/requests_fetched_ahead_already")
            raise IgnoreRequest(f"fetched ahead of its turn already: {request}")
        if self.ledger.start_fetch(request.url):
            # A gate written before admit_fetch existed only had admit: it admits every fetch.
            admit_fetch = getattr(self.gate, "admit_fetch", None)
            reason = admit_fetch(url) if admit_fetch is not None else None
            if reason == HOLD:  # the gate sends it out again (release_paced); till then it
                self._paced[url] = request  # stays in flight, and in this process's journal
                raise IgnoreRequest(f"held back for a while: {request}")
            seen.sent(request.url, request.method, request.body)
            if reason is not None:  # stays claimed: skipped for the whole crawl
                seen.settle(request.url, request.method, request.body)
                self.stats.inc_value(f"dedup/requests_skipped/{reason}")
                self.stats.inc_value("dedup/requests_skipped_before_fetch")
                self.keep_skipped(url, request, claimed=True)
                self.refund(request)
                raise IgnoreRequest(f"skipped ({reason}): {request}")
        elif self._released(request):
            self.stats.inc_value("dedup/requests_cancelled")
            self.refund(request)
            raise IgnoreRequest(f"cancelled: its source page is a duplicate: {request}")
        else:
            self.stats.inc_value("dedup/requests_kept_wanted_elsewhere")

    def _released(self, request: Any) -> bool:
        """Un-claim a cancelled request unless wanted elsewhere. If the store fails, it is not:
        fetched, it costs a fetch; un-claimed by a release whose reply was lost, a page of
        another process that wanted it (and filtered it) was lost."""
        try:
            return self._seen().release_unwanted(request.url, request.method, request.body)
        except NeardupError as exc:
            self.stats.inc_value("dedup/release_errors")
            logger.warning("fetching cancelled %s: its release failed: %s", request.url, exc)
            return False

    def paced(self) -> list[Any]:
        """The requests the gate holds back just before fetching (for a ``JOBDIR`` resume)."""
        return list(self._paced.values())

    def release_paced(self, urls: Iterable[str]) -> None:
        """Send out again requests the gate held back (claimed by us: past the seen filter)."""
        for url in urls:
            request = self._paced.pop(url, None)
            if request is not None and self.crawler.crawling:
                self._send_claimed(request)

    def dropped(self, request: Any) -> None:
        """Scrapy's scheduler refused a released request, or a seed: one claimed by another
        process of the crawl (or an earlier run of it) gives back the place it took at open."""
        self._not_sent(request)
        self.refund(request)

    def reached_downloader(self, request: Any) -> None:
        self._reached.add(request)

    def refused(self, request: Any) -> None:
        """An ``IgnoreRequest`` ended ``request`` (its errback). If it never reached the
        downloader, a downloader middleware refused it (robots.txt, offsite, one of the
        project's), so it was never sent: its place comes back. One that reached it settled its
        place there (a skip or a cancel gives it back itself, a request fetched ahead or held
        back keeps it) or went out (an HTTP error). A copy sent ahead of its turn took no place:
        its original, still queued, gives it back when it is refused in turn."""
        if request in self._reached or request.meta.get(AHEAD_META):
            return
        self._not_sent(request)
        if self.refund(request):
            self.stats.inc_value("dedup/requests_refused_before_download")

    def _not_sent(self, request: Any) -> None:
        if request.meta.get(LINK_META):
            self.ledger.dropped(request.url)
            self.queued.discard(canonicalize_url(request.url, self._drop_params))

    def count_saved(self) -> None:
        """Suppressed requests that nobody fetched in the end are the bandwidth saved."""
        urls = sorted(self.suppressed)
        never = sum(1 for hit in self._seen().contains_many(urls) if not hit) if urls else 0
        self.stats.set_value("dedup/outlinks_suppressed", never)
        saved = dedup_stats.bytes_saved_estimate(never, self.stats.get_stats())
        self.stats.set_value("dedup/bytes_saved_estimate", saved)
