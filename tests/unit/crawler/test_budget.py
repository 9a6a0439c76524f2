"""The ``max_pages`` budget counts fetches: a request it paid for that never goes out (skipped by
a rule just before its fetch, cancelled, refused by Scrapy's scheduler) gives its place back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Request

from crawler.frontier import Held, PageKey, ResumeState
from crawler.judging import AdmitAll
from crawler.links import LINK_META
from crawler.scheduling import DecisionScheduler
from crawler.seen import CLAIMED_META
from crawler.sharing import BUSY, WorkSharing, decode_request
from crawler.sharing_store import MemoryPeerStore
from dedup_worker.contract.messages import Decision, Verdict
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
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)
    first, second = plugin.engine.crawled
    with pytest.raises(IgnoreRequest, match="skipped"):
        links.going_out(first)
    links.going_out(second)
    assert plugin.stat("dedup/budget_returned") == 1
    plugin.respond(requests("/4", "/5"), url="http://a.test/2")
    plugin.decide(follow=True)
    assert crawled(plugin) == ["/1", "/2", "/4"]  # /1's place, not /5's: two fetches in all
    assert plugin.stat("dedup/outlinks_over_budget") == 1


def test_a_place_still_free_at_the_idle_moment_goes_to_the_first_request_over_the_budget() -> None:
    """Without JOBDIR too: a place given back after the last link came (a rule skipped its
    page just before the fetch) used to stay empty; on the generated demo site at 250 fetches,
    17 places in one crawl of two."""
    plugin = Plugin(NEARDUP_MAX_PAGES=2)
    links = plugin.session.links
    links.gate = SkipAtFetch("http://a.test/1")
    plugin.respond(requests("/1", "/2", "/3"))
    plugin.decide(follow=True)
    assert crawled(plugin) == ["/1", "/2"]  # /3 over the budget, standing by
    assert plugin.stat("dedup/outlinks_over_budget") == 1
    assert links._seen().known_claimed("http://a.test/3")
    with pytest.raises(IgnoreRequest, match="skipped"):
        links.going_out(plugin.engine.crawled[0])
    assert crawled(plugin) == ["/1", "/2"]  # a link yet to come may take it
    assert links.settle() and crawled(plugin) == ["/1", "/2", "/3"]  # none did: idle
    assert links.budget.spent == 2 and not links.settle()
    again = plugin.engine.crawled[-1]
    assert again.meta[CLAIMED_META] and again.meta[LINK_META]  # claimed already: past the filter


def test_requests_standing_by_at_the_close_are_un_claimed() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=1)
    links = plugin.session.links
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)
    assert [r.url for r in links.budget.standby] == ["http://a.test/2"]
    links.close_budget_waiting()
    assert links.budget.standby == [] and not links._seen().known_claimed("http://a.test/2")


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
    assert again.meta[CLAIMED_META] and again.meta[LINK_META]  # claimed already: past the filter
    assert [r.url for r in links.budget.deferred] == ["http://a.test/3"]


def test_a_seed_another_process_claimed_gives_back_the_place_it_took_at_open() -> None:
    """The budget counts the spider's seeds as it opens. With ``--crawlers N`` every spider has
    the seeds, one claims each, and the others' are refused by the shared seen filter: those
    places come back (the second held-out set's 14 seeds were counted by both spiders)."""
    plugin = Plugin(NEARDUP_MAX_PAGES=3)
    links = plugin.session.links
    spider = plugin.crawler.spider
    spider.seeds = ["http://a.test/", "http://b.test/"]
    links.budget.spent = len(spider.seeds)  # as the scheduler counts them at open
    links.dropped(Request("http://b.test/", meta={"depth": 0}))  # claimed elsewhere
    assert links.budget.spent == 1 and plugin.stat("dedup/budget_returned") == 1
    links.dropped(Request("http://a.test/other", meta={"depth": 0}))  # a start URL, not a seed
    links.dropped(Request("http://a.test/", meta={"depth": 1}))  # a link to the seed's page
    assert links.budget.spent == 1


def test_a_request_refused_before_the_downloader_gives_its_place_back() -> None:
    """robots.txt (or an offsite or project middleware) refuses a link or a seed before it is
    sent: the errback's ``refused`` gives its place back. Every link into a disallowed part
    of a site used to cost a place."""
    plugin = Plugin(NEARDUP_MAX_PAGES=3)
    links = plugin.session.links
    links.gate = SkipAtFetch("http://a.test/2")
    spider = plugin.crawler.spider
    spider.seeds = ["http://b.test/"]
    links.budget.spent = 1  # the seed's place, taken at open
    plugin.respond(requests("/1", "/2", "/3"))
    plugin.decide(follow=True)
    assert crawled(plugin) == ["/1", "/2"]  # /3 over the budget, standing by
    robots, skipped = plugin.engine.crawled
    links.refused(robots)  # robots.txt: it never reached the downloader
    links.refused(Request("http://b.test/", meta={"depth": 0}))  # the seed, disallowed too
    assert links.budget.spent == 1 and plugin.stat("dedup/budget_returned") == 2
    assert plugin.stat("dedup/requests_refused_before_download") == 2
    links.reached_downloader(skipped)
    with pytest.raises(IgnoreRequest, match="skipped"):
        links.going_out(skipped)  # gives its place back itself ...
    links.refused(skipped)  # ... and its errback gives nothing more
    assert links.budget.spent == 0 and plugin.stat("dedup/budget_returned") == 3
    links.refused(Request("http://a.test/own"))  # a spider's own request held no place
    assert plugin.stat("dedup/requests_refused_before_download") == 2
    assert links.settle() and crawled(plugin) == ["/1", "/2", "/3"]


def test_a_copy_sent_ahead_and_refused_gives_back_no_place_its_original_holds() -> None:
    plugin = Plugin(NEARDUP_MAX_PAGES=2)
    links = plugin.session.links
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)
    assert links.fetch_ahead("http://a.test/2")
    ahead = plugin.engine.crawled[-1]
    links.refused(ahead)  # robots.txt refuses the copy; the original is still queued
    assert links.budget.spent == 2 and not plugin.stat("dedup/budget_returned")
    links.refused(plugin.engine.crawled[1])  # then the original, in turn: one place back
    assert links.budget.spent == 1 and plugin.stat("dedup/budget_returned") == 1
    assert not links.fetch_ahead("http://a.test/2")  # no longer waiting in the queue


