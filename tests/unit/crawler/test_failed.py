"""A request whose download failed for a passing reason stays claimed while the crawl runs and is
left, at the close, where a later run of the crawl fetches it again (:mod:`crawler.failed`)."""

from __future__ import annotations

from scrapy.http import Request

from crawler.failed import FailedFetches, afresh
from crawler.links import LINK_META
from crawler.seen import CLAIMED_META
from crawler.sharing import WorkSharing
from crawler.sharing_store import MemoryPeerStore
from tests.unit.crawler.test_plugin_components import Plugin, requests


def test_the_oldest_failure_is_forgotten_when_full_and_a_copy_starts_a_fresh_try() -> None:
    failed = FailedFetches(limit=2)
    for path in ("/1", "/2", "/1", "/3"):
        failed.add(Request(f"http://a.test{path}"))
    assert [r.url for r in failed.take()] == ["http://a.test/1", "http://a.test/3"]
    assert len(failed) == 0
    meta = {"depth": 2, "retry_times": 2, "redirect_urls": ["x"], "download_timeout": 9}
    tried = Request("http://a.test/", meta={**meta, "mine": 0}, priority=-2, dont_filter=True)
    again = afresh(tried, frozenset({"mine"}), -1, other=2)
    assert again.meta == {"depth": 2, "other": 2} and again.url == tried.url
    assert again.priority == 0 and not again.dont_filter  # as its first try went out


def _failed_once(plugin: Plugin) -> Request:
    """/1 goes out and fails after its retries; it stays claimed while the crawl runs."""
    links = plugin.session.links
    plugin.respond(requests("/1"))
    plugin.decide(follow=True)
    sent = plugin.engine.crawled[0]
    links.reached_downloader(sent)
    links.going_out(sent)
    tried = sent.replace(meta={**sent.meta, "retry_times": 2, CLAIMED_META: True})
    links.fetch_failed(tried)
    assert links._seen().known_claimed("http://a.test/1")
    assert plugin.stat("dedup/fetches_failed") == 1
    return tried


def test_at_the_close_a_failed_request_goes_to_the_crawls_shared_list() -> None:
    """It used to stay claimed for good: a run of the same crawl id never tried it again."""
    plugin = Plugin()
    links = plugin.session.links
    store = MemoryPeerStore()
    links.sharing = WorkSharing(store, "this")
    _failed_once(plugin)
    assert links.leave_failed() == 1
    links.sharing.flush()
    (again,) = WorkSharing(store, "next run").take(None, plugin.crawler.spider)
    assert again.url == "http://a.test/1" and again.meta[LINK_META]
    assert "retry_times" not in again.meta and CLAIMED_META not in again.meta
    assert plugin.stat("dedup/failed_left_for_a_later_run") == 1
    assert links.leave_failed() == 0  # left once


def test_with_jobdir_a_failed_request_is_deferred_for_the_resume() -> None:
    plugin = Plugin()
    links = plugin.session.links
    links.budget.keep_deferred = True
    _failed_once(plugin)
    assert links.leave_failed() == 1
    assert [(r.url, r.meta.get("retry_times")) for r in links.budget.deferred] == [
        ("http://a.test/1", None)
    ]


def test_without_sharing_a_failed_request_is_un_claimed_for_the_next_link_to_it() -> None:
    """With the URLs that redirected to it: a link to those finds them claimed otherwise."""
    plugin = Plugin()
    links = plugin.session.links
    tried = _failed_once(plugin)
    seen = links._seen()
    seen.claim_many(["http://a.test/old"])
    links.failed.add(
        tried.replace(url="http://a.test/new", meta={"redirect_urls": ["http://a.test/old"]})
    )
    seen.claim_many(["http://a.test/new"])
    assert links.leave_failed() == 0 and len(links.failed) == 0
    assert seen.contains_many(["http://a.test/1", "http://a.test/old", "http://a.test/new"]) == [
        False,
        False,
        False,
    ]
