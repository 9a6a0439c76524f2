"""Pure bookkeeping of decision-driven scheduling: no Scrapy, Kafka or Redis here.

:class:`Ledger` tracks this process's pages from publication to decision, the requests their
callbacks yielded (*held* until the decision), and the requests released from each followed
page until they are fetched, so that

- only decisions for pages this process published are applied (key: URL + fetch time);
- duplicated decisions (the broker may redeliver, aborted transactions may show) change nothing,
  and a correction is final for its page: the contract's reading rule
  (:func:`dedup_worker.contract.reading.next_step`) says which decisions are new;
- a decision that arrives while the page's callback is still yielding requests waits for the
  last of them (the page is *collecting*), so a page's requests are judged together, once;
- a correction names the page's requests still waiting in the scheduler (``cancelled``), unless
  another followed page also wants them; the link scheduler drops them, or with the URL rules
  keeps them (:meth:`Ledger.revive`).

Requests are opaque here (:class:`Held` carries the canonical URL and the request object).
"""

from __future__ import annotations

import logging
import math
import pickle
from collections.abc import Iterable, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any

from dedup_worker.contract.messages import Decision
from dedup_worker.contract.reading import PageKey, Standing, Step, next_step, page_key

logger = logging.getLogger(__name__)


__all__ = [
    "Action",
    "Claim",
    "Held",
    "Ledger",
    "Outcome",
    "PageKey",
    "Published",
    "ResumeState",
    "domain_allowed",
    "judged_last",
    "request_priority",
]


class Action(Enum):
    FOREIGN = "foreign"  # not a page of this process: ignored
    DUPLICATE = "duplicate"  # already applied (or overridden by a correction): ignored
    WAITING = "waiting"  # the page is still collecting its requests: applied when it closes
    FOLLOW = "follow"  # release the page's ``held`` requests (those the judge follows)
    SUPPRESS = "suppress"  # do not follow: the page's ``held`` requests are dropped
    CORRECT = "correct"  # ``cancelled`` links not yet fetched (and anything still held)


@dataclass(frozen=True)
class Held:
    """A request a callback yielded from a page, held until the page's decision."""

    url: str  # canonical, the form a page's outlinks take
    request: Any  # a scrapy.Request, opaque here


@dataclass
class Published:
    """A page awaiting its decision."""

    depth: int
    outlinks: tuple[str, ...]
    held: list[Held] = field(default_factory=list)
    collecting: bool = False  # its callback may still yield requests
    decision: Decision | None = None  # arrived while collecting: applied when it closes


@dataclass(frozen=True)
class Outcome:
    action: Action
    depth: int = 0
    links: tuple[str, ...] = ()  # FOLLOW: the decision's outlinks (the ones to schedule)
    suppressed: tuple[str, ...] = ()  # SUPPRESS, CORRECT of an awaiting page: its outlinks
    cancelled: tuple[str, ...] = ()  # CORRECT of a followed page: released links to drop
    decision: Decision | None = None
    outlinks: tuple[str, ...] = ()  # the page's own outlinks, as published
    held: tuple[Held, ...] = ()  # the requests its callback yielded


def overtaken(
    ready: Sequence[Outcome], decisions: Sequence[Decision]
) -> tuple[list[Outcome], set[PageKey]]:
    """Outcomes waiting for this poll (decided while their page collected) whose page this
    poll corrects become the correction's: their held requests are judged as a duplicate's.
    Applied after the correction, a stale "follow" released them unjudged: the correction
    found no link of the page released yet. Returns the outcomes and the corrected pages,
    whose correction's own outcome (nothing left to cancel) is not handled again."""
    corrections = {page_key(d): d for d in decisions if d.corrects}
    out, keys = [], set()
    for waiting in ready:
        decision = waiting.decision
        key = page_key(decision) if decision is not None else None
        if key is not None and key in corrections and waiting.action is not Action.CORRECT:
            keys.add(key)
            out.append(replace(
                waiting, action=Action.CORRECT, links=(), suppressed=waiting.outlinks,
                decision=corrections[key],
            ))  # fmt: skip
        else:
            out.append(waiting)
    return out, keys


class Claim(Enum):
    NEW = "new"  # not pending here: schedule it (if the seen filter agrees)
    PENDING = "pending"  # already waiting in this process's scheduler: source recorded