def test_a_redirect_or_retry_that_is_refused_gives_no_place_back() -> None:
    """Scrapy's redirect copies the request's meta (LINK_META too): a redirect to a URL claimed
    already is refused by the filter, but its request went out. A refund there let a crawl at
    ``max_pages`` 2 send a third link."""
    plugin = Plugin(NEARDUP_MAX_PAGES=2)
    links = plugin.session.links
    plugin.respond(requests("/1", "/2", "/3"))
    plugin.decide(follow=True)
    first = plugin.engine.crawled[0]
    links.going_out(first)
    redirected = first.replace(
        url="http://a.test/2", meta={**first.meta, "redirect_urls": [first.url]}
    )
    links.dropped(redirected)  # /2 is claimed: the filter refused the redirect
    retried = first.replace(meta={**first.meta, "retry_times": 1})
    links.dropped(retried)
    assert links.budget.spent == 2 and not plugin.stat("dedup/budget_returned")
    assert not links.settle() and crawled(plugin) == ["/1", "/2"]  # /3 still stands by


def test_a_claimed_link_fetched_back_over_the_budget_stands_by_instead_of_being_lost() -> None:
    """A link a rule skipped just before its fetch stays claimed; when the rule turns out
    wrong it is fetched back. Over the budget it used to be neither sent nor kept nor
    un-claimed: claimed for good, no crawl of this id would ever fetch it."""
    plugin = Plugin(NEARDUP_MAX_PAGES=2)
    links = plugin.session.links
    links.gate = SkipAtFetch("http://a.test/1")
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)
    with pytest.raises(IgnoreRequest, match="skipped"):
        links.going_out(plugin.engine.crawled[0])
    assert links.budget.take()  # another link took the place /1 gave back
    links.fetch_back(["http://a.test/1"])
    assert [r.url for r in links.budget.standby] == ["http://a.test/1"]
    links.close_budget_waiting()
    assert not links._seen().known_claimed("http://a.test/1")  # left to whoever wants it


