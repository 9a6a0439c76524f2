"""URL rules in the crawl (issue 13): learned from every decision, asked before every fetch.

:class:`CrawlRules` is the link scheduler's :class:`~crawler.judging.DecisionObserver` and
:class:`~crawler.judging.RequestGate` (no Scrapy, Kafka or Redis here; the wiring is in
:mod:`crawler.rules_setup`):

- **observe**: every decision this process reads (every process reads all of them) tells which
  fetched page holds which content (:class:`Fetched`: URL -> keeper), and is learned from
  (:meth:`crawler.rules.shared.SharedRules.learn_many`, one store call a poll; the store counts
  an observation once, however many processes record it). A check the detector cannot settle
  (the two pages have different keepers) asks the direct comparison
  (:class:`crawler.rules.sketches.PageComparer`). The duplicate judge's samples are resolved
  from the same decisions. About once a second the local rules are refreshed from the store.
- **admit / admit_fetch**: a URL an active rule maps onto a page the crawl fetched is skipped
  (reason ``rule``), as its source's decision releases it and again just before it is fetched,
  unless it is an exploration sample of the rule (fetched to keep it checked) or a sample of a
  duplicate page's group (fetched whatever the rules say). Each skip is published once per
  process as a predicted duplicate (:mod:`dedup_worker.contract.predictions`) and counted as a
  fetch saved by its rules. Just before fetching, a page that is only a check of candidate
  rules which already have the checks they need in flight is held back
  (:class:`crawler.rules.pacing.Pacer`, answer :data:`~crawler.judging.HOLD`) and released
  through ``release`` as their decisions arrive; so is a page an active rule maps onto a page
  this process is fetching at that moment, until that page's decision arrives; when that page
  (of an active or candidate rule that holds one way only) is still queued here, it is sent
  out first (:mod:`crawler.ahead`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from crawler.judging import HOLD
from crawler.rules import likely
from crawler.rules.book import Prediction
from crawler.rules.fetch_back import SkipLog, due
from crawler.rules.fetched import Fetched, UrlSet
from crawler.rules.pacing import Pacer
from crawler.rules.policy import State
from crawler.rules.rewrite import Rule
from crawler.rules.shared import SharedRules
from crawler.rules.sketches import PageComparer
from crawler.urls import host_of
from dedup_worker.contract.messages import Decision, Verdict
from dedup_worker.contract.predictions import PredictedDuplicate
from dedup_worker.contract.reading import PageKey

logger = logging.getLogger(__name__)

#: The reason (and stats key word) of a request skipped by rule.
RULE = "rule"

_REVISITS = frozenset((Verdict.CHANGED, Verdict.UNCHANGED))

PublishPrediction = Callable[[PredictedDuplicate], None]
#: Sends held requests out again, by URL (:meth:`crawler.links.LinkScheduler.release_paced`).
Release = Callable[[list[str]], None]
#: Sends a URL waiting in the scheduler out now; False if none waits
#: (:meth:`crawler.links.LinkScheduler.fetch_ahead`).
FetchAhead = Callable[[str], bool]


class Stats(Protocol):
    def inc_value(self, key: str, count: int = 1, start: int = 0) -> None: ...
    def set_value(self, key: str, value: Any) -> None: ...


class Sampler(Protocol):
    """What the duplicate judge needs to hear (:class:`crawler.subtree_judge.SubtreeJudge`)."""

    def decided(self, pages: Sequence[tuple[str, str | None]]) -> None: ...
    def expire(self) -> None: ...
    def settle(self) -> bool: ...


class CrawlRules:
    """Observer and gate of one crawler process (see the module docstring)."""

    def __init__(
        self,
        rules: SharedRules,
        stats: Stats,
        canonical: Callable[[str], str],
        publish: PublishPrediction,
        comparer: PageComparer | None = None,
        crawl_id: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.rules = rules
        self.stats = stats
        self.canonical = canonical
        self.publish = publish
        self.comparer = comparer
        self.crawl_id = crawl_id
        self.clock = clock
        self.fetched = Fetched()
        self.siblings = likely.ReleaseSiblings()  # release directories seen (likely_duplicate)
        #: Whether a decision of a URL fetched before (``changed``/``unchanged``) came in: a
        #: recrawl against an earlier crawl's index (the seeds' decisions say so first).
        self.recrawl = False
        self.sampler: Sampler | None = None
        self.forced = UrlSet()  # group samples: fetched whatever the rules say
        self._explored = UrlSet()  # exploration samples admitted: not skipped at the fetch
        self._skipped = UrlSet()  # published and counted once
        self._kept = UrlSet()  # not skipped for a recrawl's reason: counted once
        self.pacer = Pacer(rules.book.policy)
        self.release: Release | None = None
        self.fetch_ahead: FetchAhead | None = None
        self.fetch_back: Release | None = None
        self.skips = SkipLog()  # what this process skipped, to fetch back what was wrong
        self._released = UrlSet()  # held, then released: not held again on the way out
        self._saved: Counter[str] = Counter()
        self._logged_active: set[str] = set()
        self._logged_dropped: set[str] = set()

    # ---- the observer --------------------------------------------------------------------------

    def observe(self, decisions: Sequence[Decision]) -> None:
        pages = [self._note(decision) for decision in decisions]
        if pages:
            resembles = self.comparer.resembles if self.comparer is not None else None
            statuses = self.rules.learn_many(pages, self.fetched.keeper_of, resembles)
            self.stats.inc_value("dedup/rules/checks", len(statuses))
            fresh = [s.key for s in statuses if s.key not in self.pacer.evidence]
            self.pacer.learned({status.key: status.evidence for status in statuses})
            self.pacer.decided(url for url, _ in pages)
            self._adopt(fresh)
            if self.sampler is not None:
                self.sampler.decided(pages)
        if self.sampler is not None:
            self.sampler.expire()
        if self.pacer.held:
            self._send(self.pacer.release(self._candidates, self._counterpart_in_flight))
        self._tick()

    def _note(self, decision: Decision) -> tuple[str, str | None]:
        url = self.canonical(decision.url)
        original = self.canonical(decision.duplicate_of) if decision.duplicate_of else None
        self.fetched.note(url, original, decision.verdict is Verdict.CHANGED)
        self.siblings.note(url)
        self.skips.fetched(url)  # fetched after all (another link, a check): nothing to fetch back
        if decision.verdict in _REVISITS:
            self.recrawl = True
        return url, original

    def settle(self) -> bool:
        released = self.sampler.settle() if self.sampler is not None else False
        held = self.pacer.release_all()
        self._send(held)
        if len(self.skips) and self.fetch_back is not None:
            self.rules.refresh()  # the crawl is ending: the store's last word on its rules
        return released or bool(held) or self._fetch_back_wrong()

    def _send(self, urls: list[str]) -> None:
        if not urls:
            return
        for url in urls:
            self._released.add(url)
        if self.release is not None:
            self.release(urls)

    def _tick(self) -> None:
        """Once a second or so: the store's news in, the saved fetches out, counts updated."""
        if not self.rules.refresh_if_due():
            return
        self._fetch_back_wrong()
        if self._saved:
            saved, self._saved = dict(self._saved), Counter()
            self.rules.saved(saved)
        if self.comparer is not None:
            self.comparer.flush()
        self.count_rules()

    def count_rules(self) -> None:
        book = self.rules.book
        active, dropped = set(book.keys(State.ACTIVE)), set(book.keys(State.DROPPED))
        for key in sorted(active - self._logged_active):
            logger.info("URL rule active: %s", key)
        for key in sorted(dropped - self._logged_dropped):
            logger.info("URL rule dropped: %s", key)
        self._logged_active, self._logged_dropped = active, dropped
        self.stats.set_value("dedup/rules/active", len(active))
        self.stats.set_value("dedup/rules/candidates", len(book.keys(State.CANDIDATE)))
        self.stats.set_value("dedup/rules/dropped", len(dropped))
        if self.comparer is not None:
            self.stats.set_value("dedup/rules/direct_comparisons", self.comparer.compared)

    def close(self) -> None:
        """The crawl ends: last counts out (the store outlives the process)."""
        if self._saved:
            self.rules.saved(dict(self._saved))
            self._saved.clear()
        if self.comparer is not None:
            self.comparer.flush()
        self.count_rules()

    # ---- the gate ------------------------------------------------------------------------------

    def admit(self, url: str, source: PageKey) -> str | None:
        if url in self.forced:
            return None
        return self._judge(url, source.url, "schedule")

    def likely_duplicate(self, url: str, queued: Callable[[str], bool] | None = None) -> bool:
        """A clean candidate rule, or sibling releases, map ``url`` onto a page fetched or
        ``queued`` here (a budget sends it last: :mod:`crawler.rules.likely`)."""
        rules, fetched = self.rules, self.fetched

        def present(counterpart: str) -> bool:
            there = fetched.keeper_of(counterpart) is not None
            return there or (queued is not None and queued(counterpart))

        return likely.likely_duplicate(url, rules.book, rules.refuted, rules.differing,
                                       self.siblings, present)  # fmt: skip

    def skipped(self, url: str) -> bool:
        """Whether this process skipped ``url`` by rule (published as a predicted duplicate)."""
        return url in self._skipped

    def _adopt(self, keys: list[str]) -> None:
        book = self.rules.book
        for key in keys:
            rule = book.rule(key)
            if rule is not None and book.state(key) is State.CANDIDATE:
                self.pacer.adopt(rule, lambda url: self.fetched.keeper_of(url) is not None)

    def admit_fetch(self, url: str) -> str | None:
        answer = self._fetch_answer(url)
        if answer is None:
            self.pacer.sent(url)
        return answer

    def _fetch_answer(self, url: str) -> str | None:
        if url in self.forced or url in self._explored:
            self._explored.discard(url)
            return None
        reason = self._judge(url, None, "fetch")
        released = url in self._released or url in self._explored  # explored: checked now
        self._released.discard(url)
        self._explored.discard(url)
        if reason is not None or released:
            return reason
        wait = self._wait_for_counterpart(url)
        if wait is not None:
            self.pacer.hold(url)
            self.stats.inc_value(f"dedup/rules/{wait}")
            return HOLD
        if self.pacer.admit(url, self._candidates(url)):
            return None
        self.stats.inc_value("dedup/rules/paced")
        return HOLD

    def _wait_for_counterpart(self, url: str) -> str | None:
        """Why ``url`` waits for a page its rules map it onto, if it does:

        - ``waited_for_counterpart``: the page an active rule maps it onto is being fetched
          (see :meth:`_counterpart_in_flight`), or that of a one-way candidate;
        - ``counterpart_fetched_first``: that page waits in this process's scheduler, and the
          rule holds one way only (no rule maps the page back onto ``url``: a parameter that
          changes nothing, not a mirror). It goes out now, ahead of its turn
          (:mod:`crawler.ahead`). Fetched after ``url``, it would be fetched all the same (no
          rule skips it) and tell no rule anything (the check runs from the page that carries
          the parameter); fetched first, it lets an active rule skip ``url`` and makes ``url``
          a candidate's check. A mirror's page is skipped in its turn by the rewrite back, so
          fetching it first would save nothing.
        """
        prediction = self.rules.predict(url)
        if prediction is not None:
            counterpart = prediction.counterpart
            if self.fetched.keeper_of(counterpart) is not None:
                return None
            if self.pacer.in_flight(counterpart):
                return "waited_for_counterpart"
            counterparts = [counterpart] if self._one_way(url, counterpart) else []
        else:
            counterparts = self._one_way_candidates(url)
            if any(self.pacer.in_flight(counterpart) for counterpart in counterparts):
                return "waited_for_counterpart"
        for counterpart in counterparts:
            if self.fetch_ahead is not None and self.fetch_ahead(counterpart):
                self.pacer.sent(counterpart)  # in flight from now: url held till it is decided
                return "counterpart_fetched_first"
        return None

    def _one_way(self, url: str, counterpart: str) -> bool:
        """No rule maps ``counterpart`` back onto ``url``."""
        return all(back != url for _, back in self.rules.book.applicable(counterpart))

    def _one_way_candidates(self, url: str) -> list[str]:
        """The unfetched pages one-way candidate rules map ``url`` onto."""
        book = self.rules.book
        return [
            counterpart
            for rule, counterpart in book.applicable(url)
            if book.state(rule.key) is State.CANDIDATE
            and self.fetched.keeper_of(counterpart) is None
            and self._one_way(url, counterpart)
        ]

    def _counterpart_in_flight(self, url: str) -> bool:
        """An active rule maps ``url`` onto a page this process is fetching right now (or a
        one-way candidate does: see :meth:`_wait_for_counterpart`): its decision, due in a
        moment, will most likely let the rule skip ``url`` (or make it the candidate's check).
        On a busy machine decisions lag, and a crawl reaching a mirror section and its
        original together fetched the whole mirror section before."""
        prediction = self.rules.predict(url)
        if prediction is not None:
            counterpart = prediction.counterpart
            return self.fetched.keeper_of(counterpart) is None and self.pacer.in_flight(counterpart)
        return any(self.pacer.in_flight(c) for c in self._one_way_candidates(url))

    def _candidates(self, url: str) -> list[Rule]:
        """The candidate rules a fetch of ``url`` would check (its counterpart is fetched)."""
        book = self.rules.book
        found: dict[str, Rule] = {}
        for rule, counterpart in book.applicable(url):
            if book.state(rule.key) is State.CANDIDATE and self.fetched.keeper_of(counterpart):
                found[rule.key] = rule
        return list(found.values())

    def _judge(self, url: str, source: str | None, stage: str) -> str | None:
        prediction = self.rules.predict(url)
        if prediction is None or self.fetched.keeper_of(prediction.counterpart) is None:
            return None  # no rule, or its counterpart was not fetched (yet)
        if url in self._explored:
            return None
        reason = self.recrawl_reason(url, prediction.counterpart)
        if reason is not None:
            if url not in self._kept:
                self._kept.add(url)
                self.stats.inc_value(f"dedup/rules/{reason}")
            return None
        if url not in self._skipped and self.rules.explore(prediction):  # asked once per URL
            self._explored.add(url)
            self.stats.inc_value("dedup/rules/explored")
            if self.rules.differing.known(url, prediction.counterpart):
                self.stats.inc_value("dedup/rules/known_to_differ")
            elif self.rules.short_in_doubt(prediction):
                self.stats.inc_value("dedup/rules/short_in_doubt")
            return None
        if url not in self._skipped:
            self._skipped.add(url)
            if self.fetched.keeper_of(url) is None:  # else fetched already: nothing to lose
                self.skips.skipped(url, prediction.counterpart, (r.key for r in prediction.rules))
            self._saved.update(rule.key for rule in prediction.rules)
            self.stats.inc_value("dedup/rules/predicted")
            self.publish(self.prediction(prediction, source, stage))
        return RULE

    def _fetch_back_wrong(self) -> bool:
        """Fetch back what this process skipped by a rule since shown wrong
        (:func:`crawler.rules.fetch_back.due`); whether anything went."""
        if not len(self.skips) or self.fetch_back is None:
            return False
        due_now = due(self.skips, self.rules, self.fetched)
        back = {url: s for url, s in due_now.items() if not self.pacer.in_flight(url)}  # fetching
        if not back:
            return False
        for url, skip in back.items():
            self.forced.add(url)  # fetched whatever the rules say, as a group's sample is
            self._saved.subtract(skip.rules)  # not saved after all
        self.stats.inc_value("dedup/rules/skips_fetched_back", len(back))
        logger.info("fetching back %d pages skipped by a rule or a group since shown wrong: %s",
                    len(back), " ".join(back))  # fmt: skip
        self.fetch_back(list(back))
        return True

    def recrawl_reason(self, url: str, counterpart: str) -> str | None:
        """Why a recrawl fetches ``url`` though a rule (or a duplicate page's rewrite) maps it
        onto fetched ``counterpart``, if it does:

        - ``counterpart_changed``: the counterpart came back with new content. The rule's
          checks vouched for its old content, and a copy of that (an older release's page)
          may now be the only place it is left.
        - ``original_of_counterpart``: the counterpart came back ``unchanged`` naming ``url``
          as its original. ``url`` held the content first; only a fetch tells whether it
          changed since, and a skip would lose exactly the pages that did.
        """
        if not self.recrawl:
            return None  # a first crawl: its pages have no earlier fetch to differ from
        if self.fetched.changed(counterpart):
            return "counterpart_changed"
        if self.fetched.keeper_of(counterpart) == url:
            return "original_of_counterpart"
        return None

    def prediction(
        self, prediction: Prediction, source: str | None, stage: str
    ) -> PredictedDuplicate:
        """The message that tells the decisions' consumers about a skipped URL."""
        policy = self.rules.book.policy
        return PredictedDuplicate(
            url=prediction.url,
            host=host_of(prediction.url),
            duplicate_of=prediction.counterpart,
            predicted_at=self.clock(),
            rules=self.rules.evidence_of(prediction),
            stage=stage,
            source=source,
            crawl_id=self.crawl_id,
            evidence={
                "keeper": self.fetched.keeper_of(prediction.counterpart),
                "activate_at": policy.activate_at,
                "z": policy.z,
            },
        )
