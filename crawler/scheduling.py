"""Scheduling from decisions: the extension that reads the worker's verdicts and keeps the
crawl open while they are owed.

:class:`DecisionScheduler` (an ``EXTENSIONS`` entry) reads ``decisions`` on a background thread
(:class:`~dedup_worker.adapters.kafka.DecisionFeed`) and drains it from the reactor with a
``LoopingCall``; the link scheduler (:class:`~crawler.links.LinkScheduler`) applies each
decision about one of this process's pages: the page's held requests are released for a new
page, dropped (counted as suppressed) for a duplicate; a correction cancels the released ones
still waiting.

The spider stays open (``spider_idle`` + ``DontCloseSpider``, as scrapy-redis does) while
published pages await decisions, and closes as soon as nothing is pending; if no decision comes
for ``NEARDUP_DECISION_TIMEOUT`` seconds, it closes with reason ``dedup_stalled``. With
``JOBDIR``, what the crawl still owes (the decisions topic's offsets, the pages awaiting a
decision with their held requests, the requests over the ``max_pages`` budget) is saved at close
and taken up again when the crawl resumes.

With ``NEARDUP_RULES`` (the default) the extension also installs the crawl's URL rules as the
spider opens (:func:`crawler.rules_setup.install_rules`: a duplicate's outlinks judged against
its keeper's, URLs skipped by rule), lets them release what waits for samples before the crawl
may close, and with ``NEARDUP_STATS_FILE`` writes the ``dedup/*`` stats as JSON at close.

Two parts of the extension have modules of their own: :mod:`crawler.resuming` reads and writes
the resume file, :mod:`crawler.closing` leaves what the crawl owes as it closes.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Self

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThread

from crawler import stats as dedup_stats
from crawler.closing import Closing
from crawler.jobdir import JobdirRun
from crawler.process_stops import ProcessStops
from crawler.resuming import RESUME_FILE, Resuming
from crawler.rules_setup import install_rules
from crawler.session import NeardupSession
from crawler.sharing import BUSY, PEER_TIMEOUT
from dedup_worker.adapters.kafka import DecisionFeed
from dedup_worker.contract.messages import Decision
from dedup_worker.contract.predictions import PredictedDuplicate
from dedup_worker.errors import ContractError

logger = logging.getLogger(__name__)

__all__ = ["RESUME_FILE", "DecisionScheduler"]  # RESUME_FILE: its place before 29 Nov

DRAIN_LIMIT = 5000
#: Seconds this process must have been stopped at once for the stall clock to leave them out.
STOP_FORGIVEN_FROM = 1.0


class DecisionScheduler(Resuming, Closing):
    """Scrapy extension: reads this crawl's decisions and decides when the crawl is over."""

    def __init__(self, crawler: Any, session: NeardupSession) -> None:
        self.crawler = crawler
        self.session = session
        self.config = session.config
        self.stats = crawler.stats
        self.links = session.links
        self.feed = DecisionFeed(self.config.kafka(), self.config.decisions_topic)
        self._loop: LoopingCall | None = None
        self._closing = False
        self._spider_closing = False  # spider_closed came: nothing will be downloaded
        self._sharing_failed_at: float | None = None  # monotonic time of the first failure
        self._stops = ProcessStops()  # time the process did not run: not the workers' stall
        jobdir = crawler.settings.get("JOBDIR")
        self.jobdir_run = JobdirRun(Path(jobdir)) if jobdir else None

    @classmethod
    def from_crawler(cls, crawler: Any) -> Self:
        session = NeardupSession.of(crawler)
        if not session.config.publishing:
            raise NotConfigured("NEARDUP_KAFKA_BOOTSTRAP is not set: no decisions to schedule from")
        session.check_components()
        ext = cls(crawler, session)
        if ext.jobdir_run is not None:  # before Scrapy's scheduler opens the queue
            ext.jobdir_run.open(journals=session.config.share_work and session.config.shared_seen)
        connect = crawler.signals.connect
        connect(ext.spider_opened, signal=signals.spider_opened)
        connect(ext.spider_idle, signal=signals.spider_idle)
        connect(ext.spider_closed, signal=signals.spider_closed)
        connect(ext.request_dropped, signal=signals.request_dropped)
        connect(ext.request_reached_downloader, signal=signals.request_reached_downloader)
        return ext

    # ---- lifecycle ---------------------------------------------------------------------------

    async def spider_opened(self, spider: Any) -> None:
        if self.config.rules:
            crawl_id = self.session.crawl_id()
            self.session.rules = install_rules(self.session, self.stats, crawl_id, self._predicted)
        path = self._resume_path()
        resume = self._load_resume(path)
        started = await maybe_deferred_to_future(deferToThread(self.feed.start, resume.offsets))
        self._resume_awaiting(spider, resume)
        self.links.budget.keep_deferred = path is not None
        self.links.budget.spent = resume.scheduled + len(getattr(spider, "seeds", None) or ())
        self.links.last_progress = time.monotonic()
        self._open_sharing(resume)
        self._stops.start()
        self._loop = LoopingCall(self._tick)
        self._loop.start(self.config.poll_interval, now=False)
        self._resume_deferred(spider, resume.deferred)
        self._resume_held_back(spider, resume)
        self._resume_waiting(spider, resume.waiting)
        resuming = f", resuming {len(resume.awaiting)} pages" if path else ""
        topic = self.config.decisions_topic
        logger.info("reading decisions from %s at offsets %s%s", topic, started, resuming)

    def _predicted(self, prediction: PredictedDuplicate) -> None:
        publisher = self.session.publisher
        if publisher is not None:
            publisher.publish_prediction(prediction)

    def spider_idle(self, spider: Any) -> None:
        if self._closing:
            return
        if self.links.ledger.outstanding or self._work_left():
            raise DontCloseSpider

    def _work_left(self) -> bool:
        """Nothing is owed a decision: what waited for this moment goes out now (True), the
        crawl's shared work first, the likely duplicates taken from it last."""
        return self.links.settle() or self._shared_work() or self.links.send_likely_later()

    def _shared_work(self) -> bool:
        """The crawl's other processes handed requests over (they go out now), or one of them
        is busy and may still (:mod:`crawler.sharing`).

        If the store fails (Redis restarting), the spider stays open and asks again: an
        exception here would close an idle spider (Scrapy logs what ``spider_idle`` raises and
        closes) while a peer may be handing it links. After ``PEER_TIMEOUT`` seconds of failures
        it gives up sharing and may close, as if every peer had gone silent."""
        sharing = self.links.sharing
        if sharing is None:
            return False
        try:
            # What went out leaves this process's journal before it beats HUNGRY: a peer
            # waits for a HUNGRY process whose journal holds requests (killed while idle).
            self.session.seen().flush()
            shared = self.links.take_shared() or sharing.waits_for_peers(self.links.budget.room())
        except Exception:
            now = time.monotonic()
            self._sharing_failed_at = self._sharing_failed_at or now
            self.stats.inc_value("dedup/sharing_errors")
            logger.exception("the crawl's shared work is out of reach (Redis?); asking again")
            return now - self._sharing_failed_at < PEER_TIMEOUT
        self._sharing_failed_at = None
        return shared

    async def spider_closed(self, spider: Any, reason: str) -> None:
        self._spider_closing = True  # also closed otherwise than by Ctrl-C (CLOSESPIDER_*)
        await self._await_decisions(reason)
        self._close_down(spider, reason)
        if self.jobdir_run is not None:  # closed well: Scrapy's queue, the resume file written
            self.jobdir_run.closed()
        await maybe_deferred_to_future(deferToThread(self.feed.stop))
        self._stops.stop()
        self._write_stats(reason)
        logger.info("%s", dedup_stats.summary(self.stats.get_stats(), reason))

    def _close_down(self, spider: Any, reason: str) -> None:
        """What the close leaves behind, in this order: requests over the budget kept for a
        ``JOBDIR`` resume, else handed to a live peer or un-claimed; failed fetches, and after a
        stop before the end what the queue and the undecided pages hold, left for a later run;
        then the resume file. The URL rules close last: the resume file and the undecided pages
        take the requests their judge holds back (closed first, it was gone, and a ``JOBDIR``
        resume never followed them)."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        try:
            self.links.verdicts.release_all()
            self.stats.set_value("dedup/outstanding_at_close", self.links.ledger.outstanding)
            self.links.close_budget_waiting()
            self._leave(self.links.leave_failed, "requests whose download failed")
            if reason != "finished":
                self._leave(self.links.leave_queue, "queued requests")
                self._leave(self.links.leave_undecided, "requests of pages without a decision")
            self._leave_counted()  # after the leaving: what a later run will fetch is claimed
            keep = self.jobdir_run is not None and self.jobdir_run.keeps_journal
            self._leave_sharing(lambda journal: self._save_resume(spider, journal), keep)
        finally:  # whatever failed above, the rules' counts go out and their client closes
            self._close_rules()

    def request_dropped(self, request: Any, spider: Any) -> None:
        self.links.dropped(request)

    def request_reached_downloader(self, request: Any, spider: Any) -> None:
        self.links.reached_downloader(request)

    # ---- the poll loop -------------------------------------------------------------------------

    def _tick(self) -> None:
        self._forgive_missed_time()
        stopping = not self.crawler.crawling or self._spider_closing  # nothing more goes out
        if stopping:
            self.links.verdicts.release_all()
            self._beat_while_stopping()
            if not self._decides_while_stopping():
                return
        try:
            decisions = self._decisions(self.feed.drain(DRAIN_LIMIT))
            self.links.apply(decisions)
            if stopping:  # what they release waits in the queue, handed over at the close
                self.stats.inc_value("dedup/decisions_applied_while_stopping", len(decisions))
                return
            self._maybe_close()
            self._share()
        except Exception:
            # A failing tick must not kill the LoopingCall: the crawl would hang until timeout.
            logger.exception("applying decisions failed")
            self.stats.inc_value("dedup/scheduler_errors")

    def _forgive_missed_time(self) -> None:
        """Time this process did not run (paused: Ctrl-Z, a debugger; or starved) does not count
        against the workers: the decisions came meanwhile and wait in the topic. Counted, a
        spider paused past ``NEARDUP_DECISION_TIMEOUT`` closed as ``dedup_stalled`` the moment
        it resumed, before its first look at them (``crawler.process_stops``)."""
        stopped = self._stops.take()
        if stopped >= STOP_FORGIVEN_FROM:
            self.links.last_progress += stopped

    def _beat_while_stopping(self) -> None:
        """Scrapy's close waits for the downloads in flight (up to ``DOWNLOAD_TIMEOUT``), then
        the grace: a process silent that long would be taken over by its peers, its journal
        pushed while it hands the same requests over itself (fetched twice)."""
        sharing = self.links.sharing
        if sharing is None or not sharing.due():
            return
        try:
            sharing.beat(BUSY)
        except Exception as exc:  # the next tick tries again
            logger.warning("beating while stopping failed: %s", exc)

    def _decides_while_stopping(self) -> bool:
        """A spider stopped before the end hands what it owes to the crawl's shared list: the
        decisions of its last pages still judge their links until it closes (``JOBDIR`` saves
        those pages and reads their decisions when it resumes instead)."""
        return (
            self.config.stop_grace > 0
            and self.links.sharing is not None
            and not self.links.budget.keep_deferred
        )

    async def _await_decisions(self, reason: str) -> None:
        """Stopped before the end (not stalled): wait up to ``NEARDUP_STOP_GRACE`` for the
        decisions of the pages still awaiting one. Their links then go to the shared list
        judged: a duplicate's are dropped, or followed or held back by its judge, where left
        undecided each one cost a later run a fetch."""
        ledger = self.links.ledger
        if reason in ("finished", "dedup_stalled") or not ledger.outstanding:
            return
        if not self._decides_while_stopping() or self._loop is None:
            return
        waiting, grace = ledger.outstanding, self.config.stop_grace
        logger.info("waiting up to %.0f s for the decisions of %d pages", grace, waiting)
        deadline = time.monotonic() + grace
        while ledger.outstanding and time.monotonic() < deadline and self._loop.running:
            await _pause(self.config.poll_interval)  # the poll loop applies them meanwhile
        self.stats.set_value("dedup/stop_grace_decided", waiting - ledger.outstanding)
        self.stats.set_value(
            "dedup/stop_grace_seconds", round(grace - deadline + time.monotonic(), 2)
        )

    def _share(self) -> None:
        """Hand over what this poll gave away; beat BUSY while there is work here (an idle
        process beats HUNGRY in ``_shared_work``)."""
        sharing = self.links.sharing
        if sharing is None or self._closing:
            return
        sharing.flush()
        engine = self.crawler.engine
        busy = bool(self.links.ledger.outstanding) or engine is None or not _engine_idle(engine)
        if busy and sharing.due():
            sharing.beat(BUSY)

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

    def _maybe_close(self) -> None:
        engine = self.crawler.engine
        if self._closing or engine is None or engine.spider is None:
            return
        if not self.links.ledger.outstanding:
            if _engine_idle(engine) and not self._work_left():
                self._close("finished")
        elif time.monotonic() - self.links.last_progress > self.config.decision_timeout:
            self._report_stall()
            self._close("dedup_stalled")

    def _report_stall(self) -> None:
        ledger = self.links.ledger
        sample = next(iter(ledger.awaiting)).url
        self.stats.set_value("dedup/stalled_pages", ledger.outstanding)
        logger.error(
            "dedup pipeline stalled: %d published pages got no decision in %.0f s (e.g. %s). "
            "Is a dedup-worker consuming %r and producing %r on %s? Closing the spider; "
            "raise NEARDUP_DECISION_TIMEOUT if the workers are just slow.",
            ledger.outstanding,
            self.config.decision_timeout,
            sample,
            self.config.pages_topic,
            self.config.decisions_topic,
            self.config.kafka_bootstrap,
        )

    def _close(self, reason: str) -> None:
        self._closing = True
        self.links.verdicts.release_all()
        deferred_from_coro(self.crawler.engine.close_spider_async(reason=reason))


async def _pause(seconds: float) -> None:
    """Let the reactor run (the poll loop among it) for ``seconds``."""
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    await maybe_deferred_to_future(deferLater(reactor, seconds))


def _engine_idle(engine: Any) -> bool:
    try:
        return bool(engine.spider_is_idle())
    except RuntimeError:  # the engine is already closing the spider
        return False


def __getattr__(name: str) -> Any:
    """``crawler.scheduling.CancellableDownloadHandler``, the handler's path before it got a
    module of its own, keeps working for settings written against it."""
    if name == "CancellableDownloadHandler":
        from crawler.download_handler import CancellableDownloadHandler

        return CancellableDownloadHandler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