@dataclass
class Ledger:
    """Pages awaiting a decision with their held requests, decided pages' standing decisions,
    and released links with the pages that want them."""

    awaiting: dict[PageKey, Published] = field(default_factory=dict)
    #: This process's pages: the standing decision of each, None while awaiting one.
    pages: dict[PageKey, Standing | None] = field(default_factory=dict)
    _children: dict[PageKey, set[str]] = field(default_factory=dict)
    _sources: dict[str, set[PageKey]] = field(default_factory=dict)
    _cancelled: set[str] = field(default_factory=set)

    @property
    def outstanding(self) -> int:
        """Published pages still waiting for their decision."""
        return len(self.awaiting)

    def published(
        self, key: PageKey, depth: int, outlinks: tuple[str, ...], collecting: bool = False
    ) -> None:
        """A page goes to the broker; ``collecting``: its requests follow (:meth:`hold`),
        then :meth:`close`."""
        if key not in self.pages:
            self.awaiting[key] = Published(depth, outlinks, collecting=collecting)
            self.pages[key] = None

    def hold(self, key: PageKey, held: Held) -> bool:
        """Hold a request of a collecting page; False if the page is not awaiting a decision
        (its publication failed): the caller lets the request through."""
        page = self.awaiting.get(key)
        if page is None or not page.collecting:
            return False
        page.held.append(held)
        return True

    def close(self, key: PageKey) -> Outcome | None:
        """The page's callback yielded its last request: a decision that came meanwhile
        applies now (its outcome), else the page waits for it (None)."""
        page = self.awaiting.get(key)
        if page is None or not page.collecting:
            return None
        page.collecting = False
        if page.decision is None:
            return None
        del self.awaiting[key]
        return self._decide(key, page, page.decision)

    def publish_failed(self, key: PageKey) -> list[Held]:
        """The page never reached the broker: no decision will come for it. Returns the
        requests it held (the caller lets them through)."""
        page = self.awaiting.pop(key, None)
        if page is None:
            return []
        del self.pages[key]
        page.collecting = False
        return page.held

    def apply(self, decision: Decision) -> Outcome:
        key = page_key(decision)
        if key not in self.pages:
            return Outcome(Action.FOREIGN, decision=decision)
        held = self.pages[key]
        step = next_step(held, decision)
        if step is Step.REPEAT or (held is not None and held.corrects):
            # Nothing new, or a correction of a corrected page (to an earlier original):
            # its links were dealt with already.
            return Outcome(Action.DUPLICATE, decision=decision)
        self.pages[key] = Standing.of(decision)
        page = self.awaiting.get(key)
        if page is not None and page.collecting:
            page.decision = decision  # the standing one: a correction replaces a first decision
            return Outcome(Action.WAITING, decision=decision)
        self.awaiting.pop(key, None)
        if page is None:  # decided and closed already: only a correction gets here
            return self._cancel(key, decision)
        return self._decide(key, page, decision)

    def _decide(self, key: PageKey, page: Published, decision: Decision) -> Outcome:
        held = tuple(page.held)
        if decision.corrects:  # the correction overtook the first decision
            return Outcome(
                Action.CORRECT, page.depth, suppressed=page.outlinks, decision=decision,
                outlinks=page.outlinks, held=held,
            )  # fmt: skip
        if decision.follow_outlinks:
            return Outcome(
                Action.FOLLOW, page.depth, tuple(decision.outlinks), decision=decision,
                outlinks=page.outlinks, held=held,
            )  # fmt: skip
        return Outcome(
            Action.SUPPRESS, page.depth, suppressed=page.outlinks, decision=decision,
            outlinks=page.outlinks, held=held,
        )  # fmt: skip

    def _cancel(self, key: PageKey, decision: Decision) -> Outcome:
        cancelled = []
        for url in sorted(self._children.pop(key, set())):
            sources = self._sources.get(url)
            if sources is None:
                continue
            sources.discard(key)
            if not sources:
                del self._sources[url]
                self._cancelled.add(url)
                cancelled.append(url)
        return Outcome(Action.CORRECT, cancelled=tuple(cancelled), decision=decision)

    def revive(self, urls: Iterable[str], source: PageKey) -> None:
        """Links a correction of ``source`` cancelled go out after all, still its children."""
        for url in urls:
            if url in self._cancelled:
                self._cancelled.discard(url)
                self._link(url, source)

    def claim(self, url: str, source: PageKey) -> Claim:
        """Record that ``source`` wants ``url``; PENDING if it already waits in the scheduler."""
        if url in self._cancelled:
            # Still queued in the scheduler: revive it for this source instead of re-queueing.
            self._cancelled.discard(url)
            self._link(url, source)
            return Claim.PENDING
        if url in self._sources:
            self._link(url, source)
            return Claim.PENDING
        return Claim.NEW

    def scheduled(self, url: str, source: PageKey) -> None:
        """``url`` entered the scheduler on behalf of ``source``."""
        self._link(url, source)

    def dropped(self, url: str) -> None:
        """The scheduler refused ``url`` (filtered): nothing to track."""
        for source in self._sources.pop(url, set()):
            self._children.get(source, set()).discard(url)

    def start_fetch(self, url: str) -> bool:
        """Called as a scheduled link leaves the scheduler; False means drop it (cancelled)."""
        if url in self._cancelled:
            self._cancelled.discard(url)
            return False
        self.dropped(url)  # being fetched now: a correction can no longer save it
        return True

    def waiting(self, url: str) -> bool:
        """Whether ``url`` waits in the scheduler for a page that still wants it."""
        return url in self._sources

    def is_tracked(self, url: str) -> bool:
        return url in self._sources or url in self._cancelled

    def _link(self, url: str, source: PageKey) -> None:
        self._sources.setdefault(url, set()).add(source)
        self._children.setdefault(source, set()).add(url)


