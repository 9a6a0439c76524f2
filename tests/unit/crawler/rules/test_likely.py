"""Likely duplicates before any rule: the same page in a sibling release (crawler.rules.likely)."""

from __future__ import annotations

from crawler.crawl_rules import CrawlRules
from crawler.rules.likely import ReleaseSiblings
from crawler.rules.policy import State
from crawler.rules.rewrite import PathRewrite
from crawler.rules.shared import SharedRules
from crawler.rules.store import MemoryRuleStore
from tests.unit.crawler.rules.test_crawl_rules import Stats, decision

A, B = "http://a.example", "http://b.example"


def _rules() -> CrawlRules:
    return CrawlRules(SharedRules(MemoryRuleStore()), Stats(), str, lambda p: None)


def test_a_page_is_mapped_onto_the_same_page_of_each_release_seen_beside_its_own() -> None:
    siblings = ReleaseSiblings()
    for url in (f"{A}/docs/latest/x.html", f"{A}/docs/7.6.9/", f"{A}/v2/a", f"{B}/docs/7.6.7/y"):
        siblings.note(url)
    siblings.note(f"{A}/docs/7.6.8/api.html")
    assert [r.key for r in siblings.rewrites(f"{A}/docs/7.6.8/api.html")] == [
        PathRewrite(A, "/docs/7.6.8", A, f"/docs/{other}").key for other in ("7.6.9", "latest")
    ]
    assert siblings.rewrites(f"{A}/site/7.6.8/api.html") == []  # another parent
    assert siblings.rewrites(f"{A}/docs/guide/api.html") == []  # not a release
    assert siblings.rewrites(f"{A}/docs/1.0") == []  # a file named like one is no directory
    assert [r.apply(f"{A}/v1/a/b?q=1") for r in siblings.rewrites(f"{A}/v1/a/b?q=1")] == [
        f"{A}/v2/a/b?q=1"
    ]


def test_past_its_limit_the_memory_of_releases_starts_over() -> None:
    siblings = ReleaseSiblings(limit=2)
    for parent in ("/a", "/b", "/c"):
        siblings.note(f"{A}{parent}/1.0/x")
        siblings.note(f"{A}{parent}/2.0/x")
    assert siblings.rewrites(f"{A}/a/1.0/x") == [] and len(siblings.rewrites(f"{A}/c/1.0/x")) == 1


def test_a_page_of_a_release_whose_sibling_is_fetched_or_queued_is_a_likely_duplicate() -> None:
    """Before any pair of two releases is fetched no rule maps one onto the other; a budgeted
    crawl still sends the second copy last (the click fixture at 50 fetches: 6 unique pages
    missed in every crawl, against 16 or 69)."""
    rules = _rules()
    rules.observe([decision(f"{A}/latest/api.html")])
    queued = {f"{A}/latest/queued.html"}.__contains__
    assert not rules.likely_duplicate(f"{A}/latest/other.html")  # the first release seen
    assert rules.likely_duplicate(f"{A}/8.1.6/api.html")  # its sibling was fetched
    assert rules.likely_duplicate(f"{A}/8.1.6/queued.html", queued)  # ... is queued here
    assert not rules.likely_duplicate(f"{A}/8.1.6/new.html", queued)  # ... is neither
    assert not rules.likely_duplicate(f"{B}/8.1.6/api.html")  # another origin: no sibling


def test_pairs_known_to_differ_and_rules_that_failed_make_no_likely_duplicate() -> None:
    rules = _rules()
    rules.observe([decision(f"{A}/latest/{p}") for p in ("index.html", "changes.html", "x")])
    assert not rules.likely_duplicate(f"{A}/8.1.6/index.html")  # two releases' front pages
    assert not rules.likely_duplicate(f"{A}/8.1.6/changes.html")  # release notes
    assert rules.likely_duplicate(f"{A}/8.1.6/x")
    rules.observe([decision(f"{A}/8.1.6/y"), decision(f"{A}/latest/y", f"{A}/8.1.6/y")])
    rewrite = PathRewrite(A, "/8.1.6", A, "/latest")
    assert rules.rules.book.state(rewrite.key) is State.CANDIDATE  # the pair taught it
    rules.observe([decision(f"{A}/latest/z"), decision(f"{A}/8.1.6/z")])  # ... and refuted it
    assert rewrite.key in rules.rules.refuted
    assert not rules.likely_duplicate(f"{A}/8.1.6/x")
