"""The local index of a crawl's rules: predictions per outlink in microseconds.

The crawler asks :meth:`RuleBook.predict` about every outlink, so it must not talk to Redis: a
book is a plain in-process index, kept in step with the store by
:class:`crawler.rules.shared.SharedRules` (a refresh every second or so). A URL whose origin has
no rule costs one split and two dict misses; otherwise one dict probe per path segment and one
per query parameter.

A prediction composes the active rules of the URL's origin: every parameter with a rule is
dropped or set (a value-specific rule wins over an any-value one), then the longest matching
path rewrite moves the result. Its check is credited (or blamed) to every rule it used.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from crawler.rules.policy import DEFAULT_POLICY, RulePolicy, State, exploration_rate
from crawler.rules.rewrite import ParamRule, PathRewrite, Rule, join_url, rebuild, split_url


@dataclass(frozen=True, slots=True)
class Prediction:
    """``url`` is predicted to hold the same content as ``counterpart``, by ``rules``."""

    url: str
    counterpart: str
    rules: tuple[Rule, ...]


@dataclass(frozen=True, slots=True)
class RuleChange:
    """A rule's state as a store reports it (``checks`` drives the exploration rate)."""

    key: str
    state: State
    checks: int = 0


R = TypeVar("R", PathRewrite, ParamRule)


def _put(groups: dict[str, dict[str, R]], source: str, rule: R) -> None:
    """Add ``rule`` to the group of its source, kept ordered by key: when several rules share
    a source (two mirrors of one host), every process picks the same one first."""
    group = groups.get(source, {})
    group[rule.key] = rule
    groups[source] = dict(sorted(group.items()))


def _pop(groups: dict[str, dict[str, R]], source: str, rule: R) -> None:
    group = groups.get(source)
    if group is not None:
        group.pop(rule.key, None)
        if not group:
            del groups[source]


@dataclass
class _OriginRules:
    """One origin's rules by source: path prefix, parameter name, ``name=value``."""

    paths: dict[str, dict[str, PathRewrite]] = field(default_factory=dict)
    any_value: dict[str, dict[str, ParamRule]] = field(default_factory=dict)
    one_value: dict[str, dict[str, ParamRule]] = field(default_factory=dict)

    def add(self, rule: Rule) -> None:
        if isinstance(rule, PathRewrite):
            _put(self.paths, rule.src_prefix, rule)
        elif rule.value is None:
            _put(self.any_value, rule.name, rule)
        else:
            _put(self.one_value, f"{rule.name}={rule.value}", rule)

    def remove(self, rule: Rule) -> None:
        if isinstance(rule, PathRewrite):
            _pop(self.paths, rule.src_prefix, rule)
        elif rule.value is None:
            _pop(self.any_value, rule.name, rule)
        else:
            _pop(self.one_value, f"{rule.name}={rule.value}", rule)

    def __bool__(self) -> bool:
        return bool(self.paths or self.any_value or self.one_value)

    def param_rules(self, pair: str) -> list[ParamRule]:
        """Rules for one query pair, the value-specific ones first."""
        found: list[ParamRule] = []
        if pair in self.one_value:
            found.extend(self.one_value[pair].values())
        name = pair.partition("=")[0]
        if name in self.any_value:
            found.extend(self.any_value[name].values())
        return found

    def path_rules(self, path: str) -> list[PathRewrite]:
        """Path rules matching ``path``, the longest prefix first."""
        found: list[PathRewrite] = []
        if path in self.paths:
            found.extend(self.paths[path].values())
        cut = path.rfind("/")
        while cut > 0:
            group = self.paths.get(path[:cut])
            if group is not None:
                found.extend(group.values())
            cut = path.rfind("/", 0, cut)
        if "" in self.paths:
            found.extend(self.paths[""].values())
        return found


class _Index:
    """Rules by source origin."""

    def __init__(self) -> None:
        self.origins: dict[str, _OriginRules] = {}

    def add(self, rule: Rule) -> None:
        origin = _source_origin(rule)
        rules = self.origins.get(origin)
        if rules is None:
            rules = self.origins[origin] = _OriginRules()
        rules.add(rule)

    def remove(self, rule: Rule) -> None:
        origin = _source_origin(rule)
        rules = self.origins.get(origin)
        if rules is not None:
            rules.remove(rule)
            if not rules:
                del self.origins[origin]


def _source_origin(rule: Rule) -> str:
    return rule.src_origin if isinstance(rule, PathRewrite) else rule.origin


