"""The ``max_pages`` budget counts fetches: a request it paid for that never goes out (skipped by
a rule just before its fetch, cancelled, refused by Scrapy's scheduler) gives its place back."""

from __future__ import annotations

import pytest
from scrapy.exceptions import IgnoreRequest

from crawler.budget import PageBudget, origin_of
from crawler.judging import AdmitAll
from crawler.links import LINK_META
from tests.unit.crawler.test_plugin_components import Plugin, requests


class SkipAtFetch(AdmitAll):
    """A gate whose rules skip ``skipped`` just before it would be fetched."""

    def __init__(self, skipped: str) -> None:
        self.skipped = skipped

    def admit_fetch(self, url: str) -> str | None:
        return "rule" if url == self.skipped else None


def crawled(plugin: Plugin) -> list[str]:
    return [request.url.removeprefix("http://a.test") for request in plugin.engine.crawled]


def test_a_request_skipped_before_its_fetch_gives_its_place_to_the_next_link() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=2)
    links = plugin.session.links
    links.gate = SkipAtFetch("http://a.test/1")
    plugin.respond(requests("/1", "/2", "/3"))
    plugin.decide(follow=True)
    assert crawled(plugin) == ["/1", "/2"]  # /3 over the budget
    assert plugin.stat("dedup/outlinks_over_budget") == 1
    first, second = plugin.engine.crawled
    with pytest.raises(IgnoreRequest, match="skipped"):
        links.going_out(first)
    links.going_out(second)
    assert plugin.stat("dedup/budget_returned") == 1
    plugin.respond(requests("/4", "/5"), url="http://a.test/2")
    plugin.decide(follow=True)
    assert crawled(plugin) == ["/1", "/2", "/4"]  # /1's place, not /5's: two fetches in all
    assert plugin.stat("dedup/outlinks_over_budget") == 2


def test_a_cancelled_or_refused_request_gives_its_place_back_too() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=2)
    links = plugin.session.links
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)
    links.dropped(plugin.engine.crawled[0])  # the scheduler refused it
    assert links.budget.spent == 1 and plugin.stat("dedup/budget_returned") == 1
    unreleased = requests("/9")[0]  # not a released link: the budget never paid for it
    links.dropped(unreleased)
    assert links.budget.spent == 1


def test_with_jobdir_a_returned_place_goes_to_the_first_request_deferred() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=1)
    links = plugin.session.links
    links.budget.keep_deferred = True  # JOBDIR: requests over the budget wait for a resume
    links.gate = SkipAtFetch("http://a.test/1")
    plugin.respond(requests("/1", "/2", "/3"))
    plugin.decide(follow=True)
    assert crawled(plugin) == ["/1"] and [r.url for r in links.budget.deferred] == [
        "http://a.test/2",
        "http://a.test/3",
    ]
    with pytest.raises(IgnoreRequest):
        links.going_out(plugin.engine.crawled[0])
    assert crawled(plugin) == ["/1", "/2"]
    again = plugin.engine.crawled[-1]
    assert again.dont_filter and again.meta[LINK_META]  # claimed already: past the filter
    assert [r.url for r in links.budget.deferred] == ["http://a.test/3"]


A, B, C = "http://a.test", "http://b.test", "http://c.test"
WWW = "http://www.a.test"  # in the plugin's allowed domains, another origin


def shared(limit: int, *seeds: str) -> PageBudget:
    budget = PageBudget(lambda: limit)
    budget.spent = len(seeds)  # the seeds hold their places
    budget.share_out(seeds)
    return budget


def test_a_host_past_its_share_waits_while_another_seed_host_has_places_unused() -> None:
    budget = shared(12, A, B)  # shares of 6, one place each taken by its seed
    for _ in range(5):
        assert not budget.over_share(A) and budget.take(A)
    assert budget.over_share(A)  # A has its 6; the 5 places left are B's
    assert not budget.over_share(B) and budget.take(B)
    assert budget.over_share(A) and budget.over_share(C)  # a host that is not a seed too
    for _ in range(4):
        assert not budget.over_share(B) and budget.take(B)
    assert budget.spent == 12 and budget.by_host == {A: 6, B: 6}
    assert not budget.over_share(A) and not budget.take(A)  # over the budget, not the share


def test_a_place_given_back_counts_against_its_host_no_more() -> None:
    budget = shared(4, A, B)
    assert budget.take(A) and budget.over_share(A)
    budget.give_back(origin=A)
    assert not budget.over_share(A) and budget.by_host[A] == 1


@pytest.mark.parametrize(
    "budget",
    [shared(4, A), shared(4, A, A), PageBudget(lambda: None)],
    ids=["one seed host", "one host, two seeds", "no budget"],
)
def test_one_seed_host_or_no_budget_shares_nothing(budget: PageBudget) -> None:
    budget.share_out(budget.hosts or [A, B])
    for _ in range(2):
        assert not budget.over_share(A) and budget.take(A)


def test_the_origin_of_a_url_is_canonical() -> None:
    assert origin_of("HTTP://A.test:80/x?b=1") == "http://a.test"
    assert origin_of("https://a.test:8443/") == "https://a.test:8443"


def test_links_past_a_hosts_share_wait_until_the_crawl_is_idle() -> None:
    """The click fixture at 50 pages: one host's release copies, scheduled before the other
    host's contents page was decided, took the whole budget in some crawls."""
    plugin = Plugin(NEARDUP_MAX_PAGES=6)
    links = plugin.session.links
    links.budget.spent = 2
    links.budget.share_out([A, WWW])  # shares of 3, a place each taken by the seeds
    plugin.respond(requests("/1", "/2", "/3", "/4", "/5"))
    plugin.decide(follow=True)
    assert crawled(plugin) == ["/1", "/2"]  # A's share; /3, /4 and /5 wait for B
    assert plugin.stat("dedup/outlinks_held_for_share") == 3
    assert plugin.stat("dedup/outlinks_over_budget") is None
    plugin.respond(requests(f"{WWW}/1"), url=f"{WWW}/")
    plugin.decide(follow=True)
    assert crawled(plugin)[-1] == f"{WWW}/1"
    assert links.settle()  # idle: what waited takes the places left, first come first served
    assert crawled(plugin) == ["/1", "/2", f"{WWW}/1", "/3"]
    again = plugin.engine.crawled[-1]
    assert again.dont_filter and again.meta[LINK_META]  # claimed already: past the filter
    assert plugin.stat("dedup/outlinks_over_budget") == 2 and not links.settle()


def test_links_waiting_for_a_share_are_kept_for_a_jobdir_resume() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=4)
    links = plugin.session.links
    links.budget.keep_deferred = True
    links.budget.spent = 2
    links.budget.share_out([A, B])
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)
    assert crawled(plugin) == ["/1"]
    links.release_held_for_share(send=False)  # the crawl closes
    assert [r.url for r in links.budget.deferred] == [f"{A}/2"] and not links.budget.held
