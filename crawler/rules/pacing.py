"""Pacing a candidate rule's checks: fetch only as many of its predictions at once as it needs.

A candidate rule becomes active after enough successful checks (11 clean ones by default), and
each check is a fetch of a page it maps onto a fetched counterpart. A fast crawl fetches such
pages in bursts (a catalog's print views, a mirror's pages linked from one post), and a page's
decision arrives some 50-200 ms after its fetch: by the time the rule's last needed check comes
back, several more of its pages went out, each a wasted fetch if the rule holds. On the
subtree test site this lag cost about a tenth of all fetches.

:class:`Pacer` caps a candidate's checks in flight (fetched or going out, not yet decided) at
what it still needs (:func:`~crawler.rules.policy.checks_to_activate` of its evidence). A page
one of whose candidate rules is at its cap is *held* just before it is fetched (once that rule
is active the page is skipped, so fetching it now would only ever be waste); held pages are
re-judged as decisions arrive: when the rule became active they are skipped by it, when it was
dropped or still needs checks they are fetched. A check whose decision never comes (the fetch
failed) stops counting after ``expiry`` seconds, and a page held that long is fetched anyway:
pacing can delay a fetch, never lose one. The caller may hold pages for a reason of its own
too (:meth:`Pacer.hold`), re-asked on each release, with the same expiry. Pure: the caller
holds and releases the requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from crawler.rules.policy import Evidence, RulePolicy, checks_to_activate
from crawler.rules.rewrite import Rule

#: Seconds a check in flight counts, and a page may be held, at most.
PACE_EXPIRY = 10.0


class Pacer:
    """Checks in flight per candidate rule, and the pages held back (see the module docstring).
    Not thread-safe: the crawler's reactor thread only."""

    def __init__(
        self,
        policy: RulePolicy,
        expiry: float = PACE_EXPIRY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self.expiry = expiry
        self.clock = clock
        self.evidence: dict[str, Evidence] = {}  # the latest the store reported, per rule
        self._in_flight: dict[str, dict[str, float]] = {}  # rule key -> URL -> since
        self._checking: dict[str, list[str]] = {}  # URL -> rule keys it is a check of
        self._held: dict[str, float] = {}  # URL -> since (insertion order: oldest first)
        self._sent: dict[str, float] = {}  # every URL sent and not decided yet -> since

    @property
    def held(self) -> int:
        return len(self._held)

    def admit(self, url: str, candidates: Iterable[Rule]) -> bool:
        """``url`` is about to be fetched and is a check of ``candidates``: True to fetch it now
        (counted in flight), False to hold it (a candidate has the checks it needs)."""
        return self._admit(url, list(candidates), self.clock())

    def _admit(self, url: str, candidates: list[Rule], since: float) -> bool:
        if not candidates:
            return True
        if any(self._saturated(rule) for rule in candidates):
            self._held[url] = since
            return False
        self._count(url, candidates)
        return True

    def _count(self, url: str, candidates: list[Rule]) -> None:
        now = self.clock()
        for rule in candidates:
            self._in_flight.setdefault(rule.key, {})[url] = now
        keys = self._checking.setdefault(url, [])
        keys.extend(rule.key for rule in candidates if rule.key not in keys)

    def _saturated(self, rule: Rule) -> bool:
        evidence = self.evidence.get(rule.key, Evidence())
        # Distinct values cannot be planned (the pages at hand may all share one): only the
        # checks count here; a rule short of values gets one more check at a time.
        needed = checks_to_activate(evidence, False, self.policy)
        return len(self._in_flight.get(rule.key, ())) >= needed

    def sent(self, url: str) -> None:
        """``url`` is being fetched (whatever rules it is a check of, known or not yet)."""
        self._sent[url] = self.clock()

    def in_flight(self, url: str) -> bool:
        """Whether ``url`` was sent and its decision has not come yet."""
        return url in self._sent

    def hold(self, url: str) -> None:
        """Hold ``url`` for a reason of the caller's (``waiting`` in :meth:`release`)."""
        self._held.setdefault(url, self.clock())

    def learned(self, evidence: Mapping[str, Evidence]) -> None:
        self.evidence.update(evidence)

    def adopt(self, rule: Rule, known: Callable[[str], bool]) -> None:
        """A new candidate: the pages already sent that it maps onto a known counterpart are
        its checks in flight too (they went out before anyone knew the rule: a crawl's first
        burst of a family would otherwise come on top of what the rule needs)."""
        for url, since in self._sent.items():
            counterpart = rule.apply(url)
            if counterpart is not None and known(counterpart):
                self._in_flight.setdefault(rule.key, {})[url] = since
                self._checking.setdefault(url, []).append(rule.key)

    def decided(self, urls: Iterable[str]) -> None:
        """Decisions arrived: these checks are no longer in flight."""
        for url in urls:
            self._sent.pop(url, None)
            for key in self._checking.pop(url, ()):
                flight = self._in_flight.get(key)
                if flight is not None:
                    flight.pop(url, None)
                    if not flight:
                        del self._in_flight[key]

    def release(
        self,
        candidates_of: Callable[[str], list[Rule]],
        waiting: Callable[[str], bool] = lambda url: False,
    ) -> list[str]:
        """The held pages to fetch (or skip) now, re-judged against their current candidate
        rules (``candidates_of``) and the caller's reason to hold them (``waiting``); a
        released page is counted in flight at once."""
        now = self.clock()
        self._expire(now)
        released = []
        for url, since in list(self._held.items()):
            del self._held[url]
            candidates = candidates_of(url)
            if now - since >= self.expiry:  # held long enough: it goes, as a check
                self._count(url, candidates)
                released.append(url)
            elif waiting(url):
                self._held[url] = since
            elif self._admit(url, candidates, since):
                released.append(url)
        return released

    def release_all(self) -> list[str]:
        released, self._held = list(self._held), {}
        return released

    def _expire(self, now: float) -> None:
        stale = [
            url
            for flight in self._in_flight.values()
            for url, since in flight.items()
            if now - since >= self.expiry
        ]
        stale.extend(url for url, since in self._sent.items() if now - since >= self.expiry)
        self.decided(stale)