def request_priority(priority: float, levels: int = 100) -> int:
    """Map a decision's priority in [0, 1] to a Scrapy request priority in 0..levels.

    Scrapy keeps one queue per distinct priority value (one directory each with JOBDIR), so the
    float is bucketed into ``levels`` steps; out-of-range values are clamped, NaN is lowest.
    """
    if not math.isfinite(priority):
        return 0
    return round(min(max(priority, 0.0), 1.0) * levels)


def domain_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """Scrapy's offsite rule: the domain itself or any subdomain of it; empty = everything."""
    if not allowed:
        return True
    return any(host == domain or host.endswith("." + domain) for domain in allowed)


@dataclass
class ResumeState:
    """What a crawl stopped with ``JOBDIR`` needs to go on (Scrapy keeps the request queue).

    ``awaiting``: pages published without a decision yet, re-read from ``offsets`` of
    ``decisions`` (url, fetched_at, depth, outlinks), and ``held``, the requests each of them
    held (serialised requests, in the same order); ``deferred``: serialised requests over the
    ``NEARDUP_MAX_PAGES`` budget, still claimed in the seen set, scheduled first when the crawl
    resumes; ``scheduled``: the budget already spent (requests sent, seeds included; before 29
    Nov without the seeds); ``kept``, ``paced`` and ``waiting``: what the URL rules
    held back (below). Saved with pickle, as Scrapy saves the
    request queue of the same ``JOBDIR``.
    """

    offsets: dict[int, int] = field(default_factory=dict)
    awaiting: list[tuple[str, float, int, tuple[str, ...]]] = field(default_factory=list)
    deferred: list[Any] = field(default_factory=list)
    scheduled: int = 0
    held: list[list[Any]] = field(default_factory=list)
    #: Requests a judge kept back for a decided page (a duplicate's outlinks waiting on a
    #: sample): (url, fetched_at, depth, decision priority, serialised requests) per page.
    #: Followed when the crawl resumes: the sample's answer is gone, and following can only
    #: cost fetches, never lose a page.
    kept: list[tuple[str, float, int, float, list[Any]]] = field(default_factory=list)
    #: Requests the URL rules held back just before fetching (claimed by this crawl, budget
    #: spent): sent out when the crawl resumes.
    paced: list[Any] = field(default_factory=list)
    #: Likely duplicates waiting for the crawl's idle moment (claimed by this crawl, no place
    #: taken): (source url, source fetched_at, priority level, serialised request) each. They
    #: wait again when the crawl resumes; as deferred requests they went out first.
    waiting: list[tuple[str, float, int, Any]] = field(default_factory=list)
    #: The token of the process whose journal in Redis (the requests it claimed and did not
    #: settle) stayed for this resume; the resumed run adopts it as its own journal, so a kill
    #: of that run loses none of them. Empty: none (a crawl without Redis, an older file).
    journal: str = ""

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(self, protocol=4))
        tmp.replace(path)  # atomic: a crash while saving leaves the previous state

    @classmethod
    def load(cls, path: Path) -> ResumeState | None:
        if not path.exists():
            return None
        state = pickle.loads(path.read_bytes())  # our own JOBDIR file, as Scrapy's queues
        if not isinstance(state, cls):
            raise ValueError(f"{path} is not a neardup resume state")
        for missing in fields(cls):  # saved by an older version: what it did not keep is empty
            if missing.name not in vars(state) and missing.default_factory is not MISSING:
                setattr(state, missing.name, missing.default_factory())
        return state


def judged_last(decision: Decision | None) -> bool:
    """The order of a poll's decisions: a page not followed (a duplicate) may have its outlinks
    judged against its keeper's, so it goes after the rest. Corrections keep their place."""
    return decision is not None and not decision.follow_outlinks and not decision.corrects
