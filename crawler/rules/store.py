"""Where a crawl's rules live: the store interface, and its in-memory implementation.

A store keeps, per rule, its evidence (:class:`~crawler.rules.policy.Evidence`) and state, and
a change log (rule created, rule changed state) that local books follow with a cursor. Every
:meth:`RuleStore.record` of an observation is one atomic check-then-update: skip it if this
observation was already counted (a decision delivered twice) or its rule is dropped, count it,
move the rule to its next state (:func:`~crawler.rules.policy.next_state`), log a state
change. A dropped rule's evidence is closed because it can no longer be fair: no page is
checked against a dropped rule any more, but the duplicate pairs that propose it still come,
so it would go on counting those pairs (successes, but for a direct comparison under the bar)
and none of the unique pages it maps, its failures (reports showed dropped rules at a lower
bound above the bar that activates one). Processes sharing a
crawl see one set of rules, whichever process learned them.

:class:`MemoryRuleStore` is the reference (one process, forgotten at exit); the Redis store
(:mod:`crawler.rules.redis_store`) is observed to behave the same by one contract test suite.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from crawler.rules.book import RuleChange
from crawler.rules.learning import Observation
from crawler.rules.policy import (
    DEFAULT_POLICY,
    Evidence,
    RulePolicy,
    State,
    next_state,
    push_outcome,
    wilson_lower_bound,
)

#: Log entries returned by one ``sync`` at most (bounded replies; callers loop).
SYNC_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class RuleStatus:
    """A rule as stored: state, evidence, and the fetches its predictions saved."""

    key: str
    state: State
    evidence: Evidence
    saved: int = 0

    @property
    def checks(self) -> int:
        return self.evidence.checks

    @property
    def precision(self) -> float:
        """Measured precision (successful checks / checks); 0 without checks."""
        checks = self.evidence.checks
        return self.evidence.successes / checks if checks else 0.0

    def lower_bound(self, policy: RulePolicy = DEFAULT_POLICY) -> float:
        return wilson_lower_bound(self.evidence.successes, self.evidence.checks, policy.z)

    def change(self) -> RuleChange:
        return RuleChange(self.key, self.state, self.evidence.checks)


@dataclass(frozen=True, slots=True)
class Sync:
    """What changed since a cursor: log entries in order, the cursor after them, the log's
    length, the current status of every active rule, and ``reset`` when the log is shorter
    than the cursor (the store lost its data): the caller must rebuild its book from these
    changes on."""

    changes: list[RuleChange]
    cursor: int
    length: int
    active: dict[str, RuleStatus]
    reset: bool = False

    @property
    def complete(self) -> bool:
        return self.cursor >= self.length


class RuleStore(Protocol):
    """A crawl's rules, shared by its processes.

    ``record``: count observations atomically, one after the other; the status of each
    observation's rule right after it. ``sync``: changes since ``cursor`` (at most ``limit``).
    ``statuses``: every rule (reports). ``add_saved``: count fetches a rule's predictions
    saved (ignored for unknown rules). Every process of a crawl must use the same ``policy``."""

    policy: RulePolicy

    def record(self, observations: Sequence[Observation]) -> list[RuleStatus]: ...
    def sync(self, cursor: int, limit: int = SYNC_LIMIT) -> Sync: ...
    def statuses(self) -> dict[str, RuleStatus]: ...
    def add_saved(self, counts: Mapping[str, int]) -> None: ...
    def close(self) -> None: ...


def short_hash(text: str) -> str:
    """16 hex digits: how stores remember distinct values and paths."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass
class _Entry:
    status: RuleStatus
    needs_values: bool
    seen: set[str] = field(default_factory=set)
    values: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)


class MemoryRuleStore:
    """The in-process reference store. Thread-safe."""

    def __init__(self, policy: RulePolicy = DEFAULT_POLICY) -> None:
        self.policy = policy
        self._rules: dict[str, _Entry] = {}
        self._log: list[RuleChange] = []
        self._lock = threading.Lock()

    def record(self, observations: Sequence[Observation]) -> list[RuleStatus]:
        with self._lock:
            return [self._record_one(observation) for observation in observations]

    def _record_one(self, observation: Observation) -> RuleStatus:
        rule = observation.rule
        entry = self._rules.get(rule.key)
        if entry is None:
            entry = _Entry(RuleStatus(rule.key, State.CANDIDATE, Evidence()), rule.needs_values)
            self._rules[rule.key] = entry
            self._log.append(RuleChange(rule.key, State.CANDIDATE, 0))
        if observation.id in entry.seen or entry.status.state is State.DROPPED:
            return entry.status  # counted already, or the rule's evidence is closed
        entry.seen.add(observation.id)
        evidence = self._count(entry, observation)
        state = next_state(entry.status.state, evidence, entry.needs_values, self.policy)
        if state is not entry.status.state:
            self._log.append(RuleChange(rule.key, state))  # checks come with ``active``
        entry.status = replace(entry.status, state=state, evidence=evidence)
        return entry.status

    def _count(self, entry: _Entry, observation: Observation) -> Evidence:
        old, cap = entry.status.evidence, self.policy.diversity_cap
        if observation.success:
            if entry.needs_values and len(entry.values) < cap:
                entry.values.add(short_hash(observation.value))
            if len(entry.paths) < cap:
                entry.paths.add(short_hash(observation.path))
        return Evidence(
            successes=old.successes + observation.success,
            failures=old.failures + (not observation.success),
            recent=push_outcome(old.recent, observation.success, self.policy.window),
            values=len(entry.values),
            paths=len(entry.paths),
        )

    def sync(self, cursor: int, limit: int = SYNC_LIMIT) -> Sync:
        with self._lock:
            reset = cursor > len(self._log)
            start = 0 if reset else cursor
            changes = self._log[start : start + limit]
            active = {
                key: entry.status
                for key, entry in self._rules.items()
                if entry.status.state is State.ACTIVE
            }
            return Sync(changes, start + len(changes), len(self._log), active, reset)

    def statuses(self) -> dict[str, RuleStatus]:
        with self._lock:
            return {key: entry.status for key, entry in self._rules.items()}

    def add_saved(self, counts: Mapping[str, int]) -> None:
        with self._lock:
            for key, count in counts.items():
                entry = self._rules.get(key)
                if entry is not None:
                    entry.status = replace(entry.status, saved=entry.status.saved + count)

    def close(self) -> None:
        pass
