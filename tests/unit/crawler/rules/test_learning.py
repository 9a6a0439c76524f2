"""Candidate rules from duplicate pairs, and the checks a decision gives."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.rules.learning import (
    Observation,
    check_outcome,
    decision_checks,
    derive_rules,
    observe,
    rewrite_between,
)
from crawler.rules.policy import RulePolicy
from crawler.rules.rewrite import ParamRule, PathRewrite
from tests.support.url_strategies import related_pairs, urls

M, D = "http://mirror.example", "http://docs.example"
NO_PRIOR = RulePolicy(never_learn=frozenset())


@pytest.mark.parametrize(
    ("duplicate", "original", "keys"),
    [
        (f"{M}/docs/v1/guide/intro", f"{D}/docs/guide/intro", [f"prefix {M}/docs/v1 {D}/docs"]),
        (f"{M}/a/b?x=1", f"{D}/a/b?x=1", [f"host {M} {D}"]),
        (f"{D}/print/a/3", f"{D}/a/3", [f"prefix {D}/print {D}"]),
        (f"{M}/", f"{D}/docs/", [f"prefix {M} {D}/docs"]),
        (f"{D}/docs/v1/", f"{D}/docs/", [f"prefix {D}/docs/v1 {D}/docs"]),
        (
            f"{D}/item?sessid=abc&x=1",
            f"{D}/item?x=1",
            [f"param {D} sessid * -", f"param {D} sessid =abc -"],
        ),
        (
            f"{D}/list?sort=desc",
            f"{D}/list?sort=asc",
            [f"param {D} sort * =asc", f"param {D} sort =desc =asc"],
        ),
        (f"{D}/list?a=1&b=2", f"{D}/list", []),  # two parameters differ: which one mattered?
        (f"{D}/list", f"{D}/list?a=1", []),  # the duplicate lacks the parameter
        (f"{D}/list?a=1&a=2", f"{D}/list", []),
        (f"{D}/x?a=1", f"{D}/y?a=2", []),  # path and query differ
        (f"{D}/x", f"{D}/x", []),
    ],
)
def test_derive_rules(duplicate: str, original: str, keys: list[str]) -> None:
    assert [rule.key for rule in derive_rules(duplicate, original)] == keys


def test_pagination_and_language_parameters_never_become_candidates() -> None:
    assert derive_rules(f"{D}/news/?page=1", f"{D}/news/") == []
    assert derive_rules(f"{D}/a?LANG=de", f"{D}/a?LANG=en") == []
    assert len(derive_rules(f"{D}/news/?page=1", f"{D}/news/", NO_PRIOR)) == 2


@given(related_pairs() | st.tuples(urls(), urls()))
def test_every_derived_rule_maps_the_duplicate_onto_the_original(pair: tuple[str, str]) -> None:
    duplicate, original = pair
    for rule in derive_rules(duplicate, original, NO_PRIOR):
        assert rule.apply(duplicate) == original


def test_rewrite_between_is_the_most_specific_rule() -> None:
    assert rewrite_between(f"{D}/a?page=1", f"{D}/a") == ParamRule(D, "page", "1")
    assert rewrite_between(f"{M}/v1/a", f"{D}/a") == PathRewrite(M, "/v1", D, "")
    assert rewrite_between(f"{D}/x?a=1", f"{D}/y?a=2") is None


def keepers(**fetched: str) -> dict[str, str]:
    return {f"{D}/{k}": f"{D}/{v}" for k, v in fetched.items()}


def test_check_outcome_compares_keepers() -> None:
    keeper = keepers(a="a", b="a", c="c").get
    assert check_outcome(f"{D}/n", f"{D}/a", f"{D}/a", keeper) is True
    assert check_outcome(f"{D}/n", f"{D}/b", f"{D}/a", keeper) is True  # b is a copy of a
    assert check_outcome(f"{D}/n", f"{D}/a", f"{D}/b", keeper) is True
    assert check_outcome(f"{D}/n", f"{D}/a", f"{D}/c", keeper) is False
    assert check_outcome(f"{D}/n", None, f"{D}/c", keeper) is False  # unique, c is known
    assert check_outcome(f"{D}/n", None, f"{D}/unknown", keeper) is None
    assert check_outcome(f"{D}/a", None, f"{D}/b", keeper) is True  # b later found a copy of a


def test_a_direct_comparison_settles_a_check_when_both_pages_have_one() -> None:
    keeper = keepers(a="a", c="c").get

    def says(answer: bool | None) -> Callable[[str, str], bool | None]:
        return lambda url, counterpart: answer

    # the detector put n with a, but the two pages do not clearly resemble: a failure
    assert check_outcome(f"{D}/n", f"{D}/a", f"{D}/a", keeper, says(False)) is False
    # the index missed the pair, the pages resemble: a success
    assert check_outcome(f"{D}/n", f"{D}/a", f"{D}/c", keeper, says(True)) is True
    # no sketches: the keepers decide
    assert check_outcome(f"{D}/n", f"{D}/a", f"{D}/a", keeper, says(None)) is True
    assert check_outcome(f"{D}/n", f"{D}/a", f"{D}/c", keeper, says(None)) is False
    # the counterpart not fetched yet: no evidence, whatever the comparer would say
    assert check_outcome(f"{D}/n", f"{D}/a", f"{D}/unknown", keeper, says(True)) is None


def test_observe_counts_each_rule_and_counterpart_once_and_checks_the_way_back() -> None:
    rule = PathRewrite(M, "", D, "")
    keeper = {f"{D}/a": f"{D}/a"}.get
    found = observe(f"{M}/a", f"{D}/a", [(rule, f"{D}/a"), (rule, f"{D}/a")], keeper)
    assert found == [
        Observation(rule, f"{M}/a", f"{D}/a", True),
        Observation(rule.inverse(), f"{D}/a", f"{M}/a", True),
    ]
    assert found[0].id != found[1].id and len(found[0].id) == 16
    assert found[0].path == "/a" and found[0].value == ""


def test_an_observation_knows_the_checked_value_of_its_parameter() -> None:
    rule = ParamRule(D, "sid")
    assert Observation(rule, f"{D}/x?a=1&sid=q", f"{D}/x?a=1", True).value == "q"
    assert Observation(rule, f"{D}/x?sid=", f"{D}/x", True).value == ""


def test_repeated_decisions_give_the_same_observation_ids() -> None:
    keeper = {f"{D}/x": f"{D}/x"}.get
    first = decision_checks(f"{D}/x?sid=1", f"{D}/x", [], keeper)
    again = decision_checks(f"{D}/x?sid=1", f"{D}/x", [], keeper)
    assert [o.id for o in first] == [o.id for o in again] and len(first) == 2


def test_decision_checks_join_derived_rules_and_applicable_ones() -> None:
    keeper = keepers(x="x", y="y").get
    known = ParamRule(D, "sort")
    # a unique page whose counterpart is known: a failure for the rule that predicted it
    checks = decision_checks(f"{D}/y?sort=1", None, [(known, f"{D}/y")], keeper)
    assert checks == [Observation(known, f"{D}/y?sort=1", f"{D}/y", False)]
    # a duplicate: success for the derived rules and for the applicable one
    checks = decision_checks(f"{D}/x?sort=2", f"{D}/x", [(known, f"{D}/x")], keeper)
    assert {(o.rule.key, o.success) for o in checks} == {
        (f"param {D} sort * -", True),
        (f"param {D} sort =2 -", True),
    }


@given(st.booleans())
def test_unknown_counterparts_give_no_evidence(duplicate: bool) -> None:
    keeper = keepers(x="x").get
    checks = decision_checks(
        f"{D}/z", f"{D}/x" if duplicate else None, [(ParamRule(D, "q"), f"{D}/nowhere")], keeper
    )
    assert all(o.counterpart != f"{D}/nowhere" for o in checks)
