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
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from scrapy.utils.request import request_from_dict
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThread

from crawler import stats as dedup_stats
from crawler.frontier import Held, PageKey, ResumeState
from crawler.links import LINK_META
from crawler.links_out import Want
from crawler.rules_setup import install_rules, uninstall_rules
from crawler.seen import past_the_filter
from crawler.session import NeardupSession
from crawler.sharing import BUSY, PEER_TIMEOUT
from dedup_worker.adapters.kafka import DecisionFeed
from dedup_worker.contract.messages import Decision
from dedup_worker.contract.predictions import PredictedDuplicate
from dedup_worker.errors import ContractError

logger = logging.getLogger(__name__)

RESUME_FILE = "neardup-resume.pickle"
DRAIN_LIMIT = 5000


class DecisionScheduler:
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
        self._sharing_failed_at: float | None = None  # monotonic time of the first failure

    @classmethod
    def from_crawler(cls, crawler: Any) -> Self:
        session = NeardupSession.of(crawler)
        if not session.config.publishing:
            raise NotConfigured("NEARDUP_KAFKA_BOOTSTRAP is not set: no decisions to schedule from")
        session.check_components()
        ext = cls(crawler, session)
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
        resume = (ResumeState.load(path) if path else None) or ResumeState()
        started = await maybe_deferred_to_future(deferToThread(self.feed.start, resume.offsets))
        self._resume_awaiting(spider, resume)
        self.links.budget.keep_deferred = path is not None
        self.links.budget.spent = resume.scheduled + len(getattr(spider, "seeds", None) or ())
        self.links.last_progress = time.monotonic()
        sharing = self.session.open_sharing()
        if sharing is not None:
            sharing.beat(BUSY)
        self._loop = LoopingCall(self._tick)
        self._loop.start(self.config.poll_interval, now=False)
        self._resume_deferred(spider, resume.deferred)
        self._resume_held_back(spider, resume)
        self._resume_waiting(spider, resume.waiting)
        resuming = f", resuming {len(resume.awaiting)} pages" if path else ""
        topic = self.config.decisions_topic
        logger.info("reading decisions from %s at offsets %s%s", topic, started, resuming)

    def _resume_awaiting(self, spider: Any, resume: ResumeState) -> None:
        ledger = self.links.ledger
        held_lists = resume.held or [[] for _ in resume.awaiting]
        for (url, fetched_at, depth, outlinks), held in zip(
            resume.awaiting, held_lists, strict=True
        ):
            key = PageKey(url, fetched_at)
            ledger.published(key, depth, outlinks, collecting=True)
            for serialised in held:
                request = request_from_dict(serialised, spider=spider)
                ledger.hold(key, Held(serialised["_neardup_url"], request))
            ledger.close(key)

    def _resume_deferred(self, spider: Any, deferred: list[Any]) -> None:
        """Requests left over the budget by the previous run: still claimed by this crawl, so
        they bypass the seen filter (they were checked against scope when first released)."""
        for serialised in deferred:
            request = request_from_dict(serialised, spider=spider)
            if self.links.take_budget():
                request.meta[LINK_META] = True
                self.crawler.engine.crawl(past_the_filter(request))
            else:
                self.links.budget.deferred.append(request)

    def _resume_waiting(self, spider: Any, waiting: list[tuple[str, float, int, Any]]) -> None:
        """Likely duplicates that waited for the idle moment wait for this run's (claimed by
        this crawl: past the filter when they go)."""
        for url, fetched_at, level, serialised in waiting:
            request = past_the_filter(request_from_dict(serialised, spider=spider))
            held = Held(serialised["_neardup_url"], request)
            self.links.budget.waiting.append(Want(held, PageKey(url, fetched_at), level))

    def _resume_held_back(self, spider: Any, resume: ResumeState) -> None:
        """What the URL rules held back when the previous run stopped: a waiting group's
        requests are followed (its sample's answer is gone), paced requests go out (claimed
        by this crawl and counted in its budget already)."""
        for url, fetched_at, depth, priority, serialised in resume.kept:
            held = [
                Held(s["_neardup_url"], request_from_dict(s, spider=spider)) for s in serialised
            ]
            self.links.release_held(PageKey(url, fetched_at), held, depth, priority)
        for serialised in resume.paced:
            request = request_from_dict(serialised, spider=spider)
            request.meta[LINK_META] = True
            self.crawler.engine.crawl(past_the_filter(request))

    def _predicted(self, prediction: PredictedDuplicate) -> None:
        publisher = self.session.publisher
        if publisher is not None:
            publisher.publish_prediction(prediction)

    def spider_idle(self, spider: Any) -> None:
        if self._closing:
            return
        if self.links.ledger.outstanding or self.links.settle() or self._shared_work():
            raise DontCloseSpider

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
        self._close_down(spider, reason)
        await maybe_deferred_to_future(deferToThread(self.feed.stop))
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
            self._leave_sharing()
            self._save_resume(spider)
        finally:  # whatever failed above, the rules' counts go out and their client closes
            self._close_rules()

    def _leave(self, leave: Callable[[], int], what: str) -> None:
        """Leave ``what`` to a later run (``leave`` says how many); the crawl is over, so a
        failure only leaves them claimed."""
        try:
            left = leave()
        except Exception:
            logger.exception("leaving the %s to a later run failed", what)
            return
        if left:
            logger.info(
                "%d %s left for a later run of crawl %r", left, what, self.session.crawl_id()
            )

    def _leave_counted(self) -> None:
        """The saved-bytes estimate asks Redis: a failure must not skip the last flush and
        the resume file that follow it."""
        try:
            self.links.count_saved()
        except Exception:
            logger.exception("counting the outlinks nobody fetched failed")

    def _leave_sharing(self) -> None:
        """The last flush (requests whose hand-over failed before), then out of the peer
        table; the store gives back what it took and did not use as it closes."""
        sharing, self.links.sharing = self.links.sharing, None
        if sharing is None:
            return
        try:
            sharing.flush()
        except Exception:  # the crawl is over: what stays in the outbox stays claimed
            logger.exception("handing the last requests over to the crawl failed")
        try:
            sharing.leave()
        except Exception:  # peers see this process's beat age out
            logger.exception("leaving the crawl's peer table failed")

    def _close_rules(self) -> None:
        installed, self.session.rules = self.session.rules, None
        if installed is None:
            return
        try:
            installed.close()
        except Exception:  # the crawl is over: counts lost, nothing else
            logger.exception("closing the URL rules failed")
        uninstall_rules(self.session)

    def _write_stats(self, reason: str) -> None:
        path = self.config.stats_file
        if not path:
            return
        stats = {
            key: value
            for key, value in self.stats.get_stats().items()
            if key.startswith(dedup_stats.PREFIX) or key == "elapsed_time_seconds"
        }
        stats["finish_reason"] = reason
        stats["crawl_id"] = self.session.crawl_id()
        try:
            Path(path).write_text(json.dumps(stats, indent=1, sort_keys=True, default=str))
        except OSError as exc:
            logger.error("cannot write NEARDUP_STATS_FILE %s: %s", path, exc)

    def request_dropped(self, request: Any, spider: Any) -> None:
        self.links.dropped(request)

    def request_reached_downloader(self, request: Any, spider: Any) -> None:
        self.links.reached_downloader(request)

    # ---- the poll loop -------------------------------------------------------------------------

    def _tick(self) -> None:
        if not self.crawler.crawling:  # stopping (Ctrl-C): schedule nothing more
            self.links.verdicts.release_all()
            return
        try:
            self.links.apply(self._decisions(self.feed.drain(DRAIN_LIMIT)))
            self._maybe_close()
            self._share()
        except Exception:
            # A failing tick must not kill the LoopingCall: the crawl would hang until timeout.
            logger.exception("applying decisions failed")
            self.stats.inc_value("dedup/scheduler_errors")

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
            if _engine_idle(engine) and not self.links.settle() and not self._shared_work():
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

    # ---- resume --------------------------------------------------------------------------------

    def _resume_path(self) -> Path | None:
        jobdir = self.crawler.settings.get("JOBDIR")
        return Path(jobdir) / RESUME_FILE if jobdir else None

    def _save_resume(self, spider: Any) -> None:
        path = self._resume_path()
        if path is None:
            return
        awaiting = self.links.ledger.awaiting
        pages = [(k.url, k.fetched_at, p.depth, p.outlinks) for k, p in awaiting.items()]
        held = [
            [self._serialise(h.request, spider, h.url) for h in p.held] for p in awaiting.values()
        ]
        deferred = [self._serialise(r, spider) for r in self.links.budget.deferred]
        # Requests sent, seeds included: the resumed run counts the seeds again as it opens,
        # and each one refused (claimed by this run) gives its place back.
        scheduled = self.links.budget.spent
        state = ResumeState(
            self.feed.start_offsets,
            pages,
            [d for d in deferred if d is not None],
            scheduled,
            [[d for d in page if d is not None] for page in held],
            kept=self._kept(spider),
            paced=_present([self._serialise(r, spider) for r in self.links.paced()]),
            waiting=[
                (w.source.url, w.source.fetched_at, w.level, serialised)
                for w in self.links.budget.waiting
                if (serialised := self._serialise(w.held.request, spider, w.held.url))
            ],
        )
        state.save(path)

    def _kept(self, spider: Any) -> list[tuple[str, float, int, float, list[Any]]]:
        """What the judge keeps back (a judge without ``held_back`` keeps nothing)."""
        held_back = getattr(self.links.judge, "held_back", None)
        groups = held_back() if held_back is not None else []
        return [
            (
                source.url,
                source.fetched_at,
                depth,
                priority,
                _present([self._serialise(h.request, spider, h.url) for h in held]),
            )
            for source, depth, priority, held in groups
        ]

    def _serialise(self, request: Any, spider: Any, url: str = "") -> dict[str, Any] | None:
        try:
            serialised: dict[str, Any] = request.to_dict(spider=spider)
        except ValueError as exc:  # a callback that is not a spider method, as Scrapy's queues
            self.stats.inc_value("dedup/resume_unserializable")
            logger.warning("cannot keep %s for a resume: %s", request, exc)
            return None
        serialised["_neardup_url"] = url
        return serialised


def _present(serialised: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    return [d for d in serialised if d is not None]


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