def test_a_resumed_crawl_counts_what_it_sent_once(tmp_path: Path) -> None:
    """JOBDIR: the budget saved is the requests sent, seeds included; the resumed run counts
    the seeds again as it opens and each one refused (claimed by the first run) gives its
    place back, so both runs together send ``max_pages`` at most."""
    first = Plugin(JOBDIR=str(tmp_path), NEARDUP_MAX_PAGES=10)
    spider = first.crawler.spider
    spider.seeds = ["http://a.test/"]
    first.session.links.budget.spent = 6  # the seed and five links went out
    DecisionScheduler(first.crawler, first.session)._save_resume(spider)
    state = ResumeState.load(tmp_path / "neardup-resume.pickle")
    assert state is not None and state.scheduled == 6
    resumed = Plugin(JOBDIR=str(tmp_path), NEARDUP_MAX_PAGES=10)
    resumed.crawler.spider.seeds = spider.seeds
    links = resumed.session.links
    links.budget.spent = state.scheduled + 1  # as spider_opened counts the seeds
    links.dropped(Request("http://a.test/", meta={"depth": 0}))  # claimed by the first run
    assert links.budget.spent == 6 and links.budget.room() == 4


def test_a_link_over_the_budget_goes_to_a_live_peer_instead_of_being_un_claimed() -> None:
    """Un-claimed at the close (standing by) or when nothing keeps it, a link was lost if a
    peer of the crawl had found it claimed meanwhile: the peer caches that and never asks
    again. While a peer lives the link goes to the crawl's shared list instead."""
    plugin = Plugin(NEARDUP_MAX_PAGES=1)
    links = plugin.session.links
    store = MemoryPeerStore()
    links.sharing = WorkSharing(store, "this")
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)  # /2 over the budget stands by (no peer yet)
    WorkSharing(store, "peer").beat(BUSY)
    links.sharing.beat(BUSY)
    links.close_budget_waiting()
    links.sharing.flush()
    assert [decode_request(raw, plugin.crawler.spider).url for raw in store.shared] == [
        "http://a.test/2"
    ]
    assert links._seen().known_claimed("http://a.test/2")  # still the crawl's, for the peer


def test_a_spider_stopped_before_the_end_leaves_the_requests_of_undecided_pages() -> None:
    """A page published whose decision had not come: the page is claimed (fetched), and a
    later run does not read its decision, so its outlinks, and any page only they reach, were
    lost. They go to the crawl's shared list undecided, claimed (one claimed already is
    someone else's); an offsite one stays out."""
    plugin = Plugin(ALLOWED_DOMAINS=["a.test"])
    plugin.crawler.spider.allowed_domains = ["a.test"]
    links = plugin.session.links
    store = MemoryPeerStore()
    links.sharing = WorkSharing(store, "this")
    links._seen().claim_many(["http://a.test/2"])  # another process has it
    plugin.respond(requests("/1", "/2", "http://elsewhere.test/"))  # no decision yet
    assert links.ledger.outstanding == 1

    class SampleUnanswered:  # a duplicate's outlinks held back while a sample is fetched
        def held_back(self) -> list[Any]:
            key = PageKey("http://a.test/dup", 1.0)
            return [(key, 1, 0.5, [Held("http://a.test/9", requests("/9")[0])])]

    links.judge = SampleUnanswered()  # type: ignore[assignment]
    assert links.leave_undecided() == 2
    links.sharing.flush()
    taker = WorkSharing(store, "next run")
    left, member = taker.take(None, plugin.crawler.spider)
    assert member.url == "http://a.test/9"
    assert left.url == "http://a.test/1" and left.meta[LINK_META]
    assert links._seen().known_claimed("http://a.test/1")
    assert plugin.stat("dedup/undecided_left_to_the_crawl") == 2
    links.budget.keep_deferred = True  # JOBDIR: the resumed run reads their decisions
    assert links.leave_undecided() == 0


