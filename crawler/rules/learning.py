"""Evidence for rules from decisions: candidate rules of a duplicate pair, and checks.

A decision "page ``u`` is a near-duplicate of ``d``" proposes the rules that map ``u`` onto
``d`` (:func:`derive_rules`):

- same path and query, other origin: a host alias;
- same query, other path: a path-prefix rewrite; the longest common path suffix (in segments)
  is the part both pages share, what is left before it are the prefixes
  (``mirror/docs/v1/a/b -> main/docs/a/b`` gives ``mirror/docs/v1 -> main/docs``);
- same origin and path, exactly one parameter differs, present in ``u``: the parameter is
  dropped (``d`` lacks it) or set (``d`` has another value), for any value and for ``u``'s value.
  Pairs that differ in more than one parameter support nothing: which one mattered is unknown.

Any decision is also a *check* of the rules that apply to its page (:func:`observe`): with
``target`` the page's keeper (itself if unique, else the keeper of the page it duplicates),
a rule's counterpart ``c`` says nothing while it is unknown; once fetched, a direct comparison
of the two pages (``resembles``: their sketches, clearly above the detector's threshold) settles
the check when both pages have one; else it succeeds if ``c`` is ``target`` or its keeper is,
and fails if ``c`` has another keeper. A check of a host or
prefix rewrite is also a check of its inverse (``c`` holds ``u``'s content iff ``u`` holds
``c``'s): a mirror learned in one direction predicts in both, whichever copy a crawl meets
first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from crawler.rules.policy import DEFAULT_POLICY, RulePolicy
from crawler.rules.rewrite import ParamRule, PathRewrite, Rule, split_url

#: keeper_of(url): the keeper of a fetched page (itself if unique, else the earliest page of
#: its duplicates), or None if the page was not fetched (not decided) yet.
KeeperOf = Callable[[str], str | None]
#: resembles(url, counterpart): a direct comparison of two fetched pages (e.g. their sketches
#: in the doc store: estimated resemblance clearly above 0.9), or None if either is unknown.
#: The engine's index finds a pair only within Hamming distance k, and J >= 0.9 pairs often
#: lie further apart; a check that trusted the index alone would count each miss against a
#: good rule, and one that trusted its keepers would count pairs just below 0.9 as clean.
Resembles = Callable[[str, str], bool | None]


def derive_rules(duplicate: str, original: str, policy: RulePolicy = DEFAULT_POLICY) -> list[Rule]:
    """Candidate rules mapping ``duplicate`` onto ``original`` (both canonical URLs)."""
    d_origin, d_path, d_query = split_url(duplicate)
    o_origin, o_path, o_query = split_url(original)
    if d_query == o_query and (d_origin, d_path) != (o_origin, o_path):
        return [_path_rewrite(d_origin, d_path, o_origin, o_path)]
    if (d_origin, d_path) == (o_origin, o_path) and d_query != o_query:
        return [r for r in _param_rules(d_origin, d_query, o_query) if policy.learnable(r.name)]
    return []


def rewrite_between(page: str, keeper: str) -> Rule | None:
    """The most specific rewrite of ``page`` onto ``keeper`` (for its outlinks' counterparts),
    whatever the policy: a value-specific parameter rule is narrow enough to be safe."""
    rules = derive_rules(page, keeper, RulePolicy(never_learn=frozenset()))
    return rules[-1] if rules else None  # path rules come alone; value-specific last


def _path_rewrite(d_origin: str, d_path: str, o_origin: str, o_path: str) -> PathRewrite:
    d_segments, o_segments = d_path.split("/"), o_path.split("/")
    # Both split lists start with "" (paths start with "/"): keep it out of the common part, so
    # equal paths leave empty prefixes (a host alias).
    common = 0
    limit = min(len(d_segments), len(o_segments)) - 1
    while common < limit and d_segments[-1 - common] == o_segments[-1 - common]:
        common += 1
    d_prefix = "/".join(d_segments[: len(d_segments) - common])
    o_prefix = "/".join(o_segments[: len(o_segments) - common])
    return PathRewrite(d_origin, d_prefix, o_origin, o_prefix)


def _param_rules(origin: str, d_query: str, o_query: str) -> list[ParamRule]:
    d_params, o_params = _by_name(d_query), _by_name(o_query)
    differing = [n for n in d_params.keys() | o_params.keys() if d_params.get(n) != o_params.get(n)]
    if len(differing) != 1:
        return []
    name = differing[0]
    d_values, o_values = d_params.get(name, []), o_params.get(name, [])
    if len(d_values) != 1 or len(o_values) > 1:
        return []
    value = d_values[0]
    replacement = o_values[0] if o_values else None
    return [ParamRule(origin, name, None, replacement), ParamRule(origin, name, value, replacement)]


def _by_name(query: str) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for pair in query.split("&") if query else []:
        name, _, value = pair.partition("=")
        params.setdefault(name, []).append(value)
    return params


@dataclass(frozen=True, slots=True)
class Observation:
    """One check of one rule: ``url`` was decided and is (not) a duplicate of ``counterpart``."""

    rule: Rule
    url: str
    counterpart: str
    success: bool

    @property
    def id(self) -> str:
        """Stable id: a decision delivered twice counts once."""
        text = f"{self.rule.key}\n{self.url}\n{self.counterpart}\n{int(self.success)}"
        return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()

    @property
    def path(self) -> str:
        return split_url(self.url)[1]

    @property
    def value(self) -> str:
        """The checked page's value of the rule's parameter ("" for other rules)."""
        if not isinstance(self.rule, ParamRule):
            return ""
        for pair in split_url(self.url)[2].split("&"):
            name, _, value = pair.partition("=")
            if name == self.rule.name:
                return value
        return ""


def observe(
    url: str,
    duplicate_of: str | None,
    predictions: Iterable[tuple[Rule, str]],
    keeper_of: KeeperOf,
    resembles: Resembles | None = None,
) -> list[Observation]:
    """The checks a decision of ``url`` gives the rules that map it onto a counterpart."""
    found: dict[tuple[str, str], Observation] = {}
    for rule, counterpart in predictions:
        success = check_outcome(url, duplicate_of, counterpart, keeper_of, resembles)
        if success is None:
            continue
        found.setdefault((rule.key, counterpart), Observation(rule, url, counterpart, success))
        if isinstance(rule, PathRewrite):  # "same content" is symmetric: check the way back
            back = rule.inverse()
            found.setdefault((back.key, url), Observation(back, counterpart, url, success))
    return list(found.values())


def check_outcome(
    url: str,
    duplicate_of: str | None,
    counterpart: str,
    keeper_of: KeeperOf,
    resembles: Resembles | None = None,
) -> bool | None:
    """Whether decided page ``url`` holds its counterpart's content: None while the counterpart
    is unknown (no evidence either way); else what ``resembles`` says when it knows both pages
    (the detector's keepers put pairs just below the threshold together, and a rule or group
    vouched for by those skips pages below it); else whether both have the same keeper."""
    target = url if duplicate_of is None else (keeper_of(duplicate_of) or duplicate_of)
    keeper = keeper_of(counterpart)
    if keeper is None and target != counterpart:
        return None
    direct = resembles(url, counterpart) if resembles is not None else None
    if direct is not None:  # the two pages compared themselves: that settles it
        return direct
    return target in (counterpart, keeper)


def decision_checks(
    url: str,
    duplicate_of: str | None,
    applicable: Iterable[tuple[Rule, str]],
    keeper_of: KeeperOf,
    policy: RulePolicy = DEFAULT_POLICY,
    resembles: Resembles | None = None,
) -> list[Observation]:
    """All checks of one decision: the rules derived from its pair (if a duplicate) and the
    known rules that apply to its page (``RuleBook.applicable``)."""
    derived = [] if duplicate_of is None else derive_rules(url, duplicate_of, policy)
    pairs = [(rule, duplicate_of) for rule in derived if duplicate_of is not None]
    return observe(url, duplicate_of, [*pairs, *applicable], keeper_of, resembles)
