"""Pages skipped by a rule that turned out wrong are fetched back (:mod:`crawler.rules.fetch_back`):
the log of skips, the gate's side, the link scheduler's side."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.exceptions import IgnoreRequest

from crawler.crawl_rules import RULE, CrawlRules
from crawler.frontier import Held
from crawler.judging import AdmitAll
from crawler.links import LINK_META
from crawler.rules.differing import DifferingPairs
from crawler.rules.fetch_back import SkipLog
from crawler.rules.policy import State
from crawler.rules.rewrite import PathRewrite
from crawler.rules.shared import SharedRules
from crawler.rules.store import MemoryRuleStore
from crawler.seen import CLAIMED_META, url_fingerprint
from crawler.sharing import WorkSharing
from dedup_worker.contract.predictions import PredictedDuplicate
from tests.unit.crawler.rules.test_crawl_rules import D, M, Stats, decision
from tests.unit.crawler.test_plugin_components import Plugin, requests
from tests.unit.crawler.test_sharing import Clock, JournalStore

ALIAS = PathRewrite(M, "", D, "")


def test_the_log_returns_a_rules_skips_once_and_those_on_a_pair_known_to_differ() -> None:
    log = SkipLog(limit=4)
    log.skipped(f"{M}/a", f"{D}/a", ["alias", "prefix"])
    log.skipped(f"{M}/b", f"{D}/b", ["alias"])
    log.skipped(f"{M}/c", f"{D}/c", ["prefix"])
    assert sorted(log.rules()) == ["alias", "prefix"]
    back = log.of_rules(["alias"])
    assert sorted(back) == [f"{M}/a", f"{M}/b"] and back[f"{M}/a"].rules == ("alias", "prefix")
    assert log.of_rules(["alias"]) == {} and log.rules() == ["prefix"]  # returned once
    assert list(log.on_pairs([DifferingPairs.key(f"{D}/c", f"{M}/c")])) == [f"{M}/c"]
    assert len(log) == 0 and log.rules() == []
    log.skipped(f"{M}/d", f"{D}/d", ())  # a duplicate page's group member dropped: no rule
    log.skipped(f"{M}/e", f"{D}/e", ["alias"])
    log.fetched(f"{M}/e")  # fetched after all: forgotten
    assert log.rules() == [] and list(log.on_pairs([DifferingPairs.key(f"{M}/d", f"{D}/d")]))
    log.skipped(f"{M}/f", f"{D}/f", (), group="rewrite")  # dropped with a group of a rewrite
    assert log.rules() == [] and log.groups() == ["rewrite"]
    assert list(log.of_groups(["rewrite"])) == [f"{M}/f"] and log.groups() == []
    for n in range(5):  # bounded: full, the oldest goes (a wipe forgot young rules' skips)
        log.skipped(f"{M}/{n}", f"{D}/{n}", ["alias"] if n else ["old"])
    assert len(log) == 4 and log.rules() == ["alias"]
    assert sorted(log.of_rules(["alias"])) == [f"{M}/{n}" for n in range(1, 5)]


def rules_with_alias() -> tuple[CrawlRules, Stats, list[PredictedDuplicate], list[str]]:
    """Rules that see the store's news at every poll, with the alias ``M -> D`` active (its 12
    checks clean), and the URLs they fetch back."""
    stats, published = Stats(), []
    rules = CrawlRules(SharedRules(MemoryRuleStore(), refresh_every=0.0), stats, str,
                       published.append)  # fmt: skip
    rules.observe([decision(f"{D}/s{s}/p{i}") for s in range(4) for i in range(6)])
    rules.observe(
        [decision(f"{M}/s{s}/p{i}", f"{D}/s{s}/p{i}") for s in range(4) for i in range(3)]
    )
    assert rules.rules.book.state(ALIAS.key) is State.ACTIVE
    back: list[str] = []
    rules.fetch_back = back.extend
    return rules, stats, published, back


def test_what_a_rule_skipped_is_fetched_back_when_it_is_dropped() -> None:
    """pytest 8.3.3's release rules on a held-out host went active on clean checks, skipped 91
    pages and were dropped at 36 of 40: five unique pages were lost among the skips."""
    rules, stats, published, back = rules_with_alias()
    skipped = [f"{M}/s{s}/p{i}" for s in range(2) for i in (3, 4)]
    assert [rules.admit_fetch(url) for url in skipped] == [RULE] * 4
    assert len(published) == 4
    rules.observe([])
    assert back == []  # the rule holds: nothing to fetch back
    # One is fetched after all (another process, a link the rule did not see): a copy.
    rules.observe([decision(skipped[0], skipped[0].replace(M, D))])
    # Two checks fail (pages of the mirror that are not its copies): the store drops the rule.
    rules.observe([decision(f"{M}/s3/p{i}") for i in (3, 4)])
    assert rules.rules.book.state(ALIAS.key) is State.DROPPED
    assert sorted(back) == sorted(skipped[1:])  # the one fetched already is not fetched again
    assert stats.values["dedup/rules/skips_fetched_back"] == 3
    assert [rules.admit_fetch(url) for url in skipped[1:]] == [None] * 3  # fetched, not skipped
    rules.observe([])
    assert len(back) == 3  # once
    saved = {key: s.saved for key, s in rules.rules.store.statuses().items()}
    assert saved[ALIAS.key] == 1  # three of its four skips were not saved fetches after all


def test_what_a_rule_skipped_is_fetched_back_when_the_store_loses_its_rules() -> None:
    """Redis lost the crawl's rules (flushed, a new server): the book starts over, and a rule it
    no longer knows was never dropped, so its skips were never due (lost if it was wrong)."""
    rules, _, _, back = rules_with_alias()
    page = f"{M}/s0/p4"
    assert rules.admit_fetch(page) == RULE
    rules.rules.store = MemoryRuleStore()  # its log is shorter than the cursor: a reset
    rules.observe([])
    assert rules.rules.book.state(ALIAS.key) is None
    assert back == [page] and rules.admit_fetch(page) is None


def test_a_skip_on_a_path_pair_another_hosts_rule_failed_on_is_fetched_back() -> None:
    rules, _, _, back = rules_with_alias()
    page = f"{M}/s0/p4"
    assert rules.admit_fetch(page) == RULE
    rules.rules.differing.note(page, f"{D}/s0/p4")  # as a failed check of a good rule does
    rules.observe([])
    assert back == [page] and rules.rules.book.state(ALIAS.key) is State.ACTIVE
    assert rules.admit_fetch(page) is None


def test_fetched_back_requests_go_out_past_the_filter_and_take_a_place_in_the_budget() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=2)
    links = plugin.session.links

    class SkipAll(AdmitAll):
        def admit_fetch(self, url: str) -> str | None:
            return RULE

    links.gate = SkipAll()
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)
    for request in list(plugin.engine.crawled):
        with pytest.raises(IgnoreRequest, match="skipped"):
            links.going_out(request)
    assert len(links.skipped) == 2 and links.budget.spent == 0  # both places given back
    store = JournalStore(Clock())
    links.sharing = WorkSharing(store, "this", fingerprint=lambda r: r.url.encode())
    links.fetch_back(["http://a.test/1", "http://a.test/2", "http://a.test/9"])
    again = plugin.engine.crawled[2:]
    assert [r.url for r in again] == ["http://a.test/1", "http://a.test/2"]
    assert all(r.meta[CLAIMED_META] and r.meta[LINK_META] for r in again)
    assert plugin.stat("dedup/requests_fetched_back") == 2 and links.budget.spent == 2
    # Settled as skips, they are journaled again: a kill before their decisions loses nothing.
    assert sorted(store.journals["this"]) == [b"http://a.test/1", b"http://a.test/2"]


def test_a_skip_fetched_back_before_its_settling_was_reported_stays_in_the_journal() -> None:
    """A skip leaves the journal with the next claim; fetched back before that claim (no
    link claimed in between), it was journaled again first and the claim then took it out:
    a kill before its decision lost it."""
    plugin = Plugin()
    links = plugin.session.links

    class SkipAll(AdmitAll):
        def admit_fetch(self, url: str) -> str | None:
            return RULE

    links.gate = SkipAll()
    plugin.respond(requests("/1"))
    plugin.decide(follow=True)
    for request in list(plugin.engine.crawled):
        with pytest.raises(IgnoreRequest, match="skipped"):
            links.going_out(request)
    links.sharing = WorkSharing(JournalStore(Clock()), "this", fingerprint=lambda r: r.url.encode())
    links.fetch_back(["http://a.test/1"])
    seen = plugin.session.seen()
    reported: list[bytes] = []
    claim_many = seen.store.claim_many

    def recording(fps: Any, done: Any, requests: Any = None, settled: Any = ()) -> list[bool]:
        reported.extend(settled)
        return claim_many(fps, done, requests, settled)

    seen.store.claim_many = recording  # type: ignore[method-assign]
    seen.claim_many(["http://a.test/other"])
    assert seen.fingerprint("http://a.test/1") not in reported


def test_a_skip_being_fetched_right_now_is_not_fetched_back_again() -> None:
    rules, _, _, back = rules_with_alias()
    pages = [f"{M}/s0/p4", f"{M}/s1/p4"]
    assert [rules.admit_fetch(url) for url in pages] == [RULE, RULE]
    rules.pacer.sent(pages[0])  # fetched meanwhile through another link: no decision yet
    for page in pages:
        rules.rules.differing.note(page, page.replace(M, D))
    rules.observe([])
    assert back == [pages[1]]


def test_a_crawl_about_to_end_fetches_back_what_it_learns_was_wrong_and_goes_on() -> None:
    rules, _, _, back = rules_with_alias()
    page = f"{M}/s0/p4"
    assert rules.admit_fetch(page) == RULE
    assert not rules.settle()  # nothing shown wrong: the crawl may end
    rules.rules.differing.note(page, f"{D}/s0/p4")
    assert rules.settle() and back == [page]  # something went out: the crawl goes on
    assert not rules.settle()


def test_what_a_group_dropped_is_fetched_back_when_its_rewrite_fails_a_check() -> None:
    """The group's 10 samples matched, the rule of its rewrite failed later: 6 unique pages of
    the group had been dropped for good (Black 24.8.0 on a held-out host)."""
    rules, stats, _, back = rules_with_alias()
    release = PathRewrite(D, "/v1", D, "/v2")
    for i in range(3):
        rules.skips.skipped(f"{D}/v1/p{i}", f"{D}/v2/p{i}", (), group=release.key)
    rules.skips.skipped(f"{M}/s0/p4", f"{D}/s0/p4", (), group=ALIAS.key)
    rules.observe([decision(f"{D}/v2/p{i}") for i in range(3)])
    rules.observe([decision(f"{D}/v1/x", f"{D}/v2/x")])  # the release rule: one clean check
    assert back == [] and release.key not in rules.rules.refuted
    rules.observe([decision(f"{D}/v2/y"), decision(f"{D}/v1/y")])  # then one that fails
    assert release.key in rules.rules.refuted
    assert sorted(back) == [f"{D}/v1/p{i}" for i in range(3)]
    assert stats.values["dedup/rules/skips_fetched_back"] == 3
    # The alias never failed, and it vouches for its member anyway: it stays dropped.
    assert ALIAS.key not in rules.rules.refuted and f"{M}/s0/p4" not in back


def test_a_dropped_request_fetched_back_is_claimed_first_and_never_fetched_twice() -> None:
    """A group member dropped was never claimed: another link may have claimed and fetched it
    since. Sent back past the filter, 123 of 191 such pages were fetched a second time."""
    plugin = Plugin()
    links = plugin.session.links
    one, two = requests("/1", "/2")
    links.drop_held([Held(one.url, one), Held(two.url, two)], depth=1)
    links._seen().claim([url_fingerprint(two.url)])  # another link took /2 meanwhile
    links.fetch_back([one.url, two.url])
    assert [r.url for r in plugin.engine.crawled] == [one.url]
    assert not plugin.engine.crawled[0].dont_filter  # claimed now: the filter lets it by once
    assert plugin.stat("dedup/requests_fetched_back") == 1
    assert links._seen().known_claimed(one.url)  # a later link to /1 is dropped as seen


def test_a_skip_another_rule_vouches_for_is_fetched_back_when_that_rule_fails_too() -> None:
    """A group member whose group's rewrite failed stays dropped while another rule vouches
    for it; it was then forgotten by the log, so when that rule was dropped as well nothing
    fetched it back: a unique page lost. It is logged again under the rule that vouches."""
    rules, _, _, back = rules_with_alias()
    release = PathRewrite(D, "/v1", D, "/v2")
    rules.skips.skipped(f"{M}/s0/p4", f"{D}/s0/p4", (), group=release.key)
    rules.observe([decision(f"{D}/v2/p{i}") for i in range(3)])
    rules.observe([decision(f"{D}/v1/x", f"{D}/v2/x")])
    rules.observe([decision(f"{D}/v2/y"), decision(f"{D}/v1/y")])  # the group's rewrite fails
    assert release.key in rules.rules.refuted and back == []  # the alias vouches: kept
    rules.observe([decision(f"{M}/s3/p{i}") for i in (3, 4)])  # then the alias is dropped
    assert rules.rules.book.state(ALIAS.key) is State.DROPPED
    assert f"{M}/s0/p4" in back
