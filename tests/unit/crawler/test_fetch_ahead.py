"""Fetching a queued page ahead of its turn so that a rule can skip the request that maps onto
it (:mod:`crawler.ahead`): the bookkeeping, the link scheduler's side, the gate's side."""

from __future__ import annotations

import pytest
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request

from crawler.ahead import AHEAD_META, Queued
from crawler.crawl_rules import RULE, CrawlRules
from crawler.judging import HOLD
from crawler.links import LINK_META
from crawler.rules.pacing import Pacer
from crawler.rules.policy import State
from crawler.rules.rewrite import ParamRule, PathRewrite
from crawler.seen import CLAIMED_META
from dedup_worker.contract.predictions import PredictedDuplicate
from tests.unit.crawler.rules.test_crawl_rules import Clock, D, M, Stats, decision, setup
from tests.unit.crawler.test_plugin_components import Plugin, requests

REF = ParamRule(D, "ref", "also")


def test_queued_requests_are_found_by_url_and_an_original_sent_ahead_is_dropped_once() -> None:
    queued = Queued(limit=3)
    first, second = Request("http://a.test/1"), Request("http://a.test/2")
    queued.add("http://a.test/1", first)
    queued.add("http://a.test/2", second)
    assert queued.get("http://a.test/1") is first and queued.get("http://a.test/3") is None
    queued.sent_ahead("http://a.test/1")
    assert queued.get("http://a.test/1") is None  # not sent ahead twice
    ahead = first.replace(meta={AHEAD_META: True})
    assert queued.leaving("http://a.test/1", ahead)  # the one sent ahead goes
    assert not queued.leaving("http://a.test/1", first)  # its original is dropped
    assert queued.leaving("http://a.test/1", first)  # only once: a later request goes
    resumed = Queued()  # a JOBDIR resume: both requests in the queue, nothing remembered
    assert resumed.leaving("http://a.test/1", ahead)
    assert not resumed.leaving("http://a.test/1", first)
    assert queued.leaving("http://a.test/2", second) and queued.get("http://a.test/2") is None
    for n in range(4):  # a cache: full, it starts over
        queued.add(f"http://a.test/{n}", Request(f"http://a.test/{n}"))
    assert len(queued) == 1


def test_a_queued_link_goes_out_ahead_of_its_turn_and_its_original_is_dropped() -> None:
    plugin = Plugin()
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)
    first, second = plugin.engine.crawled
    links = plugin.session.links
    assert not links.fetch_ahead("http://a.test/3")  # not waiting here
    assert links.fetch_ahead("http://a.test/2")
    assert not links.fetch_ahead("http://a.test/2")  # already sent ahead
    ahead = plugin.engine.crawled[-1]
    assert ahead.url == second.url and ahead.meta[AHEAD_META] and ahead.meta[LINK_META]
    assert ahead.meta[CLAIMED_META] and ahead.priority > first.priority
    assert plugin.stat("dedup/requests_fetched_ahead") == 1
    links.going_out(ahead)
    links.going_out(first)
    with pytest.raises(IgnoreRequest, match="ahead of its turn"):
        links.going_out(second)
    assert plugin.stat("dedup/requests_fetched_ahead_already") == 1
    assert not links.fetch_ahead("http://a.test/1")  # gone out: no longer waiting


def test_a_cancelled_link_is_not_fetched_ahead() -> None:
    plugin = Plugin()
    plugin.respond(requests("/1"))
    plugin.decide(follow=True)
    plugin.decide(follow=False, corrects=True)  # its page is a duplicate after all
    assert not plugin.session.links.fetch_ahead("http://a.test/1")


def with_rules(checks: int) -> tuple[CrawlRules, Stats, list[PredictedDuplicate], list[str]]:
    """A crawl's rules after ``checks`` pages ``/p<i>?ref=also`` came out duplicates of
    ``/p<i>`` (the rule that drops the parameter is a candidate, or active from 11 on), and
    the pages fetched ahead of their turn (every page under ``/queued/`` waits in the
    scheduler)."""
    rules, _, _, stats, published = setup()
    rules.observe([decision(f"{D}/p{i}") for i in range(checks)])
    rules.observe([decision(f"{D}/p{i}?ref=also", f"{D}/p{i}") for i in range(checks)])
    ahead: list[str] = []

    def fetch_ahead(url: str) -> bool:
        if "/queued/" not in url or url in ahead:
            return False
        ahead.append(url)
        return True

    rules.fetch_ahead = fetch_ahead
    return rules, stats, published, ahead