class RuleBook:
    """Rules by state, indexed for :meth:`predict` (active rules) and :meth:`applicable`
    (active and candidate rules, for checks). Not thread-safe: one per crawler process, used
    from its reactor thread."""

    def __init__(self, policy: RulePolicy = DEFAULT_POLICY) -> None:
        self.policy = policy
        self._states: dict[str, tuple[Rule, State, int]] = {}
        self._active = _Index()
        self._live = _Index()  # active and candidates
        self._credit: dict[str, float] = {}  # rule key -> exploration credit (see explore)

    def __len__(self) -> int:
        return len(self._states)

    def state(self, key: str) -> State | None:
        entry = self._states.get(key)
        return entry[1] if entry is not None else None

    def rule(self, key: str) -> Rule | None:
        entry = self._states.get(key)
        return entry[0] if entry is not None else None

    def checks(self, key: str) -> int:
        entry = self._states.get(key)
        return entry[2] if entry is not None else 0

    def keys(self, state: State) -> list[str]:
        return [key for key, (_, s, _) in self._states.items() if s is state]

    def apply(self, rule: Rule, state: State, checks: int = 0) -> None:
        """Record a rule's state; a dropped rule never comes back (a late or repeated report of
        an older state is ignored)."""
        known = self._states.get(rule.key)
        if known is not None and known[1] is State.DROPPED:
            return
        if known is not None and known[1] is State.ACTIVE and state is State.CANDIDATE:
            state = State.ACTIVE  # stale report: stores never demote an active rule
        self._states[rule.key] = (rule, state, max(checks, known[2] if known else 0))
        if known is not None and known[1] is state:
            return  # indexed already
        for index, member in ((self._active, State.ACTIVE), (self._live, None)):
            if state is member or (member is None and state is not State.DROPPED):
                index.add(rule)
            else:
                index.remove(rule)

    def apply_changes(self, changes: Iterable[tuple[Rule, RuleChange]]) -> None:
        for rule, change in changes:
            self.apply(rule, change.state, change.checks)

    def clear(self) -> None:
        self._states.clear()
        self._active = _Index()
        self._live = _Index()
        self._credit.clear()

    # ---- per outlink -------------------------------------------------------------------

    def predict(self, url: str) -> Prediction | None:
        """The counterpart the active rules map ``url`` onto, or None."""
        origin, path, query = split_url(url)
        rules = self._active.origins.get(origin)
        if rules is None:
            return None
        used: list[Rule] = []
        if query and (rules.any_value or rules.one_value):
            pairs = []
            changed = False
            for pair in query.split("&"):
                matching = rules.param_rules(pair)
                kept: str | None = pair
                if matching:
                    used.append(matching[0])
                    kept = matching[0].rewrite_pair(pair)
                    changed = changed or kept is not None
                if kept is not None:
                    pairs.append(kept)
            if used:
                url_after = rebuild(origin, path, pairs, changed)
                origin, path, query = split_url(url_after)
        if rules.paths:
            moves = rules.path_rules(path)
            if moves:
                used.append(moves[0])
                origin, path = moves[0].dst_origin, moves[0].rewrite_path(path)
        if not used:
            return None
        counterpart = join_url(origin, path, query)
        return Prediction(url, counterpart, tuple(used)) if counterpart != url else None

    def explore(self, prediction: Prediction) -> bool:
        """Fetch this predicted duplicate anyway, as a check? At the rate of its youngest rule,
        by systematic sampling: each prediction adds the rate to the rule's credit, starting
        at one half, and one whose credit reaches 1 is explored (at 5%, the 10th, 30th, 50th,
        ... prediction of the rule in this process). Ask once per URL: each call counts.

        Why not a hash of the URL (which every process would agree on): the number explored
        then varies with the URLs. On the subtree test site (~130 predictions, URLs with the
        server's random port) it ranged 5-13 between runs, and with it whether a crawl met its
        waste goal; counting gives the same rate with no such luck."""
        youngest = min(prediction.rules, key=lambda rule: (self.checks(rule.key), rule.key))
        rate = exploration_rate(self.checks(youngest.key), self.policy)
        credit = self._credit.get(youngest.key, 0.5) + rate
        explored = credit >= 1.0 - 1e-9
        self._credit[youngest.key] = credit - 1.0 if explored else credit
        return explored

    # ---- per decision ------------------------------------------------------------------

    def applicable(self, url: str) -> list[tuple[Rule, str]]:
        """Every live rule that maps ``url`` somewhere, alone, with its counterpart; and the
        composed prediction, credited to each rule it used, when it used more than one."""
        origin, path, query = split_url(url)
        rules = self._live.origins.get(origin)
        found: list[tuple[Rule, str]] = []
        if rules is not None:
            candidates: list[Rule] = list(rules.path_rules(path))
            for pair in query.split("&") if query else []:
                candidates.extend(rules.param_rules(pair))
            for rule in candidates:
                counterpart = rule.apply(url)
                if counterpart is not None:
                    found.append((rule, counterpart))
        prediction = self.predict(url)
        if prediction is not None and len(prediction.rules) > 1:
            found.extend((rule, prediction.counterpart) for rule in prediction.rules)
        return found