def test_a_request_taken_from_a_peer_is_left_to_the_crawl_at_a_stop_too() -> None:
    """It waited in Scrapy's scheduler unknown to the queue, and stayed claimed at a stop."""
    plugin = Plugin()
    links = plugin.session.links
    store = MemoryPeerStore()
    links.sharing = WorkSharing(store, "this")
    peer = WorkSharing(store, "peer")
    assert peer.hand_over(requests("/x")[0], plugin.crawler.spider)
    peer.flush()
    assert links.take_shared() and [r.url for r in plugin.engine.crawled] == ["http://a.test/x"]
    assert links.leave_queue() == 1


def test_a_decision_that_came_while_its_page_collected_is_honoured_at_a_stop() -> None:
    """Applied at the next poll, which never comes: its page's requests are left (a new
    page's), or not (a duplicate's, unless a judge follows them)."""
    plugin = Plugin()
    links = plugin.session.links
    links.sharing = WorkSharing(MemoryPeerStore(), "this")
    for path, follow in (("/new", True), ("/dup", False)):
        key = PageKey(f"http://a.test{path}", 1.0)
        request = requests(f"{path}/child")[0]
        links.ledger.published(key, 0, (request.url,), collecting=True)
        links.ledger.hold(key, Held(request.url, request))
        verdict = Verdict.UNIQUE if follow else Verdict.NEAR_DUPLICATE
        decision = Decision(
            url=key.url, host="a.test", fetched_at=1.0, decided_at=2.0, verdict=verdict,
            simhash="0" * 16, priority=0.5, follow_outlinks=follow,
            outlinks=(request.url,) if follow else (),
            duplicate_of=None if follow else "http://a.test/original",
        )  # fmt: skip
        links.ledger.apply(decision)  # the page still collects: it waits
        links.close(key)  # ready for the next poll
    assert links.leave_undecided() == 1
    assert links._seen().known_claimed("http://a.test/new/child")
    assert not links._seen().contains_many(["http://a.test/dup/child"])[0]


def test_an_undecided_request_that_skips_the_filter_is_left_unclaimed() -> None:
    """``dont_filter``: claimed by nobody, it goes to the list as it is (it was dropped)."""
    plugin = Plugin()
    links = plugin.session.links
    store = MemoryPeerStore()
    links.sharing = WorkSharing(store, "this")
    plugin.respond([Request("http://a.test/again", dont_filter=True)])  # no decision yet
    assert links.leave_undecided() == 1
    left = WorkSharing(store, "next run").take(None, plugin.crawler.spider)
    assert [(r.url, r.dont_filter) for r in left] == [("http://a.test/again", True)]
    assert not links._seen().contains_many(["http://a.test/again"])[0]


def test_undecided_requests_below_the_depth_limit_stay_out() -> None:
    """Without DepthMiddleware a request has no depth in its meta: it is one below its page."""
    plugin = Plugin(NEARDUP_MAX_DEPTH=1)
    links = plugin.session.links
    links.sharing = WorkSharing(MemoryPeerStore(), "this")
    key = PageKey("http://a.test/deep", 1.0)
    links.ledger.published(key, 1, ("http://a.test/deeper",), collecting=True)
    links.ledger.hold(key, Held("http://a.test/deeper", requests("/deeper")[0]))
    assert links.leave_undecided() == 0 and plugin.stat("dedup/outlinks_too_deep") == 1