def test_a_predicted_duplicate_has_its_queued_counterpart_fetched_first_then_is_skipped() -> None:
    """Without it the copy is fetched (new content at that moment) and its counterpart later:
    two fetches of one content (the heavy shop's ``?ref=`` copies, 348 of 480 fetched)."""
    rules, stats, published, ahead = with_rules(checks=12)
    assert rules.rules.book.state(REF.key) is State.ACTIVE
    released: list[str] = []
    rules.release = released.extend
    copies = [f"{D}/queued/p{i}?ref=also" for i in range(6)]
    assert [rules.admit_fetch(url) for url in copies] == [HOLD] * 6
    assert ahead == [url.split("?")[0] for url in copies]
    assert stats.values["dedup/rules/counterpart_fetched_first"] == 6
    assert rules.admit_fetch(f"{D}/elsewhere/p1?ref=also") is None  # not queued: fetched
    rules.observe([decision(url) for url in ahead[:2]])
    assert released and set(released) <= set(copies[:2])  # each waits for its counterpart
    rules.observe([decision(url) for url in ahead[2:]])
    rules.settle()  # pacing for the any-value candidate may hold some a while longer
    assert sorted(released) == sorted(copies)
    answers = [rules.admit_fetch(url) for url in copies]
    assert answers.count(RULE) >= 5 and set(answers) <= {RULE, None}  # one may be explored
    assert {p.url for p in published} == {u for u, a in zip(copies, answers, strict=True) if a}


def test_a_one_way_candidates_counterpart_is_fetched_first_so_the_copy_is_its_check() -> None:
    """Fetched after its copy, ``/p`` is no check of "ref changes nothing" (the check runs from
    the page that carries the parameter): the rule gets checks only from the copies that
    happen to go out after their page."""
    rules, stats, _, ahead = with_rules(checks=3)
    assert rules.rules.book.state(REF.key) is State.CANDIDATE
    released: list[str] = []
    rules.release = released.extend
    copy = f"{D}/queued/p1?ref=also"
    assert rules.admit_fetch(copy) == HOLD and ahead == [f"{D}/queued/p1"]
    assert stats.values["dedup/rules/counterpart_fetched_first"] == 1
    rules.observe([decision(ahead[0])])
    assert released == [copy]
    assert rules.admit_fetch(copy) is None  # fetched: a check of the candidate
    rules.observe([decision(copy, ahead[0])])
    assert rules.rules.book.checks(REF.key) == 4


def test_a_mirrors_counterpart_is_not_fetched_ahead() -> None:
    """A host alias holds both ways: fetched in its turn, the original would be skipped by the
    rewrite back, so fetching it first saves nothing (and it waits at a lower priority)."""
    rules, _, _, stats, _ = setup()
    rules.observe([decision(f"{D}/s{s}/p{i}") for s in range(4) for i in range(5)])
    rules.observe(
        [decision(f"{M}/s{s}/p{i}", f"{D}/s{s}/p{i}") for s in range(4) for i in range(3)]
    )
    assert rules.rules.book.state(PathRewrite(M, "", D, "").key) is State.ACTIVE
    rules.fetch_ahead = lambda url: pytest.fail(f"fetched ahead: {url}")
    assert rules.admit_fetch(f"{M}/queued/p1") is None
    assert stats.values["dedup/rules/counterpart_fetched_first"] == 0


def test_a_copy_whose_counterpart_fetched_ahead_never_decides_is_fetched_after_a_while() -> None:
    rules, _, published, ahead = with_rules(checks=12)
    clock = Clock()
    rules.pacer = Pacer(rules.rules.book.policy, clock=clock)
    released: list[str] = []
    rules.release = released.extend
    copy = f"{D}/queued/lost?ref=also"
    assert rules.admit_fetch(copy) == HOLD and ahead == [f"{D}/queued/lost"]
    rules.observe([])
    assert released == []
    clock.now += rules.pacer.expiry  # the fetch ahead failed: no decision comes
    rules.observe([])
    assert released == [copy]
    assert rules.admit_fetch(copy) is None and published == []  # fetched, nothing lost
