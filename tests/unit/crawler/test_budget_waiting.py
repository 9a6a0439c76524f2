"""Under a page budget, likely duplicates wait for the crawl's idle moment (:mod:`crawler.budget`):
the link scheduler's side (a gate that names them) and the rules' side (which pages they are)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from crawler.crawl_rules import RULE, CrawlRules
from crawler.frontier import ResumeState
from crawler.judging import AdmitAll
from crawler.rules.policy import State
from crawler.rules.rewrite import PathRewrite
from crawler.rules.shared import SharedRules
from crawler.rules.store import MemoryRuleStore
from crawler.scheduling import DecisionScheduler
from crawler.seen import CLAIMED_META
from dedup_worker.contract.reading import PageKey
from tests.unit.crawler.rules.test_crawl_rules import D, M, Stats, decision
from tests.unit.crawler.test_plugin_components import Plugin, requests


class CopiesOfQueued(AdmitAll):
    """``/copy/x`` is a likely duplicate of ``/x`` while ``/x`` is queued; after ``active``, a
    rule skips it."""

    def __init__(self) -> None:
        self.active = False

    def likely_duplicate(self, url: str, queued: Callable[[str], bool] | None = None) -> bool:
        return "/copy/" in url and queued is not None and queued(url.replace("/copy/", "/"))

    def admit(self, url: str, source: PageKey) -> str | None:
        return RULE if self.active and "/copy/" in url else None


def _crawled(plugin: Plugin) -> list[str]:
    return [r.url for r in plugin.engine.crawled]


def test_under_a_budget_likely_duplicates_wait_and_the_places_buy_the_other_pages_first() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=3)
    links = plugin.session.links
    links.gate = CopiesOfQueued()
    plugin.respond(requests("/1", "/copy/1", "/2", "/copy/2", "/3"))
    plugin.decide(follow=True)
    # In the order released, the copies would have taken two of the three places.
    assert _crawled(plugin) == ["http://a.test/1", "http://a.test/2", "http://a.test/3"]
    assert plugin.stat("dedup/outlinks_waiting_for_budget") == 2 and links.budget.spent == 3
    assert not links.settle()  # idle: what waited goes out, but no place is left
    assert plugin.stat("dedup/outlinks_over_budget") == 2 and links.budget.waiting == []


def test_what_waited_goes_out_at_the_idle_moment_or_is_skipped_by_a_rule_active_by_then() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=10)
    links = plugin.session.links
    gate = links.gate = CopiesOfQueued()
    plugin.respond(requests("/1", "/copy/1", "/2", "/copy/2"))
    plugin.decide(follow=True)
    assert _crawled(plugin) == ["http://a.test/1", "http://a.test/2"]
    assert len(links.budget.waiting) == 2
    links.budget.waiting[1:], rest = [], links.budget.waiting[1:]  # one at a time
    assert links.settle() and _crawled(plugin)[-1] == "http://a.test/copy/1"
    links.budget.waiting = rest
    gate.active = True  # the copies' rule became active meanwhile
    assert not links.settle()
    assert plugin.stat("dedup/requests_skipped/rule") == 1 and len(links.skipped) == 1
    assert links.budget.spent == 3 and len(plugin.engine.crawled) == 3


def test_without_a_budget_nothing_waits() -> None:
    plugin = Plugin()
    plugin.session.links.gate = CopiesOfQueued()
    plugin.respond(requests("/1", "/copy/1"))
    plugin.decide(follow=True)
    assert _crawled(plugin) == ["http://a.test/1", "http://a.test/copy/1"]
    assert plugin.stat("dedup/outlinks_waiting_for_budget") is None


def test_a_crawl_closing_before_its_idle_moment_releases_what_waits() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=10)
    links = plugin.session.links
    links.gate = CopiesOfQueued()
    plugin.respond(requests("/1", "/copy/1"))
    plugin.decide(follow=True)
    links.close_budget_waiting()
    assert links.budget.waiting == [] and links._seen().known_claimed("http://a.test/1")
    assert not links._seen().known_claimed("http://a.test/copy/1")  # un-claimed: not fetched


def test_likely_duplicates_stopped_with_jobdir_wait_again_in_the_resumed_crawl(
    tmp_path: Path,
) -> None:
    """They went to the resume file's deferred requests, which a resumed crawl sends first:
    the likely duplicates took the places the waiting was meant to keep for other pages."""
    first = Plugin(JOBDIR=str(tmp_path), NEARDUP_MAX_PAGES=10)
    first.session.links.gate = CopiesOfQueued()
    first.session.links.budget.keep_deferred = True  # as spider_opened sets it with JOBDIR
    first.respond(requests("/1", "/copy/1"))
    first.decide(follow=True)
    DecisionScheduler(first.crawler, first.session)._close_down(first.crawler.spider, "shutdown")
    state = ResumeState.load(tmp_path / "neardup-resume.pickle")
    assert state is not None and state.deferred == [] and len(state.waiting) == 1

    resumed = Plugin(JOBDIR=str(tmp_path), NEARDUP_MAX_PAGES=10)
    links = resumed.session.links
    scheduler = DecisionScheduler(resumed.crawler, resumed.session)
    scheduler._resume_deferred(resumed.crawler.spider, state.deferred)
    scheduler._resume_waiting(resumed.crawler.spider, state.waiting)
    assert _crawled(resumed) == [] and len(links.budget.waiting) == 1
    assert links.settle()  # the idle moment: it goes, past the filter (claimed by the crawl)
    [copy] = resumed.engine.crawled
    assert copy.url == "http://a.test/copy/1" and copy.meta[CLAIMED_META]
    assert links.budget.spent == 1


def test_likely_duplicates_are_a_clean_candidates_pages_onto_pages_fetched_or_queued() -> None:
    rules = CrawlRules(SharedRules(MemoryRuleStore()), Stats(), str, lambda p: None)
    mirror = PathRewrite(M, "", D, "")
    rules.observe([decision(f"{D}/p{i}") for i in range(6)])
    rules.observe([decision(f"{M}/p0", f"{D}/p0")])  # one clean check: a candidate
    assert rules.rules.book.state(mirror.key) is State.CANDIDATE
    assert rules.likely_duplicate(f"{M}/p1")  # its counterpart was fetched
    assert not rules.likely_duplicate(f"{M}/q")  # ... was not
    assert rules.likely_duplicate(f"{M}/q", lambda url: url == f"{D}/q")  # ... is queued
    rules.rules.differing.note(f"{M}/p2", f"{D}/p2")  # a pair known to differ
    assert not rules.likely_duplicate(f"{M}/p2")
    rules.observe([decision(f"{M}/p3")])  # a failed check: no longer clean
    assert not rules.likely_duplicate(f"{M}/p1")
