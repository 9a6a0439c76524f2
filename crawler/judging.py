"""The two places a crawl's policy meets its requests (pure: no Scrapy, Kafka or Redis).

:class:`OutlinkJudge`: **the outlinks of a decided page become requests here.** When a page's
decision applies, the link scheduler (:class:`crawler.links.LinkScheduler`) hands the judge the
page (its decision, its outlinks as published, the requests its callback yielded) and releases
what the judge follows; what it drops is counted as suppressed. The default,
:class:`DecisionJudge`, takes the decision's word: a new page's requests are followed (those
among the page's outlinks only if the decision lists them), a duplicate's are dropped.
A judge for duplicates' outlinks (issue 13: :func:`crawler.rules.counterparts.judge_outlinks`
splits them into new content, followed, and predicted duplicates, sampled) returns the new
content and the sample in ``follow`` and keeps the rest itself, to release later with
:meth:`crawler.links.LinkScheduler.release_held` or drop with
:meth:`~crawler.links.LinkScheduler.drop_held`.

:class:`RequestGate`: **a request is about to be scheduled here**, once per released request,
after the judge and the scope checks and before the seen-set claim (so a skipped URL stays
unclaimed for the rest of the crawl). The default admits everything; a gate that predicts a
URL duplicates a fetched page (issue 13: a learned URL rule,
:meth:`crawler.rules.shared.SharedRules.predict`) returns the reason to skip it, counted as
``dedup/requests_skipped/<reason>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from crawler.frontier import Held
from dedup_worker.contract.messages import Decision
from dedup_worker.contract.reading import PageKey

__all__ = [
    "AdmitAll",
    "DecidedPage",
    "DecisionJudge",
    "Judgement",
    "OutlinkJudge",
    "RequestGate",
]


@dataclass(frozen=True)
class DecidedPage:
    """A page whose decision applies now, with what its callback yielded."""

    key: PageKey
    depth: int
    outlinks: tuple[str, ...]  # the page's outlinks as published (canonical)
    decision: Decision  # its standing decision (a correction when one overtook the first)
    held: tuple[Held, ...]  # the requests its callback yielded, in order

    @property
    def duplicate(self) -> bool:
        return not self.decision.follow_outlinks or self.decision.corrects


@dataclass(frozen=True)
class Judgement:
    """``follow``: release now; ``drop``: never (counted as suppressed). A request in neither
    stays with the judge."""

    follow: tuple[Held, ...] = ()
    drop: tuple[Held, ...] = ()


class OutlinkJudge(Protocol):
    def judge(self, page: DecidedPage) -> Judgement: ...


class DecisionJudge:
    """The decision's word: a duplicate's requests are dropped; a new page's are followed,
    except its outlinks the decision leaves out of ``outlinks`` (requests for URLs that are
    not outlinks of the page, an API call or a form, say, the decision says nothing about)."""

    def judge(self, page: DecidedPage) -> Judgement:
        if page.duplicate:
            return Judgement(drop=page.held)
        chosen = set(page.decision.outlinks)
        outlinks = set(page.outlinks)
        follow: list[Held] = []
        drop: list[Held] = []
        for held in page.held:
            wanted = held.url in chosen or held.url not in outlinks
            (follow if wanted else drop).append(held)
        return Judgement(tuple(follow), tuple(drop))


class RequestGate(Protocol):
    def admit(self, url: str, source: PageKey) -> str | None:
        """None to schedule ``url`` (canonical; wanted by page ``source``), else the reason
        it is skipped (a short stats-key word)."""
        ...


class AdmitAll:
    def admit(self, url: str, source: PageKey) -> str | None:
        return None
