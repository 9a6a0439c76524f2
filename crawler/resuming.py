"""What a ``JOBDIR`` crawl owes, saved at close and taken up again as it resumes: the part of
:class:`~crawler.scheduling.DecisionScheduler` that reads and writes the resume file (kept
apart so each module reads on its own; the state is the extension's)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from scrapy.utils.request import request_from_dict

from crawler.frontier import Held, PageKey, ResumeState
from crawler.jobdir import JobdirRun
from crawler.links import LINK_META, LinkScheduler
from crawler.links_out import Want
from crawler.seen import past_the_filter
from crawler.session import NeardupSession
from crawler.sharing import BUSY
from dedup_worker.adapters.kafka import DecisionFeed

logger = logging.getLogger(__name__)

#: The resume file, in ``JOBDIR``.
RESUME_FILE = "neardup-resume.pickle"


class Resuming:
    """Saving and taking up what the crawl owes (see the module docstring)."""

    crawler: Any
    stats: Any
    links: LinkScheduler
    feed: DecisionFeed
    session: NeardupSession
    jobdir_run: JobdirRun | None

    def _load_resume(self, path: Path | None) -> ResumeState:
        """The resume file; after a kill whose queue was discarded, only its budget count and
        journal: the killed run re-sent the rest (in its journal now, taken over), so sending
        it again fetched it twice."""
        resume = (ResumeState.load(path) if path else None) or ResumeState()
        if self.jobdir_run is None or self.jobdir_run.queue_kept:
            return resume
        return ResumeState(scheduled=resume.scheduled, journal=resume.journal)

    def _open_sharing(self, resume: ResumeState) -> None:
        """Work sharing (with a ``JOBDIR``: the journal the resume file names taken up, and
        the ``JOBDIR`` marked before the first beat). Redis failing here leaves this process
        crawling alone, without a journal (raising skipped the rest of the opening, and the
        crawl waited for ever); a failed first beat leaves the next to the poll."""
        run, left_by = self.jobdir_run, resume.journal
        try:
            sharing = self.session.open_sharing(
                left_by, run is None or run.queue_kept, run.killed if run is not None else ""
            )
        except Exception:
            logger.exception("work sharing failed to open: this process crawls alone")
            self.links.sharing = sharing = None
        if run is not None and (sharing is None or sharing.fingerprint is None):
            run.alone()
        if sharing is None:
            return
        if run is not None and sharing.fingerprint is not None:
            adopted = bool(left_by) and run.queue_kept
            run.started(sharing.token, adopted, resume_owes=_owes(resume))
        try:
            sharing.beat(BUSY)
        except Exception as exc:
            logger.warning("the first beat in the crawl's peer table failed: %s", exc)

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
            # Its outlinks all out now: the page leaves the journal (adopted from the run
            # before, its entry stayed for good, and a kill fetched the page again).
            self.links.settle_page(PageKey(url, fetched_at))
        for serialised in resume.paced:
            request = request_from_dict(serialised, spider=spider)
            request.meta[LINK_META] = True
            self.crawler.engine.crawl(past_the_filter(request))

    def _resume_path(self) -> Path | None:
        jobdir = self.crawler.settings.get("JOBDIR")
        return Path(jobdir) / RESUME_FILE if jobdir else None

    def _save_resume(self, spider: Any, journal: str = "") -> None:
        """The resume file; ``journal``: the process whose journal this run kept for the
        resume (its token), adopted by the resumed run."""
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
            journal=journal,
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


def _owes(resume: ResumeState) -> bool:
    """Whether the resume file holds pages or requests for this run."""
    return bool(resume.awaiting or resume.deferred or resume.paced or resume.waiting)


def _present(serialised: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    return [d for d in serialised if d is not None]
