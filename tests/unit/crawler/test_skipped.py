"""The bounded cache of skipped requests (crawler.skipped): full, it forgets the oldest."""

from __future__ import annotations

from typing import Any

from crawler.skipped import SkippedRequests
from dedup_worker.errors import BackendUnavailable
from tests.unit.crawler.test_plugin_components import Plugin, requests


def test_a_full_cache_forgets_its_oldest_request_not_all_of_them() -> None:
    """It used to start over when full: the skips of a rule that had just become active went
    with the rest, and could not be fetched back if that rule failed."""
    cache = SkippedRequests(limit=3)
    for n in range(3):
        cache.add(f"u{n}", f"request {n}", claimed=n == 2)
    cache.add("u0", "request 0 again")  # skipped again: now the newest
    cache.add("u3", "request 3")
    assert len(cache) == 3 and cache.pop("u1") is None  # the oldest went
    assert cache.pop("u2") == ("request 2", True)
    assert cache.pop("u0") == ("request 0 again", False)


def test_a_claimed_request_the_full_cache_forgets_is_given_back_to_the_crawl() -> None:
    """It could no longer be fetched back, and stayed claimed: no link would ever fetch it."""
    plugin = Plugin()
    links = plugin.session.links
    links.skipped = SkippedRequests(limit=1)
    seen = links._seen()
    first, second = requests("/first", "/second")
    seen.claim_many([first.url, second.url])
    links.keep_skipped(first.url, first, claimed=True)
    links.keep_skipped("http://a.test/other", requests("/other")[0])  # never claimed
    assert seen.contains_many([first.url]) == [False]  # the next link schedules it again
    links.keep_skipped(second.url, second, claimed=True)  # forgets /other: nothing to give
    assert seen.contains_many([second.url]) == [True]
    assert plugin.stat("dedup/skipped_forgotten") == 2


def test_a_forgotten_skip_stays_claimed_if_redis_fails_and_dont_filter_is_nobody_s() -> None:
    """The release is a Redis call where none used to be (the gate's admit): a failure must
    not cost the poll its links. A dont_filter request's claim is not this process's."""
    plugin = Plugin()
    links = plugin.session.links
    links.skipped = SkippedRequests(limit=1)
    seen = links._seen()
    mine, theirs = requests("/mine", "/theirs")
    seen.claim_many([mine.url, theirs.url])
    links.keep_skipped(theirs.url, theirs.replace(dont_filter=True), claimed=True)
    links.keep_skipped(mine.url, mine, claimed=True)  # forgets /theirs: another's claim
    assert seen.contains_many([theirs.url]) == [True]

    def down(*args: Any) -> None:
        raise BackendUnavailable("redis at redis://x unavailable: ConnectionError")

    seen.release = down  # type: ignore[method-assign]
    links.keep_skipped("http://a.test/next", requests("/next")[0])  # forgets /mine
    assert plugin.stat("dedup/skipped_forgotten_still_claimed") == 1
