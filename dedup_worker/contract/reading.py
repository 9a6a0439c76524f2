"""How to read the decisions topic: the rule every reader applies, written once.

The contract (README, "Reading decisions"): a page is one fetch of one URL (``url`` +
``fetched_at``). A decision with ``corrects: true`` is final for its page: a later
non-correcting decision for the same page does not undo it. Decisions are idempotent, so a
redelivered one (a crash, a rebalance, an aborted transaction that the broker shows anyway)
changes nothing; a correction may arrive twice too. A later correction of an already corrected
page points it to an earlier original (the worker only re-corrects towards earlier pages), so
it replaces the first.

:class:`DecisionFold` applies the rule one decision at a time and says what each one did (the
crawler acts on that); :func:`fold_decisions` folds a whole stream (reports, tests).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from dedup_worker.contract.messages import Decision, Verdict

__all__ = [
    "DecisionFold",
    "PageKey",
    "Standing",
    "Step",
    "fold_decisions",
    "next_step",
    "page_key",
]


class PageKey(NamedTuple):
    """A page is one fetch of one URL: the same URL fetched twice is two pages."""

    url: str
    fetched_at: float


def page_key(decision: Decision) -> PageKey:
    return PageKey(decision.url, decision.fetched_at)


class Step(Enum):
    """What one decision did to its page's standing decision."""

    #: The page's first decision (correcting or not).
    FIRST = "first"
    #: A correction that changes the standing decision (the first one for the page, or one
    #: pointing to another original).
    CORRECTION = "correction"
    #: Nothing new: a redelivery, or a non-correcting decision after a correction.
    REPEAT = "repeat"


class Standing(NamedTuple):
    """What the rule needs to remember of a page's standing decision (readers that track many
    pages keep this instead of the whole decision)."""

    corrects: bool
    verdict: Verdict
    duplicate_of: str | None

    @classmethod
    def of(cls, decision: Decision) -> Standing:
        return cls(decision.corrects, decision.verdict, decision.duplicate_of)


def next_step(held: Standing | None, decision: Decision) -> Step:
    """The rule: what ``decision`` does to a page whose standing decision is ``held``.

    The standing decision becomes ``decision`` on FIRST and CORRECTION; on REPEAT it stays
    (a non-correcting repeat may replace a non-correcting one: by contract they are equal).
    """
    if held is None:
        return Step.FIRST
    if not decision.corrects:
        return Step.REPEAT  # a redelivery, or after a correction (which is final)
    if held.corrects and Standing.of(decision) == held:
        return Step.REPEAT  # the same correction again
    return Step.CORRECTION


@dataclass
class DecisionFold:
    """The standing decision of every page seen so far; :meth:`add` applies one decision.

    ``final`` keeps, per page, the latest correction if there is one, else the latest
    decision (a redelivery equals the one it repeats, so which copy is kept does not matter).
    """

    final: dict[PageKey, Decision] = field(default_factory=dict)

    def add(self, decision: Decision) -> Step:
        key = page_key(decision)
        held = self.final.get(key)
        step = next_step(None if held is None else Standing.of(held), decision)
        if step is not Step.REPEAT or not (held is None or held.corrects):
            self.final[key] = decision
        return step

    def corrected(self) -> int:
        """Pages whose standing decision is a correction."""
        return sum(1 for decision in self.final.values() if decision.corrects)


def fold_decisions(decisions: Iterable[Decision]) -> dict[PageKey, Decision]:
    """The standing decision of each page of a decision stream (see :class:`DecisionFold`)."""
    fold = DecisionFold()
    for decision in decisions:
        fold.add(decision)
    return fold.final
