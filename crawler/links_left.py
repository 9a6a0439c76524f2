"""What a spider stopped before the end leaves to the crawl, and what the run that takes it
does with it: the part of the link scheduler (:class:`crawler.links.LinkScheduler`) that hands
a stopped process's work to the crawl's shared list (Scrapy's queue, the requests of pages
still without a decision, the judge's groups waiting on a sample) and judges such groups again
at the taking run's idle moment (:mod:`crawler.regroup`). Kept apart so each module reads on
its own; the state is the scheduler's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from scrapy.core.scheduler import Scheduler

from crawler.ahead import AHEAD_META
from crawler.frontier import Action, Held, Outcome
from crawler.judging import DecidedPage, OutlinkJudge
from crawler.links_out import LINK_META, LinksOut
from crawler.regroup import LIKELY_DUPLICATE_META, group_meta, has_group, regroup
from crawler.scope import Scope
from crawler.sharing import encode_request
from crawler.urls import canonicalize_url
from dedup_worker.contract.reading import PageKey

logger = logging.getLogger(__name__)


class LinksLeft(LinksOut):
    """Handing a stopped process's work over, and judging again what it held back."""

    judge: OutlinkJudge
    scope: Scope
    _ready: list[Outcome]
    _released: Callable[[Any], bool]
    judge_again: Callable[[Sequence[DecidedPage]], None]
    release_held: Callable[[PageKey, Sequence[Held], int, float], None]

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

    def leave_undecided(self) -> int:
        """The spider stops before the end without ``JOBDIR``: the requests of pages still
        awaiting a decision (one that came while its page collected is honoured: a duplicate's
        are not left), and those the judge holds back (a duplicate's outlinks waiting on a
        sample), go to the crawl's shared list undecided (in scope, claimed here now, in one
        step; one claimed already is someone else's; one with ``dont_filter`` as it is, claimed
        by nobody). Their pages are claimed, and a later run
        does not read their decisions or samples: the outlinks were lost, and with them any
        page only they link to. A duplicate's outlinks among them cost a fetch each. How
        many."""
        sharing = self.sharing
        if sharing is None or self.budget.keep_deferred:  # JOBDIR re-reads their decisions
            return 0
        spider, seen = self.crawler.spider, self._seen()
        left = [r for r in self._undecided() if encode_request(r, spider) is not None]  # JSON
        handed = [r for r, new in zip(left, self._claim(left), strict=True) if new]
        claimed = [r for r in handed if not r.dont_filter]  # dont_filter: claimed by nobody
        # Held back on a sample: unclaimed, with their group, judged again by the taker.
        handed += [r for r in self._held_back_groups() if encode_request(r, spider) is not None]
        for request in handed:
            sharing.hand_over(request.replace(meta={**request.meta, LINK_META: True}), spider)
        for request in claimed:
            seen.used(request.url, request.method, request.body)
        # If the push fails they stay in the outbox, claimed, for the spider's last flush (a
        # push sent again runs once: crawler.redis_replies). Un-claimed here, they went to the
        # list all the same with that flush, claimed by nobody.
        sharing.flush()
        self.stats.inc_value("dedup/undecided_left_to_the_crawl", len(handed))
        return len(handed)

    def _undecided(self) -> list[Any]:
        """The in-scope requests of pages without a decision applied (one that came while the
        page collected is honoured), and those the judge holds back."""
        pages = [
            (page.held, page.depth)
            for page in self.ledger.awaiting.values()
            if page.decision is None or page.decision.follow_outlinks
        ]
        # A decision that came while its page collected, applied at the next poll (none came).
        pages += [(list(o.held), o.depth) for o in self._ready if o.action is Action.FOLLOW]
        # A page's requests are one level below it (DepthMiddleware off: no depth in meta).
        keep = self.scope.keep
        requests = [item.request for held, depth in pages for item in keep(held, depth + 1)]
        # A duplicate's outlinks its judge holds back on a sample, of a group the judge does
        # not hand over to be judged again: claimed, sent at the taker's idle moment.
        regrouped = self._regrouped()
        held_back = getattr(self.judge, "held_back", None)
        for source, depth, _, held in held_back() if held_back else []:
            if source not in regrouped:
                requests += [
                    item.request.replace(meta={**item.request.meta, LIKELY_DUPLICATE_META: True})
                    for item in keep(held, depth + 1)
                ]
        return requests

    def _regrouped(self) -> dict[PageKey, str]:
        """The judge's groups another run judges again, with the page each one's duplicates."""
        keepers = getattr(self.judge, "keepers", None)
        return keepers() if keepers is not None else {}

    def _held_back_groups(self) -> list[Any]:
        """The requests of the judge's groups waiting on a sample, each with its group in its
        meta (:mod:`crawler.regroup`), in scope, unclaimed."""
        regrouped = self._regrouped()
        if not regrouped:
            return []
        return [
            item.request.replace(
                meta={
                    **item.request.meta,
                    LIKELY_DUPLICATE_META: group_meta(source, depth, priority, regrouped[source]),
                }
            )
            for source, depth, priority, held in self.judge.held_back()  # type: ignore[attr-defined]
            if source in regrouped
            for item in self.scope.keep(held, depth + 1)
        ]

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


def _scrapy_scheduler(engine: Any) -> Scheduler | None:
    """The engine's scheduler if it is Scrapy's own (memory queues, ``len``), else None."""
    slot = getattr(engine, "_slot", None)
    scheduler = getattr(slot, "scheduler", None)
    return scheduler if isinstance(scheduler, Scheduler) else None
