"""The rule for reading decisions, written once in the contract (``fold_decisions``)."""

from __future__ import annotations

from dataclasses import replace

from dedup_worker.contract.messages import Decision, Verdict
from dedup_worker.contract.reading import (
    DecisionFold,
    PageKey,
    Standing,
    Step,
    fold_decisions,
    next_step,
)

FIRST = Decision(
    url="http://b.test/", host="b.test", verdict=Verdict.UNIQUE, simhash="0" * 16,
    priority=0.9, follow_outlinks=True, fetched_at=2.0, decided_at=3.0,
    outlinks=("http://b.test/x",),
)  # fmt: skip
CORRECTION = replace(
    FIRST, verdict=Verdict.NEAR_DUPLICATE, follow_outlinks=False, outlinks=(),
    duplicate_of="http://a.test/", corrects=True, priority=0.0,
)  # fmt: skip
KEY = PageKey("http://b.test/", 2.0)


def test_a_correction_is_final_for_its_page() -> None:
    fold = DecisionFold()
    assert [fold.add(d) for d in (FIRST, CORRECTION, FIRST)] == [
        Step.FIRST,
        Step.CORRECTION,
        Step.REPEAT,  # the page's own decision, redelivered after the correction
    ]
    assert fold.final[KEY] is CORRECTION and fold.corrected() == 1


def test_a_correction_that_overtook_the_first_decision_still_wins() -> None:
    assert fold_decisions([CORRECTION, FIRST]) == {KEY: CORRECTION}


def test_redelivered_decisions_change_nothing() -> None:
    fold = DecisionFold()
    steps = [fold.add(d) for d in (FIRST, FIRST, CORRECTION, CORRECTION, FIRST)]
    assert steps == [Step.FIRST, Step.REPEAT, Step.CORRECTION, Step.REPEAT, Step.REPEAT]
    assert fold.final == {KEY: CORRECTION} and fold.corrected() == 1


def test_a_correction_to_an_earlier_original_replaces_the_first_correction() -> None:
    earlier = replace(CORRECTION, duplicate_of="http://a.test/older")
    fold = DecisionFold()
    assert [fold.add(d) for d in (FIRST, CORRECTION, earlier)] == [
        Step.FIRST,
        Step.CORRECTION,
        Step.CORRECTION,
    ]
    assert fold.final[KEY].duplicate_of == "http://a.test/older"


def test_a_page_is_a_url_and_a_fetch_time() -> None:
    """The same URL fetched again is another page: its decision does not touch the first."""
    refetch = replace(FIRST, fetched_at=9.0, verdict=Verdict.UNCHANGED)
    final = fold_decisions([CORRECTION, refetch])
    assert final == {KEY: CORRECTION, PageKey("http://b.test/", 9.0): refetch}


def test_the_rule_needs_only_the_standing_decision() -> None:
    assert next_step(None, FIRST) is Step.FIRST
    assert next_step(Standing.of(FIRST), FIRST) is Step.REPEAT
    assert next_step(Standing.of(FIRST), CORRECTION) is Step.CORRECTION
    assert next_step(Standing.of(CORRECTION), CORRECTION) is Step.REPEAT
    assert next_step(Standing.of(CORRECTION), FIRST) is Step.REPEAT
