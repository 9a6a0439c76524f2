"""The seen filter's fingerprints: stable, canonical, and the preclaim shortcut."""

from __future__ import annotations

import pytest

from crawler.seen import CrawlSeen, MemorySeenStore, legacy_seen_key, seen_key, url_fingerprint
from dedup_worker.errors import ConfigError


def test_fingerprint_is_pinned() -> None:
    # A change here orphans every stored crawl's seen set: bump the key scheme instead.
    assert url_fingerprint("http://example.com/a?b=1").hex() == GOLDEN


#: BLAKE2b-128 of "http://example.com/a?b=1".
GOLDEN = "60f9d30bc5ec8a205c46313ca86a742c"


def test_spellings_of_one_url_share_a_fingerprint() -> None:
    same = [
        "http://example.com/a?x=1&y=2",
        "HTTP://Example.COM:80/a?y=2&x=1#top",
        "http://example.com/a?x=1&y=2&utm_source=feed",
        "http://example.com/a;jsessionid=ABC?x=1&y=2",
    ]
    assert len({url_fingerprint(u) for u in same}) == 1
    assert url_fingerprint("http://example.com/a?x=1") != url_fingerprint("http://example.com/a")
    assert url_fingerprint("https://example.com/a") != url_fingerprint("http://example.com/a")


def test_method_and_body_count_only_beyond_plain_gets() -> None:
    url = "http://example.com/form"
    assert url_fingerprint(url, "get") == url_fingerprint(url)
    assert url_fingerprint(url, "POST", b"a=1") != url_fingerprint(url, "POST", b"a=2")
    assert url_fingerprint(url, "POST") != url_fingerprint(url)


def test_fingerprints_are_16_bytes_and_keys_name_the_crawl() -> None:
    assert len(url_fingerprint("http://x.test/")) == 16
    # The crawl id is the hash tag: the three sets of a crawl share one Redis Cluster slot.
    assert seen_key("c1") == "neardup:crawl:{c1}:seen"
    assert legacy_seen_key("c1") == "neardup:crawl:c1:seen"  # moved on a single Redis
    with pytest.raises(ConfigError, match="NEARDUP_CRAWL_ID"):
        seen_key("a{b}")


def test_claims_are_first_come_and_preclaimed_urls_pass_the_scheduler_once() -> None:
    seen = CrawlSeen(MemorySeenStore())
    assert seen.claim_many(["http://a.test/1", "http://a.test/2"]) == [True, True]
    assert seen.claim_many(["http://a.test/2", "http://a.test/3"]) == [False, True]
    # The scheduler's own check: claimed by us a moment ago, so not "seen"...
    assert not seen.request_seen("http://a.test/1")
    # ...but only once, and an unclaimed URL is claimed by the check itself.
    assert seen.request_seen("http://a.test/1")
    assert not seen.request_seen("http://a.test/4")
    assert seen.request_seen("http://a.test/4")


def test_release_lets_a_url_be_claimed_again() -> None:
    seen = CrawlSeen(MemorySeenStore())
    seen.claim_many(["http://a.test/1"])
    seen.release("http://a.test/1")
    assert seen.contains_many(["http://a.test/1"]) == [False]
    assert seen.claim_many(["http://a.test/1"]) == [True]


def test_repeated_links_ask_the_store_once() -> None:
    store = MemorySeenStore()
    seen = CrawlSeen(store)
    asked: list[int] = []
    add_many = store.add_many
    store.add_many = lambda fps: asked.append(len(fps)) or add_many(fps)  # type: ignore[method-assign]
    assert seen.claim_many(["http://a.test/1", "http://a.test/1", "http://a.test/2"]) == [
        True,
        False,
        True,
    ]
    assert seen.claim_many(["http://a.test/1", "http://a.test/3"]) == [False, True]
    assert asked == [2, 1]  # nav links repeat on every page: asked about once


def test_claims_follow_the_crawls_drop_params_as_its_outlinks_do() -> None:
    """With ``NEARDUP_DROP_PARAMS`` keeping a parameter the default drops (``sid`` selects a
    page on this site), two links the crawl tells apart must not share a claim: they did, and
    the second page was never fetched."""
    urls = ["http://a.test/list?sid=1", "http://a.test/list?sid=2"]
    assert CrawlSeen(MemorySeenStore()).claim_many(urls) == [True, False]  # the default drops it
    keeping = CrawlSeen(MemorySeenStore(), drop_params=frozenset({"utm_*"}))
    assert keeping.claim_many(urls) == [True, True]
    # utm_* still dropped: the same claim, which lets its request pass the filter once
    assert not keeping.request_seen("http://a.test/list?sid=2&utm_source=x")
    assert keeping.request_seen("http://a.test/list?sid=2")


def test_the_session_claims_under_the_configured_drop_params() -> None:
    from tests.unit.crawler.test_plugin_components import Plugin

    plugin = Plugin(NEARDUP_DROP_PARAMS="utm_*")
    assert plugin.session.seen().drop_params == frozenset({"utm_*"})
