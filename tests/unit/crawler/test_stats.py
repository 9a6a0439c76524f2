"""The end-of-crawl summary and the bandwidth estimate."""

from __future__ import annotations

from crawler.stats import bytes_saved_estimate, mean_page_bytes, summary, verdict_counts


def test_bandwidth_estimate_is_suppressed_links_times_mean_page_size() -> None:
    stats = {"dedup/pages_fetched": 4, "dedup/html_bytes": 40_000}
    assert mean_page_bytes(stats) == 10_000
    assert bytes_saved_estimate(7, stats) == 70_000
    assert bytes_saved_estimate(7, {}) == 0


def test_summary_names_verdicts_and_pages_left_without_decision() -> None:
    stats = {
        "dedup/pages_fetched": 10,
        "dedup/html_bytes": 2_000_000,
        "dedup/pages_published": 10,
        "dedup/verdict/unique": 8,
        "dedup/verdict/near_duplicate": 2,
        "dedup/outlinks_suppressed": 5,
        "dedup/bytes_saved_estimate": 1_000_000,
        "dedup/outstanding_at_close": 3,
    }
    text = summary(stats, "dedup_stalled")
    assert verdict_counts(stats) == {"near_duplicate": 2, "unique": 8}
    assert "(dedup_stalled)" in text and "near_duplicate 2, unique 8" in text
    assert "suppressed 5" in text and "~1.00 MB" in text and "WITHOUT DECISION   3" in text
