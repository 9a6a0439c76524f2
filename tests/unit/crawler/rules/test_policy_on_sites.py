"""The policy on the subtree test site: issue 13's figures, in a simulated crawl.

The crawl (``tests.support.simulate``) decides with an oracle engine (J >= 0.9 partners, optionally
missing a share of duplicates like the real index) and does what the crawler will: rules before
fetching, counterparts for duplicates' outlinks, learning from every decision. Goals: coverage
>= 0.99, waste <= W0 / 2, no trap page skipped.
"""

from __future__ import annotations

import pytest

from crawler.rules.policy import RulePolicy, State
from neardup.demo.server import ADDRESSES
from neardup.demo.subtrees import build_subtree_site
from neardup.demo.truth import Truth, subtree_truth
from tests.support.simulate import SimResult, simulate

ORDERS = ["bfs", "dfs", "random1", "random4"]


@pytest.fixture(scope="module")
def truth() -> Truth:
    base = {host: f"http://{ip}:8000" for host, ip in ADDRESSES.items()}
    return subtree_truth(build_subtree_site(), base)


def w0(truth: Truth, order: str) -> float:
    return simulate(truth, "none", order=order).measures(truth).waste


def assert_goals(truth: Truth, result: SimResult, order: str) -> None:
    measures = result.measures(truth)
    assert measures.coverage >= 0.99, measures.lost
    assert measures.waste <= w0(truth, order) / 2, measures.as_dict()
    assert not set(result.skipped) & truth.traps
    assert not set(result.suppressed) & truth.traps


def test_without_suppression_everything_is_fetched_and_copies_waste_42_percent(
    truth: Truth,
) -> None:
    measures = simulate(truth, "none").measures(truth)
    assert measures.coverage == 1.0 and measures.fetches == len(truth.pages) == 471
    assert measures.waste == pytest.approx(197 / 471)


def test_dropping_every_outlink_of_a_duplicate_loses_unique_pages(truth: Truth) -> None:
    measures = simulate(truth, "wholesale").measures(truth)
    assert measures.coverage < 0.95
    # the release 2.0 chapters and their "what's new" pages, the mirror's home page
    assert {url.split(":8000")[1].split("chapter")[0] for url in measures.lost} == {
        "/release/2.0/",
        "/",
    }


@pytest.mark.parametrize("order", ORDERS)
def test_rules_and_counterparts_reach_the_goals(truth: Truth, order: str) -> None:
    result = simulate(truth, "rules", order=order)
    assert_goals(truth, result, order)
    # the manual and its mirror copy (whichever a crawl meets first): only rules can skip them
    mirrored = {u for u, f in truth.family.items() if f == "mirror"}
    mirrored |= {p for u in mirrored for p in truth.partners[u]}
    assert set(result.skipped) & mirrored
    assert {truth.family[url] for url in result.skipped} & {"params"}


@pytest.mark.parametrize("order", ORDERS)
def test_evidence_alone_keeps_pagination_out(truth: Truth, order: str) -> None:
    result = simulate(truth, "rules", RulePolicy(never_learn=frozenset()), order=order)
    assert_goals(truth, result, order)
    assert result.rules is not None
    for key, status in result.rules.store.statuses().items():
        if " page " in key or " seite " in key:
            assert status.state is not State.ACTIVE or "=1 -" in key, (key, status)


def test_the_release_guides_are_followed_and_their_rewrite_dropped(truth: Truth) -> None:
    result = simulate(truth, "rules")
    assert result.rules is not None
    whatsnew = [url for url in truth.pages if url.endswith("/whatsnew")]
    assert len(whatsnew) == 18 and set(whatsnew) <= set(result.fetch_log)
    states = {k: s.state for k, s in result.rules.store.statuses().items() if "/release/" in k}
    assert states and set(states.values()) == {State.DROPPED}


@pytest.mark.parametrize("order", ["bfs", "random1"])
def test_engine_misses_need_checks_that_compare_the_pages(truth: Truth, order: str) -> None:
    trusting = simulate(truth, "rules", order=order, engine_misses=0.25, verify=False)
    assert trusting.measures(truth).waste > 0.9 * w0(truth, order)  # good rules look bad
    verified = simulate(truth, "rules", order=order, engine_misses=0.25, verify=True)
    assert_goals(truth, verified, order)
