"""The duplicates a crawl of a site folder fetched, by what a URL rule could have done (pure).

A duplicate fetched (a page with a partner fetched before it, as :func:`crawler.coverage.measure`
counts it) could have been skipped only by a URL rule that maps it onto such a partner. The
crawler learns its rules from its own decisions (:func:`crawler.rules.learning.derive_rules`
of a page and the page it duplicates) and acts on one only after enough clean checks, each a
fetch. Each duplicate fetched is put in one class by the best rule the crawler could derive
from it and a partner fetched before it, scored against the site (the share of the page pairs
of the site it maps that are alike, J >= 0.9):

- **rule_holds**: alike on every pair. Skipping by it loses nothing: the fetch was the price of
  learning the rule (``checks_to_learn`` clean checks at least, with the default policy), or
  of one never learned.
- **rule_nearly**: alike on at least :data:`NEARLY` of its pairs, not all: skipping by it would
  lose the pages of the others.
- **no_rule_holds**: every rule is alike on fewer than :data:`NEARLY` of its pairs (one document
  rendered by two generators, releases whose pages changed): only a fetch tells which pages
  are copies.
- **no_rule**: no rule of the crawler's kinds maps the page onto a partner (another path and
  query, several parameters changed), and **fetched_again**: the same URL fetched twice.

So a user sees how many of the duplicates fetched a better rule learner could still save (the
first class, less the checks each rule needs) and how many no URL rule can save safely.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from crawler.rules.learning import derive_rules
from crawler.rules.policy import DEFAULT_POLICY, Evidence, checks_to_activate
from crawler.rules.rewrite import Rule
from neardup.demo.static import SiteTruth

#: A rule alike on this share of its pairs or more, but not all, is "nearly" right.
NEARLY = 0.9


@dataclass(frozen=True)
class DuplicatesByRule:
    """The duplicates a crawl fetched, in classes (see the module docstring); they sum to the
    crawl's duplicates fetched."""

    rule_holds: int
    #: The distinct rules the first class's pages were put in by.
    rules_that_hold: int
    rule_nearly: int
    no_rule_holds: int
    no_rule: int
    fetched_again: int
    #: The fewest clean checks (fetches) the default policy needs to activate a new rule.
    checks_to_learn: int

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class _RuleScores:
    """Each rule's share of alike pairs over the site, computed once a rule."""

    def __init__(self, truth: SiteTruth) -> None:
        self._pages = truth.pages
        self._known = set(truth.pages)
        self._partners = truth.partners
        self._shares: dict[str, float] = {}

    def share(self, rule: Rule) -> float:
        if rule.key not in self._shares:
            self._shares[rule.key] = self._score(rule)
        return self._shares[rule.key]

    def _score(self, rule: Rule) -> float:
        pairs = alike = 0
        for url in self._pages:
            other = rule.apply(url)
            if other is None or other not in self._known:
                continue
            pairs += 1
            alike += other in self._partners.get(url, ())
        return alike / pairs if pairs else 0.0


def duplicates_by_rule(truth: SiteTruth, fetch_log: Sequence[str]) -> DuplicatesByRule:
    """Classify each duplicate in ``fetch_log`` (HTML pages served, in order)."""
    scores = _RuleScores(truth)
    counts = {"rule_holds": 0, "rule_nearly": 0, "no_rule_holds": 0, "no_rule": 0}
    holding: set[str] = set()
    again = 0
    fetched: set[str] = set()
    for url in fetch_log:
        if url in fetched:
            again += 1
            continue
        earlier = sorted(p for p in truth.partners.get(url, ()) if p in fetched)
        fetched.add(url)
        if not earlier:
            continue
        best = _best_rule(url, earlier, scores)
        if best is None:
            counts["no_rule"] += 1
        elif best[0] == 1.0:
            counts["rule_holds"] += 1
            holding.add(best[1].key)
        else:
            counts["rule_nearly" if best[0] >= NEARLY else "no_rule_holds"] += 1
    return DuplicatesByRule(
        rules_that_hold=len(holding),
        fetched_again=again,
        checks_to_learn=checks_to_activate(Evidence(), False, DEFAULT_POLICY),
        **counts,
    )


def _best_rule(url: str, partners: Iterable[str], scores: _RuleScores) -> tuple[float, Rule] | None:
    best: tuple[float, Rule] | None = None
    for partner in partners:
        for rule in derive_rules(url, partner):
            share = scores.share(rule)
            if best is None or share > best[0]:
                best = (share, rule)
    return best


def duplicates_by_rule_lines(d: DuplicatesByRule) -> list[str]:
    """The summary's lines under "duplicates fetched"."""
    return [
        "      by the best URL rule mapping each onto a partner fetched before it (share of the",
        "      site's page pairs it maps that are alike):",
        f"        alike on every pair:      {d.rule_holds:>6} ({d.rules_that_hold} rules; a rule "
        f"needs {d.checks_to_learn}+ clean checks to act)",
        f"        alike on {NEARLY:.0%}-99%:         {d.rule_nearly:>6} (skipping by it loses the "
        "rest)",
        f"        alike on under {NEARLY:.0%}:       {d.no_rule_holds:>6} (only a fetch tells: "
        "renderings, changed releases)",
        f"        no rule maps it:          {d.no_rule:>6}",
        f"        the same URL again:       {d.fetched_again:>6}",
    ]
