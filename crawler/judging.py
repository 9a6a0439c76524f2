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
``dedup/requests_skipped/<reason>``. Its :meth:`~RequestGate.admit_fetch` is asked again as a
released request leaves for the network (from the download handler): most links are queued
before the decisions that make a rule confident arrive, so a second look just before fetching
saves what the first could not. A skip there is counted under the same key; the URL stays
claimed (nobody else fetches it). ``admit_fetch`` may also answer :data:`HOLD`: the link
scheduler keeps the request back and sends it out again when the gate names its URL to
:meth:`crawler.links.LinkScheduler.release_paced` (issue 13: a candidate rule has enough checks
in flight, :mod:`crawler.rules.pacing`); the gate must release everything it holds when the
observer is asked to ``settle``.

:class:`DecisionObserver`: **every decision the crawler reads**, those of other processes'
pages included, before any is applied (learning URL rules from them, resolving a judge's
samples); and :meth:`~DecisionObserver.settle`, asked when the crawl has nothing left to
fetch, so that whatever waits for a decision that will never come (a sample that could not be
fetched) is released instead of holding the crawl open or losing its requests.

The implementations of issue 13 are :class:`crawler.crawl_rules.CrawlRules` (gate, observer)
and :class:`crawler.subtree_judge.SubtreeJudge` (judge).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from crawler.frontier import Held
from dedup_worker.contract.messages import Decision
from dedup_worker.contract.reading import PageKey

__all__ = [
    "HOLD",
    "AdmitAll",
    "DecidedPage",
    "DecisionJudge",
    "DecisionObserver",
    "IgnoreDecisions",
    "Judgement",
    "OutlinkJudge",
    "RequestGate",
]


#: What :meth:`RequestGate.admit_fetch` answers to keep a request back for a while.
HOLD = "hold"


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

    def admit_fetch(self, url: str) -> str | None:
        """None to fetch ``url`` (a released request about to go out), :data:`HOLD` to keep it
        back until the gate releases it, else why it is skipped."""
        ...


class AdmitAll:
    def admit(self, url: str, source: PageKey) -> str | None:
        return None

    def admit_fetch(self, url: str) -> str | None:
        return None

    def likely_duplicate(self, url: str, queued: Callable[[str], bool] | None = None) -> bool:
        """Whether ``url`` (canonical) is most likely a copy of a page fetched or ``queued``:
        optional (:mod:`crawler.links` asks it under a budget; a gate without it: never)."""
        return False


class DecisionObserver(Protocol):
    def observe(self, decisions: Sequence[Decision]) -> None:
        """Every decision read in one poll (possibly none: called every poll), in order."""
        ...

    def settle(self) -> bool:
        """Nothing is left to fetch: release what waits; True if requests were released."""
        ...


class IgnoreDecisions:
    def observe(self, decisions: Sequence[Decision]) -> None:
        pass

    def settle(self) -> bool:
        return False
