"""A duplicate's group left at a stop, judged again by the run that takes it
(:mod:`crawler.regroup`): pure, the judge of ``test_crawl_rules`` on an in-memory rule store."""

from __future__ import annotations

from scrapy import Request

from crawler.crawl_rules import CrawlRules
from crawler.frontier import Held
from crawler.judging import DecidedPage
from crawler.regroup import LIKELY_DUPLICATE_META, group_meta, has_group, regroup
from crawler.rules.shared import SharedRules
from crawler.rules.store import MemoryRuleStore
from crawler.subtree_judge import SubtreeJudge
from dedup_worker.contract.reading import PageKey
from tests.unit.crawler.rules.test_crawl_rules import (
    Clock,
    D,
    Links,
    Stats,
    decision,
    release_pages,
)

CHAPTERS = [f"{D}/r/2.0/c{i}" for i in range(20)]


def _left_at_a_stop(store: MemoryRuleStore) -> list[Request]:
    """Run 1: 2.0's index a duplicate of 1.0's; its group waits on its samples; stopped."""
    stats = Stats()
    rules = CrawlRules(SharedRules(store), stats, str, lambda p: None)
    judge = SubtreeJudge(rules, Links(), lambda urls: [False] * len(urls), stats, 60.0, Clock())
    page = release_pages(rules)
    judge.judge(page)
    [(source, depth, priority, held)] = judge.held_back()
    keeper = judge.keepers()[source]
    assert keeper == f"{D}/r/1.0/" and len(held) == 10
    meta = group_meta(source, depth, priority, keeper)
    return [Request(item.url, meta={LIKELY_DUPLICATE_META: meta}) for item in held]


def test_a_group_left_at_a_stop_comes_back_as_its_page_decided_a_duplicate() -> None:
    left = _left_at_a_stop(MemoryRuleStore())
    assert all(has_group(r) for r in left)
    [page] = regroup(left, frozenset())
    assert page.key == PageKey(f"{D}/r/2.0/", 1.0) and page.depth == 1
    assert page.duplicate and page.decision.duplicate_of == f"{D}/r/1.0/"
    assert [h.url for h in page.held] == [r.url for r in left] == list(page.outlinks)
    assert all(LIKELY_DUPLICATE_META not in h.request.meta for h in page.held)
    assert not has_group(Request(f"{D}/x", meta={LIKELY_DUPLICATE_META: True}))  # older flag


def test_the_taking_run_drops_the_group_on_its_own_evidence_without_a_new_sample() -> None:
    """Run 2 judged a sibling duplicate of the same rewrite and its samples came back
    duplicates of their counterparts: the group from run 1, judged again at its idle moment,
    needs no sample of its own and is suppressed whole (sent undecided, all ten were fetched)."""
    store = MemoryRuleStore()
    left = _left_at_a_stop(store)
    stats, links = Stats(), Links()
    rules = CrawlRules(SharedRules(store), stats, str, lambda p: None)
    judge = SubtreeJudge(rules, links, lambda urls: [True] * len(urls), stats, 60.0, Clock())
    sibling = DecidedPage(
        PageKey(f"{D}/r/2.0/c0", 1.0), 2, tuple(CHAPTERS),
        decision(f"{D}/r/2.0/c0", f"{D}/r/1.0/c0"),
        tuple(Held(url, url) for url in CHAPTERS if url != f"{D}/r/2.0/c0"),
    )  # fmt: skip
    samples = [h.url for h in judge.judge(sibling).follow]
    assert samples and judge.waiting == 1
    rules.observe([decision(url, url.replace("2.0", "1.0")) for url in samples])
    assert judge.waiting == 0  # run 2's own group suppressed: the rewrite's evidence holds
    [page] = regroup(left, frozenset())
    judgement = judge.judge(page)
    fresh = [h.url for h in judgement.follow if h.url not in samples]
    assert fresh == [] and judge.waiting == 0
    # Dropped: every member not fetched as run 2's sample (those are dropped too: no cost).
    assert {h.url for h in judgement.drop} >= {r.url for r in left} - set(samples)
    assert stats.values["dedup/groups_suppressed"] == 2


def test_a_group_whose_sample_waits_for_its_counterpart_is_not_judged_again() -> None:
    """A sample decided before its counterpart may turn out to differ, and the group would
    then be followed: judged again by another run on other samples it could be dropped, and
    its pages lost. Such a group is followed instead (no keeper: not handed over as a group)."""
    stats = Stats()
    rules = CrawlRules(SharedRules(MemoryRuleStore()), stats, str, lambda p: None)
    judge = SubtreeJudge(rules, Links(), lambda urls: [True] * len(urls), stats, 60.0, Clock())
    rules.observe([decision(f"{D}/r/1.0/")])  # its chapters only scheduled
    rules.observe([decision(f"{D}/r/2.0/", f"{D}/r/1.0/")])
    page = DecidedPage(
        PageKey(f"{D}/r/2.0/", 1.0), 1, tuple(CHAPTERS), decision(f"{D}/r/2.0/", f"{D}/r/1.0/"),
        tuple(Held(url, url) for url in CHAPTERS),
    )  # fmt: skip
    samples = [held.url for held in judge.judge(page).follow]
    assert list(judge.keepers()) == [page.key]
    rules.observe([decision(samples[0])])  # new, for now: its counterpart is still queued
    assert judge.waiting == 1 and judge.keepers() == {}
