"""Coverage and waste of a crawl from its fetch log and the site's J >= 0.9 relation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.coverage import check_partners, coverage, measure, waste

#: a ~ a2 ~ a3 (one content thrice), b alone, c ~ c2
PARTNERS = {
    "a": {"a2", "a3"},
    "a2": {"a", "a3"},
    "a3": {"a", "a2"},
    "c": {"c2"},
    "c2": {"c"},
}
PAGES = ["a", "a2", "a3", "b", "c", "c2"]


def test_a_crawl_without_suppression_covers_all_and_wastes_the_copies() -> None:
    result = measure(PAGES, PAGES, PARTNERS)
    assert (result.coverage, result.fetches, result.wasted) == (1.0, 6, 3)
    assert result.waste == 0.5 and result.lost == ()


def test_a_page_is_covered_by_a_fetched_partner() -> None:
    result = measure(["a3", "b", "c2"], PAGES, PARTNERS)
    assert (result.coverage, result.waste, result.lost) == (1.0, 0.0, ())


def test_lost_pages_are_listed() -> None:
    result = measure(["a", "b"], PAGES, PARTNERS)
    assert result.lost == ("c", "c2") and result.coverage == pytest.approx(4 / 6)
    assert result.as_dict() == {
        "coverage": 0.6667,
        "waste": 0.0,
        "reachable": 6,
        "covered": 4,
        "fetches": 2,
        "wasted": 0,
        "lost": 2,
    }


def test_waste_counts_refetches_and_later_copies_in_fetch_order() -> None:
    log = ["b", "a2", "b", "a", "x", "a3"]  # x: fetched, not reachable, no partner
    assert waste(log, PARTNERS) == pytest.approx(3 / 6)
    assert measure(log, PAGES, PARTNERS).covered == 4


def test_empty_crawls_and_sites() -> None:
    assert coverage([], [], PARTNERS) == 1.0 and waste([], PARTNERS) == 0.0
    assert coverage([], ["a"], PARTNERS) == 0.0


@pytest.mark.parametrize(
    ("partners", "message"), [({"a": {"b"}}, "not symmetric"), ({"a": {"a"}}, "own partner")]
)
def test_a_relation_that_is_no_resemblance_is_refused(
    partners: dict[str, set[str]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_partners(partners)
    with pytest.raises(ValueError, match=message):
        measure(["a"], ["a"], partners)


@given(st.permutations(PAGES), st.integers(0, 6))
def test_measures_stay_in_range_and_a_full_crawl_covers_all(order: list[str], cut: int) -> None:
    partial = measure(order[:cut], PAGES, PARTNERS)
    assert 0.0 <= partial.coverage <= 1.0 and 0.0 <= partial.waste <= 1.0
    full = measure(order, PAGES, PARTNERS)
    assert full.coverage == 1.0 and full.wasted == 3  # two copies of a, one of c, any order
