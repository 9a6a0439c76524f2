"""What a page's verdict means for the crawl: whether its outlinks are followed, at what
priority, and the standing an unchanged revisit keeps (pure; used by the engine)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dedup_worker.contract.messages import Verdict
from dedup_worker.core.records import SUPPRESSED, DocRecord

_FOLLOWED_VERDICTS = frozenset({Verdict.UNIQUE, Verdict.CHANGED})
#: Stored verdicts of a fetch whose unchanged revisit stays a duplicate (when the record names
#: its original).
_DUPLICATE_STANDINGS = frozenset({*SUPPRESSED, Verdict.UNCHANGED.value})
_UNCHANGED = Verdict.UNCHANGED  # bound once: ``Verdict.X`` is a slow lookup on Python 3.11


@dataclass
class Outcome:
    """A page's verdict, the earlier page it duplicates (URL, id), the distance, the evidence."""

    verdict: Verdict
    original: tuple[str, int] | None = None
    distance: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def follows(outcome: Outcome) -> bool:
    """Whether the page's outlinks are followed: new content, and an unchanged revisit of a
    page that was not a duplicate (``unchanged``)."""
    if outcome.verdict is _UNCHANGED:
        return outcome.original is None
    return outcome.verdict in _FOLLOWED_VERDICTS


def unchanged(distance: int, previous: DocRecord, previous_outcome: Outcome | None) -> Outcome:
    """A revisit with its URL's previous content (``distance`` from it) keeps that fetch's
    standing.

    A page that was new content stays followed: its outlinks go out again (at the low priority
    of an unchanged page), so a recrawl with the index of an earlier one reaches the pages that
    changed below unchanged ones, instead of stopping at its seeds. A page that was a duplicate
    (or an unchanged revisit of one) stays a duplicate of the same original, and its outlinks
    stay unfollowed. ``previous_outcome``: the previous fetch's outcome when it is in the same
    batch (its record is still pending).
    """
    original: tuple[str, int] | None = None
    if previous_outcome is not None:
        original = None if follows(previous_outcome) else previous_outcome.original
    elif previous.verdict in _DUPLICATE_STANDINGS and previous.duplicate_of is not None:
        original = (previous.duplicate_of, previous.duplicate_of_id or 0)
    if original is None:
        return Outcome(_UNCHANGED, None, distance, {"rule": "same URL, within k"})
    evidence = {"rule": "same URL, within k; its previous fetch was a duplicate"}
    return Outcome(_UNCHANGED, original, distance, evidence)


class Priorities:
    """Crawl priority of a decided page: 0 for one not followed; for new content, novelty
    (distance to the nearest page within k) weighed against depth; low for an unchanged one."""

    def __init__(self, k: int, novelty_weight: float, depth_halflife: float) -> None:
        self.k = k
        self.novelty_weight = novelty_weight
        self.depth_halflife = depth_halflife
        self._cache: dict[tuple[int, Any], tuple[float, float, float]] = {}

    def of(self, depth: int, outcome: Outcome) -> float:
        """The priority; adds the novelty and depth factor to the outcome's evidence."""
        if not follows(outcome):
            return 0.0
        if outcome.verdict is _UNCHANGED:
            return round(0.1 * float(0.5 ** (depth / self.depth_halflife)), 4)
        nearest = outcome.evidence.get("nearest")
        key = (depth, nearest)
        parts = self._cache.get(key)
        if parts is None:  # three round()s cost ~0.8 us; (depth, nearest) pairs are few
            parts = self._parts(*key)
            if len(self._cache) < 10_000:
                self._cache[key] = parts
        novelty, depth_factor, priority = parts
        outcome.evidence["novelty"] = novelty
        outcome.evidence["depth_factor"] = depth_factor
        return priority

    def _parts(self, depth: int, nearest: Any) -> tuple[float, float, float]:
        """(novelty, depth factor, priority) of a page worth crawling, each rounded."""
        depth_factor = float(0.5 ** (depth / self.depth_halflife))
        # Nothing within k: fully novel. A match at distance d is (d + 1) / (k + 2) novel.
        novelty = 1.0 if nearest is None else (int(nearest) + 1) / (self.k + 2)
        weight = self.novelty_weight
        priority = round(weight * novelty + (1 - weight) * depth_factor, 4)
        return round(novelty, 4), round(depth_factor, 4), priority
