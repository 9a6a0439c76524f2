"""Pure bookkeeping of decision-driven scheduling: no Scrapy, Kafka or Redis here.

:class:`Ledger` tracks this process's pages from publication to decision, and the outlinks
scheduled from each followed page until they are fetched, so that

- only decisions for pages this process published are applied (key: URL + fetch time);
- duplicated decisions (the broker may redeliver, aborted transactions may show) change nothing,
  and a correction is final for its page: the contract's reading rule
  (:func:`dedup_worker.contract.reading.next_step`) says which decisions are new;
- a correction drops the page's outlinks that are still waiting in the scheduler, unless another
  followed page also wants them.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from dedup_worker.contract.messages import Decision
from dedup_worker.contract.reading import PageKey, Standing, Step, next_step, page_key

logger = logging.getLogger(__name__)


__all__ = [
    "Action",
    "Claim",
    "Ledger",
    "Outcome",
    "PageKey",
    "Published",
    "ResumeState",
    "domain_allowed",
    "request_priority",
]


class Action(Enum):
    FOREIGN = "foreign"  # not a page of this process: ignored
    DUPLICATE = "duplicate"  # already applied (or overridden by a correction): ignored
    FOLLOW = "follow"  # schedule ``links``
    SUPPRESS = "suppress"  # do not follow; ``suppressed`` outlinks not scheduled
    CORRECT = "correct"  # drop ``cancelled`` links not yet fetched


@dataclass(frozen=True)
class Published:
    depth: int
    outlinks: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    action: Action
    depth: int = 0
    links: tuple[str, ...] = ()
    suppressed: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()


class Claim(Enum):
    NEW = "new"  # not pending here: schedule it (if the seen filter agrees)
    PENDING = "pending"  # already waiting in this process's scheduler: source recorded


@dataclass
class Ledger:
    """Pages awaiting a decision, decided pages' standing decisions and pending links with
    their sources."""

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

    def published(self, key: PageKey, depth: int, outlinks: tuple[str, ...]) -> None:
        if key not in self.pages:
            self.awaiting[key] = Published(depth, outlinks)
            self.pages[key] = None

    def publish_failed(self, key: PageKey) -> None:
        """The page never reached the broker: no decision will come for it."""
        if key in self.awaiting:
            del self.awaiting[key]
            del self.pages[key]

    def apply(self, decision: Decision) -> Outcome:
        key = page_key(decision)
        if key not in self.pages:
            return Outcome(Action.FOREIGN)
        held = self.pages[key]
        step = next_step(held, decision)
        if step is Step.REPEAT or (held is not None and held.corrects):
            # Nothing new, or a correction of a corrected page (to an earlier original):
            # its links were cancelled already.
            return Outcome(Action.DUPLICATE)
        self.pages[key] = Standing.of(decision)
        page = self.awaiting.pop(key, None)
        if decision.corrects:
            return self._correct(key, page)
        assert page is not None  # FIRST of a non-correcting decision: the page was awaiting
        if decision.follow_outlinks:
            return Outcome(Action.FOLLOW, page.depth, tuple(decision.outlinks))
        return Outcome(Action.SUPPRESS, page.depth, suppressed=page.outlinks)

    def _correct(self, key: PageKey, page: Published | None) -> Outcome:
        if page is not None:  # the correction overtook the first decision
            return Outcome(Action.CORRECT, page.depth, suppressed=page.outlinks)
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
        return Outcome(Action.CORRECT, cancelled=tuple(cancelled))

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
    ``decisions``; ``deferred``: links over the ``max_pages`` budget, still claimed in the seen
    set, scheduled first when the crawl resumes; ``scheduled``: the budget already spent.
    """

    offsets: dict[int, int] = field(default_factory=dict)
    awaiting: list[tuple[str, float, int, tuple[str, ...]]] = field(default_factory=list)
    deferred: list[tuple[str, int, int]] = field(default_factory=list)
    scheduled: int = 0

    def save(self, path: Path) -> None:
        body = {
            "offsets": {str(p): o for p, o in self.offsets.items()},
            "awaiting": [[u, t, d, list(links)] for u, t, d, links in self.awaiting],
            "deferred": [list(item) for item in self.deferred],
            "scheduled": self.scheduled,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body), encoding="utf-8")
        tmp.replace(path)  # atomic: a crash while saving leaves the previous state

    @classmethod
    def load(cls, path: Path) -> ResumeState | None:
        if not path.exists():
            return None
        body = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            offsets={int(p): int(o) for p, o in body["offsets"].items()},
            awaiting=[(u, float(t), int(d), tuple(links)) for u, t, d, links in body["awaiting"]],
            deferred=[(u, int(d), int(p)) for u, d, p in body["deferred"]],
            scheduled=int(body["scheduled"]),
        )
