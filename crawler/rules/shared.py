"""A crawl's rule store and this process's book, kept in step.

:meth:`SharedRules.predict` reads the local book only (per outlink, no I/O).
:meth:`SharedRules.learn` turns one decision into checks, records them in the store (one
atomic call) and applies the resulting state changes locally at once; changes made by other
processes arrive with :meth:`SharedRules.refresh`, which the crawler calls every
``refresh_every`` seconds (:meth:`refresh_if_due`): one store round trip a second per process
against a rule that needs at least 11 checks to activate, so a second's delay costs little.
:meth:`SharedRules.learn_many` does the same for a batch of decisions in one store call (the
crawler learns from every decision it reads, those of every process of the crawl; the store
counts an observation once, however many processes record it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from crawler.rules.book import Prediction, RuleBook, RuleChange
from crawler.rules.differing import DifferingPairs, telling
from crawler.rules.learning import KeeperOf, Observation, Resembles, decision_checks
from crawler.rules.policy import State
from crawler.rules.rewrite import parse_rule
from crawler.rules.short_pages import ShingleCount, ShortPageChecks
from crawler.rules.store import RuleStatus, RuleStore
from dedup_worker.contract.predictions import RuleEvidence

logger = logging.getLogger(__name__)

#: Seconds between two refreshes of the local book (see module docstring).
REFRESH_EVERY = 1.0


class SharedRules:
    """The rules of one crawl as one process sees them."""

    def __init__(
        self,
        store: RuleStore,
        refresh_every: float = REFRESH_EVERY,
        clock: Callable[[], float] = time.monotonic,
        shingles_of: ShingleCount | None = None,
    ) -> None:
        self.store = store
        self.book = RuleBook(store.policy)
        #: The last status the store reported of each active rule (evidence for predictions).
        self.active: dict[str, RuleStatus] = {}
        #: Path pairs a rule that holds elsewhere got wrong (never skipped, see ``explore``).
        self.differing = DifferingPairs(
            changes_by_release=store.policy.changes_by_release,
            release_front_pages=store.policy.release_front_pages,
        )
        #: Rules with a failed check: a group of their rewrite suppresses nothing
        #: (:mod:`crawler.rules.counterparts`). Every process learns from every decision of the
        #: crawl, so each sees every failure itself.
        self.refuted: set[str] = set()
        #: Each rule's checks on short pages, when page lengths are known (``short_in_doubt``).
        self.short_pages = ShortPageChecks(shingles_of, store.policy) if shingles_of else None
        self._cursor = 0
        self._refresh_every = refresh_every
        self._clock = clock
        self._next_refresh = clock()

    def predict(self, url: str) -> Prediction | None:
        return self.book.predict(url)

    def explore(self, prediction: Prediction) -> bool:
        """Fetch this predicted duplicate anyway, as a check? Always while one of its rules is
        in doubt (``in_doubt``) or when its two paths differed under a rule that holds
        elsewhere (``differing``), or when its counterpart is a short page its rules' short
        checks do not vouch for yet (``short_in_doubt``), else at the book's exploration
        rate."""
        if any(self.in_doubt(rule.key) for rule in prediction.rules):
            return True
        if self.differing.known(prediction.url, prediction.counterpart):
            return True
        if self.short_in_doubt(prediction):
            return True
        return self.book.explore(prediction)

    def short_in_doubt(self, prediction: Prediction) -> bool:
        """A short counterpart, and a rule of the prediction whose checks on short pages do not
        clear the activation bar by themselves (:mod:`crawler.rules.short_pages`)."""
        if self.short_pages is None:
            return False
        return self.short_pages.fetch([rule.key for rule in prediction.rules],
                                      prediction.counterpart)  # fmt: skip

    def in_doubt(self, key: str) -> bool:
        """An active rule whose checks since it activated brought its precision's lower bound
        back under the bar that activates a rule (the store never demotes an active rule: it
        drops one at ``window_failures`` recent failures). Such a rule skips nothing until the
        bound is back: each of its predictions is fetched, and counts as a check. A rule that
        went active on a lucky run of checks (a host alias between two renderings of one
        manual, 51 of 66 pages alike) otherwise kept skipping pages, on a small host for good:
        its 5% exploration gave it two or three more checks."""
        status = self.active.get(key)
        policy = self.store.policy
        return status is not None and status.lower_bound(policy) < policy.activate_at

    def refresh(self) -> int:
        """Apply every change logged since the last refresh; returns how many."""
        applied = 0
        while True:
            sync = self.store.sync(self._cursor)
            if sync.reset:
                logger.warning("rule store lost its log: rebuilding the local rules")
                self.book.clear()
                self.active.clear()
            self._apply(sync.changes)
            self._apply(status.change() for status in sync.active.values())
            self.active = dict(sync.active)  # every active rule, as the store has it now
            applied += len(sync.changes)
            self._cursor = sync.cursor
            if sync.complete:
                break
        self._next_refresh = self._clock() + self._refresh_every
        return applied

    def refresh_if_due(self) -> bool:
        if self._clock() < self._next_refresh:
            return False
        self.refresh()
        return True

    def learn(
        self,
        url: str,
        duplicate_of: str | None,
        keeper_of: KeeperOf,
        resembles: Resembles | None = None,
    ) -> list[RuleStatus]:
        """Record the checks a decision of ``url`` gives (see ``decision_checks``)."""
        applicable = self.book.applicable(url)
        policy = self.store.policy
        checks = decision_checks(url, duplicate_of, applicable, keeper_of, policy, resembles)
        return self._record(checks)

    def learn_many(
        self,
        decided: Iterable[tuple[str, str | None]],
        keeper_of: KeeperOf,
        resembles: Resembles | None = None,
    ) -> list[RuleStatus]:
        """:meth:`learn` for ``(url, duplicate_of)`` of several decisions, in one store call.
        A rule first proposed by one of them is a local candidate at once, so the later ones
        check it too, as they would one call each."""
        policy = self.store.policy
        observations: list[Observation] = []
        for url, duplicate_of in decided:
            applicable = self.book.applicable(url)
            checks = decision_checks(url, duplicate_of, applicable, keeper_of, policy, resembles)
            for check in checks:
                if self.book.state(check.rule.key) is None:
                    self.book.apply(check.rule, State.CANDIDATE)
            observations.extend(checks)
        return self._record(observations)

    def _record(self, observations: list[Observation]) -> list[RuleStatus]:
        if not observations:
            return []
        statuses = self.store.record(observations)
        for observation, status in zip(observations, statuses, strict=True):
            if self.short_pages is not None:
                self.short_pages.note(observation)
            if not observation.success:
                self.refuted.add(observation.rule.key)
            if not observation.success and telling(
                status.evidence.successes, status.checks, self.store.policy
            ):
                self.differing.note(observation.url, observation.counterpart)
        self._apply(status.change() for status in statuses)
        self._note(statuses)
        return statuses

    def _note(self, statuses: Iterable[RuleStatus]) -> None:
        for status in statuses:
            if status.state is State.ACTIVE:
                self.active[status.key] = status
            else:
                self.active.pop(status.key, None)

    def evidence_of(self, prediction: Prediction) -> tuple[RuleEvidence, ...]:
        """What the prediction's rules stand on, for its ``decisions.predicted`` message: the
        store's last status of each active rule (a rule active elsewhere but not yet in this
        process's statuses: its check count, no support)."""
        policy = self.store.policy
        evidence = []
        for rule in prediction.rules:
            status = self.active.get(rule.key)
            if status is None:
                evidence.append(RuleEvidence(rule.key, rule.kind, 0, self.book.checks(rule.key),
                                             0.0, 0.0))  # fmt: skip
                continue
            evidence.append(
                RuleEvidence(rule.key, rule.kind, status.evidence.successes, status.checks,
                             round(status.precision, 4), round(status.lower_bound(policy), 4))
            )  # fmt: skip
        return tuple(evidence)

    def saved(self, counts: Mapping[str, int]) -> None:
        """Count fetches skipped thanks to these rules (for reports)."""
        if counts:
            self.store.add_saved(counts)

    def _apply(self, changes: Iterable[RuleChange]) -> None:
        for change in changes:
            rule = self.book.rule(change.key)
            if rule is None:
                try:
                    rule = parse_rule(change.key)
                except ValueError:
                    logger.warning("ignoring an unreadable rule key in the store: %r", change.key)
                    continue
            self.book.apply(rule, change.state, change.checks)
