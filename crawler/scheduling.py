"""Scheduling from decisions: the extension that turns the worker's verdicts into requests.

:class:`DecisionScheduler` (an ``EXTENSIONS`` entry) reads ``decisions`` on a background
thread (:class:`~dedup_worker.adapters.kafka.DecisionFeed`) and drains it from the reactor with
a ``LoopingCall``.
For each decision about one of this process's pages (:class:`~crawler.frontier.Ledger`) it

- schedules the decision's outlinks when it says ``follow_outlinks``: in scope (allowed domains,
  ``max_depth``, ``max_pages``), claimed in the shared seen set, at the decision's priority;
- counts the outlinks of a suppressed page as suppressed (bandwidth saved);
- on a correction, cancels the page's links still waiting in the scheduler
  (:class:`CancellableDownloadHandler` drops them before they go out).

The spider stays open (``spider_idle`` + ``DontCloseSpider``, as scrapy-redis does) while
published pages await decisions, and closes as soon as nothing is pending; if no decision comes
for ``NEARDUP_DECISION_TIMEOUT`` seconds, it closes with reason ``dedup_stalled``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self
from weakref import WeakKeyDictionary

from scrapy import signals
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.exceptions import DontCloseSpider, IgnoreRequest, NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThread

from crawler import stats as dedup_stats
from crawler.config import CrawlConfig, crawl_config
from crawler.frontier import (
    Action,
    Claim,
    Ledger,
    PageKey,
    ResumeState,
    domain_allowed,
    request_priority,
)
from crawler.pipelines import page_publish_failed, page_publishing
from crawler.seen import seen_for
from crawler.urls import host_of
from dedup_worker.adapters.kafka import DecisionFeed
from dedup_worker.contract.messages import Decision, Page
from dedup_worker.errors import ContractError

logger = logging.getLogger(__name__)

#: ``Request.meta`` flag of links scheduled from a decision (the ones a correction may cancel).
LINK_META = "neardup_link"
RESUME_FILE = "neardup-decisions.json"
DRAIN_LIMIT = 5000

_LEDGERS: WeakKeyDictionary[Any, Ledger] = WeakKeyDictionary()


class DecisionScheduler:
    """Scrapy extension: applies this process's decisions and decides when the crawl is over."""

    def __init__(self, crawler: Any, config: CrawlConfig) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self.ledger = Ledger()
        self.feed = DecisionFeed(config.kafka(), config.decisions_topic)
        self.suppressed: set[str] = set()  # in-scope outlinks not followed (checked at close)
        self._loop: LoopingCall | None = None
        self._last_progress = time.monotonic()
        self._scheduled = 0
        self._deferred: list[tuple[str, int, int]] = []  # over budget, kept for a resume
        self._closing = False
        self._origins: dict[str, bool] = {}
        _LEDGERS[crawler] = self.ledger

    @classmethod
    def from_crawler(cls, crawler: Any) -> Self:
        config = crawl_config(crawler.settings)
        if not config.publishing:
            raise NotConfigured("NEARDUP_KAFKA_BOOTSTRAP is not set: no decisions to schedule from")
        ext = cls(crawler, config)
        connect = crawler.signals.connect
        connect(ext.spider_opened, signal=signals.spider_opened)
        connect(ext.spider_idle, signal=signals.spider_idle)
        connect(ext.spider_closed, signal=signals.spider_closed)
        connect(ext.request_dropped, signal=signals.request_dropped)
        connect(ext.page_publishing, signal=page_publishing)
        connect(ext.page_publish_failed, signal=page_publish_failed)
        return ext

    # ---- lifecycle ---------------------------------------------------------------------------

    async def spider_opened(self, spider: Any) -> None:
        path = self._resume_path()
        resume = (ResumeState.load(path) if path else None) or ResumeState()
        started = await maybe_deferred_to_future(deferToThread(self.feed.start, resume.offsets))
        for url, fetched_at, depth, outlinks in resume.awaiting:
            self.ledger.published(PageKey(url, fetched_at), depth, outlinks)
        self._scheduled = resume.scheduled + len(spider.seeds)
        self._last_progress = time.monotonic()
        self._loop = LoopingCall(self._tick)
        self._loop.start(self.config.poll_interval, now=False)
        self._resume_deferred(spider, resume.deferred)
        resuming = f", resuming {len(resume.awaiting)} pages" if path else ""
        topic = self.config.decisions_topic
        logger.info("reading decisions from %s at offsets %s%s", topic, started, resuming)

    def _resume_deferred(self, spider: Any, deferred: list[tuple[str, int, int]]) -> None:
        """Links left over the budget by the previous run: still claimed by this crawl, so they
        bypass the seen filter (they were checked against scope when first scheduled)."""
        for url, depth, level in deferred:
            if self._take_budget(spider):
                request = spider.page_request(url, depth, level, **{LINK_META: True})
                self.crawler.engine.crawl(request.replace(dont_filter=True))
            else:
                self._deferred.append((url, depth, level))

    def spider_idle(self, spider: Any) -> None:
        if self.ledger.outstanding and not self._closing:
            raise DontCloseSpider

    async def spider_closed(self, spider: Any, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self.stats.set_value("dedup/outstanding_at_close", self.ledger.outstanding)
        self._count_saved()
        self._save_resume()
        await maybe_deferred_to_future(deferToThread(self.feed.stop))
        logger.info("%s", dedup_stats.summary(self.stats.get_stats(), reason))

    # ---- signals from the pipeline and the engine ----------------------------------------------

    def page_publishing(self, page: Page) -> None:
        if not self.ledger.outstanding:
            # The stall clock runs while decisions are owed; publishing more does not reset it.
            self._last_progress = time.monotonic()
        self.ledger.published(PageKey(page.url, page.fetched_at), page.depth, page.outlinks)

    def page_publish_failed(self, page: Page, error: Exception) -> None:
        self.ledger.publish_failed(PageKey(page.url, page.fetched_at))

    def request_dropped(self, request: Any, spider: Any) -> None:
        if request.meta.get(LINK_META):
            self.ledger.dropped(request.url)

    # ---- the poll loop -------------------------------------------------------------------------

    def _tick(self) -> None:
        if not self.crawler.crawling:  # stopping (Ctrl-C): schedule nothing more
            return
        try:
            decisions = self._decisions(self.feed.drain(DRAIN_LIMIT))
            self._apply(decisions)
            self._maybe_close()
        except Exception:
            # A failing tick must not kill the LoopingCall: the crawl would hang until timeout.
            logger.exception("applying decisions failed")
            self.stats.inc_value("dedup/scheduler_errors")

    def _decisions(self, items: list[Decision | ContractError]) -> list[Decision]:
        decisions = []
        for item in items:
            if isinstance(item, ContractError):
                self.stats.inc_value("dedup/decisions_invalid")
                logger.warning("ignoring an invalid decision message: %s", item)
            else:
                decisions.append(item)
        self.stats.inc_value("dedup/decisions_received", len(decisions))
        return decisions

    def _apply(self, decisions: list[Decision]) -> None:
        wanted: dict[str, tuple[PageKey, int, float]] = {}
        for decision in decisions:
            outcome = self.ledger.apply(decision)
            self.stats.inc_value(f"dedup/decisions_{outcome.action.value}")
            if outcome.action in (Action.FOREIGN, Action.DUPLICATE):
                continue
            self._last_progress = time.monotonic()
            self._count_verdict(decision)
            key = PageKey(decision.url, decision.fetched_at)
            if outcome.action is Action.FOLLOW:
                for url in self._in_scope(outcome.links, outcome.depth + 1):
                    self._want(wanted, url, key, outcome.depth + 1, decision.priority)
            self._suppress(outcome.suppressed, outcome.depth + 1)
            self._suppress(outcome.cancelled, outcome.depth + 1, scoped=False)
        self._schedule(wanted)

    def _count_verdict(self, decision: Decision) -> None:
        if decision.corrects:
            self.stats.inc_value("dedup/corrections")
            self.stats.inc_value(f"dedup/corrections/{decision.verdict.value}")
            logger.info(
                "correction: %s is a %s of %s",
                decision.url,
                decision.verdict.value,
                decision.duplicate_of,
            )
        else:
            self.stats.inc_value(f"{dedup_stats.VERDICT_PREFIX}{decision.verdict.value}")

    def _want(
        self,
        wanted: dict[str, tuple[PageKey, int, float]],
        url: str,
        source: PageKey,
        depth: int,
        priority: float,
    ) -> None:
        if url in wanted:
            if priority > wanted[url][2]:
                wanted[url] = (wanted[url][0], depth, priority)
            self.ledger.scheduled(url, source)  # a second source of a link already chosen
        elif self.ledger.claim(url, source) is Claim.NEW:
            wanted[url] = (source, depth, priority)
        else:
            self.stats.inc_value("dedup/outlinks_already_pending")

    def _in_scope(self, links: Iterable[str], depth: int) -> list[str]:
        spider = self.crawler.spider
        max_depth = getattr(spider, "max_depth", None)
        links = list(links)
        if max_depth is not None and depth > max_depth:
            self.stats.inc_value("dedup/outlinks_too_deep", len(links))
            return []
        kept = [url for url in links if self._allowed(url)]
        self.stats.inc_value("dedup/outlinks_offsite", len(links) - len(kept))
        return kept

    def _allowed(self, url: str) -> bool:
        """Allowed-domain check, cached per ``scheme://netloc`` (outlinks are canonical)."""
        end = url.find("/", url.find("//") + 2)
        origin = url if end < 0 else url[:end]
        allowed = self._origins.get(origin)
        if allowed is None:
            domains = tuple(getattr(self.crawler.spider, "allowed_domains", None) or ())
            allowed = domain_allowed(host_of(url), domains)
            if len(self._origins) > 100_000:
                self._origins.clear()
            self._origins[origin] = allowed
        return allowed

    def _schedule(self, wanted: dict[str, tuple[PageKey, int, float]]) -> None:
        if not wanted:
            return
        seen = seen_for(self.crawler)
        urls = list(wanted)
        fresh = seen.claim_many(urls)
        self.stats.inc_value("dedup/outlinks_seen", fresh.count(False))
        spider = self.crawler.spider
        for url, new in zip(urls, fresh, strict=True):
            if not new:
                self.ledger.dropped(url)
                continue
            source, depth, priority = wanted[url]
            level = request_priority(priority, self.config.priority_levels)
            if not self._take_budget(spider):
                self._over_budget(seen, url, depth, level)
                continue
            self.ledger.scheduled(url, source)
            self.crawler.engine.crawl(spider.page_request(url, depth, level, **{LINK_META: True}))
            self.stats.inc_value("dedup/outlinks_scheduled")

    def _take_budget(self, spider: Any) -> bool:
        max_pages = getattr(spider, "max_pages", None)
        if max_pages is not None and self._scheduled >= max_pages:
            self.stats.inc_value("dedup/outlinks_over_budget")
            return False
        self._scheduled += 1
        return True

    def _over_budget(self, seen: Any, url: str, depth: int, level: int) -> None:
        self.ledger.dropped(url)
        if self._resume_path() is not None:
            self._deferred.append((url, depth, level))  # a resumed crawl starts with these
        else:
            seen.release(url)  # never fetched: leave it to whoever wants it next

    def _suppress(self, links: Iterable[str], depth: int, scoped: bool = True) -> None:
        links = list(links)
        if not links:
            return
        self.stats.inc_value("dedup/outlinks_of_suppressed_pages", len(links))
        self.suppressed.update(self._in_scope(links, depth) if scoped else links)

    def _maybe_close(self) -> None:
        engine = self.crawler.engine
        if self._closing or engine is None or engine.spider is None:
            return
        if not self.ledger.outstanding:
            if _engine_idle(engine):
                self._close("finished")
        elif time.monotonic() - self._last_progress > self.config.decision_timeout:
            self._report_stall()
            self._close("dedup_stalled")

    def _report_stall(self) -> None:
        sample = next(iter(self.ledger.awaiting)).url
        self.stats.set_value("dedup/stalled_pages", self.ledger.outstanding)
        logger.error(
            "dedup pipeline stalled: %d published pages got no decision in %.0f s (e.g. %s). "
            "Is a dedup-worker consuming %r and producing %r on %s? Closing the spider; "
            "raise NEARDUP_DECISION_TIMEOUT if the workers are just slow.",
            self.ledger.outstanding,
            self.config.decision_timeout,
            sample,
            self.config.pages_topic,
            self.config.decisions_topic,
            self.config.kafka_bootstrap,
        )

    def _close(self, reason: str) -> None:
        self._closing = True
        deferred_from_coro(self.crawler.engine.close_spider_async(reason=reason))

    # ---- end of crawl --------------------------------------------------------------------------

    def _count_saved(self) -> None:
        """Suppressed outlinks that nobody fetched in the end are the bandwidth saved."""
        urls = sorted(self.suppressed)
        seen = seen_for(self.crawler)
        never = sum(1 for hit in seen.contains_many(urls) if not hit) if urls else 0
        self.stats.set_value("dedup/outlinks_suppressed", never)
        saved = dedup_stats.bytes_saved_estimate(never, self.stats.get_stats())
        self.stats.set_value("dedup/bytes_saved_estimate", saved)

    def _resume_path(self) -> Path | None:
        jobdir = self.crawler.settings.get("JOBDIR")
        return Path(jobdir) / RESUME_FILE if jobdir else None

    def _save_resume(self) -> None:
        path = self._resume_path()
        if path is None:
            return
        awaiting = [
            (k.url, k.fetched_at, p.depth, p.outlinks) for k, p in self.ledger.awaiting.items()
        ]
        scheduled = self._scheduled - len(self.crawler.spider.seeds)
        ResumeState(self.feed.start_offsets, awaiting, self._deferred, scheduled).save(path)


def _engine_idle(engine: Any) -> bool:
    try:
        return bool(engine.spider_is_idle())
    except RuntimeError:  # the engine is already closing the spider
        return False


class CancellableDownloadHandler(HTTP11DownloadHandler):
    """Scrapy's HTTP(S) handler, asking at the last moment whether a link was cancelled.

    Not a downloader middleware: middlewares run when a request leaves the scheduler, but with
    a download delay (AutoThrottle) requests then wait in the downloader's per-host queue, where
    a correction would miss them. The handler runs when the request really goes out.
    """

    async def download_request(self, request: Any) -> Any:
        if request.meta.get(LINK_META):
            self._going_out(request)
        return await super().download_request(request)

    def _going_out(self, request: Any) -> None:
        """A decision's outlink leaves: drop it if a correction cancelled it, unless a page of
        another process wanted it meanwhile (that process filtered it as seen)."""
        seen = seen_for(self._crawler)
        ledger = _LEDGERS.get(self._crawler)
        if ledger is None or ledger.start_fetch(request.url):
            seen.sent(request.url)
        elif seen.release_unwanted(request.url):  # un-claimed: another page may still want it
            self._crawler.stats.inc_value("dedup/requests_cancelled")
            raise IgnoreRequest(f"cancelled: its source page is a duplicate: {request}")
        else:
            self._crawler.stats.inc_value("dedup/requests_kept_wanted_elsewhere")