def test_a_suppressed_link_an_undecided_page_leaves_to_the_crawl_is_not_counted_saved() -> None:
    plugin = Plugin()
    links = plugin.session.links
    links.sharing = WorkSharing(MemoryPeerStore(), "this")
    plugin.respond(requests("/x"))
    plugin.decide(follow=False)  # a duplicate: /x suppressed
    plugin.respond(requests("/x"), url="http://a.test/other")  # no decision yet
    DecisionScheduler(plugin.crawler, plugin.session)._close_down(plugin.crawler.spider, "shutdown")
    assert plugin.stat("dedup/undecided_left_to_the_crawl") == 1
    assert plugin.stat("dedup/outlinks_suppressed") == 0  # a later run fetches it


def test_undecided_requests_whose_push_fails_go_with_the_spider_s_last_flush() -> None:
    """Claimed, they wait in the outbox for the close's last flush. They used to be
    un-claimed, and that flush pushed them all the same: in the list, claimed by nobody."""

    class FailsOnce(MemoryPeerStore):
        failed = False

        def push(self, requests: Sequence[bytes]) -> None:
            if not self.failed:
                self.failed = True
                raise ConnectionError("redis is restarting")
            super().push(requests)

    plugin = Plugin()
    links = plugin.session.links
    store = FailsOnce()
    links.sharing = WorkSharing(store, "this")
    plugin.respond(requests("/1"))
    with pytest.raises(ConnectionError):
        links.leave_undecided()
    assert links._seen().contains_many(["http://a.test/1"])[0]
    links.sharing.flush()  # as the spider leaves the crawl's peer table
    left = WorkSharing(store, "next run").take(None, plugin.crawler.spider)
    assert [r.url for r in left] == ["http://a.test/1"]


def test_a_spider_stopped_before_the_end_leaves_its_queue_to_the_crawl() -> None:
    """Without JOBDIR, Scrapy's memory queue dies with a stopped process while its requests
    stay claimed: a run of the same crawl id fetched none of them. They go to the crawl's
    shared list (a JOBDIR crawl keeps its own queue)."""
    plugin = Plugin()
    links = plugin.session.links
    store = MemoryPeerStore()
    links.sharing = WorkSharing(store, "this")
    plugin.respond(requests("/1", "/2"))
    plugin.decide(follow=True)
    links.going_out(plugin.engine.crawled[0])  # /1 went out; /2 still waits in the queue
    assert links.leave_queue() == 1
    links.sharing.flush()
    taker = WorkSharing(store, "next run")
    assert [r.url for r in taker.take(None, plugin.crawler.spider)] == ["http://a.test/2"]
    assert plugin.stat("dedup/requests_left_to_the_crawl") == 1
    links.budget.keep_deferred = True  # JOBDIR: Scrapy keeps the queue on disk
    assert links.leave_queue() == 0


def test_a_correction_in_the_poll_after_a_waiting_decision_judges_the_page_as_a_duplicate() -> None:
    """The first decision came while the page collected and waits for the next poll; that poll
    brings the correction. Applied first, the correction found no link released, and the stale
    "follow" then released them all unjudged (and the page's verdict counted twice)."""
    plugin = Plugin()
    links = plugin.session.links
    key = PageKey("http://a.test/hub", 1.0)
    child = requests("/hub/child")[0]
    links.ledger.published(key, 0, (child.url,), collecting=True)
    links.ledger.hold(key, Held(child.url, child))
    first = Decision(
        url=key.url, host="a.test", fetched_at=1.0, decided_at=2.0, verdict=Verdict.UNIQUE,
        simhash="0" * 16, priority=0.5, follow_outlinks=True, outlinks=(child.url,),
    )  # fmt: skip
    links.ledger.apply(first)  # the page still collects: it waits
    links.close(key)  # ready for the next poll
    correction = Decision(
        url=key.url, host="a.test", fetched_at=1.0, decided_at=3.0,
        verdict=Verdict.NEAR_DUPLICATE, simhash="0" * 16, priority=0.0, follow_outlinks=False,
        duplicate_of="http://a.test/original", corrects=True,
    )  # fmt: skip
    links.apply([correction])
    assert plugin.engine.crawled == []  # the decision's judge drops a duplicate's requests
    assert plugin.stat("dedup/decisions_correct") == 1
    assert plugin.stat("dedup/decisions_follow") is None
