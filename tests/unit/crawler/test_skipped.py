"""The bounded cache of skipped requests (crawler.skipped): full, it forgets the oldest."""

from __future__ import annotations

from crawler.skipped import SkippedRequests


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
