"""``neardup crawl``'s exit code: a crawl the spider closed for a failure exits non-zero."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from neardup.crawl_outcome import exit_code, failure, killed_line, merge_stats, spiders_line
from neardup.crawl_run import PER_HOST_REQUESTS, CrawlOptions, CrawlRun


def test_a_stalled_pipeline_fails_the_crawl_although_scrapy_exited_0() -> None:
    stats = {"finish_reason": "dedup_stalled", "dedup/stalled_pages": 3}
    assert exit_code(0, stats) == 1
    reason = failure(stats)
    assert reason is not None and "NEARDUP_DECISION_TIMEOUT" in reason


@pytest.mark.parametrize("reason", ["finished", "closespider_pagecount", "shutdown"])
def test_other_close_reasons_keep_the_spiders_code(reason: str) -> None:
    assert exit_code(0, {"finish_reason": reason}) == 0
    assert failure({"finish_reason": reason}) is None


def test_the_spiders_own_failure_is_kept() -> None:
    assert exit_code(2, {"finish_reason": "dedup_stalled"}) == 2
    assert exit_code(1, {}) == 1
    assert exit_code(0, {}) == 0


def test_a_killed_spider_exits_as_a_shell_says_and_the_summary_says_what_it_left() -> None:
    """Killed (SIGKILL: out of memory), a spider writes no stats and hands nothing over: the
    exit code is 137 (it was -9, which a shell shows as 247) and the summary says where what
    it owed is (its journal) and who takes it over."""
    assert exit_code(-9, {}) == 137
    assert exit_code(-15, {"finish_reason": "dedup_stalled"}) == 143
    line = killed_line(-9, "site-a")
    assert line is not None
    assert "killed by SIGKILL" in line and "crawl 'site-a'" in line
    assert "journal" in line and "next run of the same crawl id" in line
    assert "NEARDUP_REDIS_URL" in line
    assert "derived from the seeds" in (killed_line(-9, None) or "")
    assert killed_line(0, "site-a") is None and killed_line(2, "site-a") is None


def test_the_stats_of_several_spiders_add_up_and_a_failure_shows() -> None:
    first = {
        "dedup/pages_fetched": 70,
        "elapsed_time_seconds": 12.5,
        "dedup/seen_at_start": 0,
        "finish_reason": "finished",
        "crawl_id": "c1",
    }
    second = {
        "dedup/pages_fetched": 30,
        "elapsed_time_seconds": 14.0,
        "dedup/seen_at_start": 2,  # the first spider's seeds, claimed as it started
        "finish_reason": "dedup_stalled",
        "crawl_id": "c1",
    }
    merged = merge_stats([first, second])
    assert merged["dedup/pages_fetched"] == 100
    assert merged["elapsed_time_seconds"] == 14.0
    assert merged["dedup/seen_at_start"] == 0  # not a resumed crawl
    assert merged["finish_reason"] == "dedup_stalled" and merged["crawl_id"] == "c1"
    assert merge_stats([first, {}]) == first  # a spider that wrote none
    assert merge_stats([]) == {}


def test_the_summary_says_how_the_spiders_shared_the_crawl() -> None:
    first = {"dedup/pages_fetched": 634, "dedup/requests_handed_over": 49}
    second = {"dedup/pages_fetched": 351, "dedup/requests_taken_over": 49}
    assert spiders_line([first, second]) == (
        "spiders: 2, pages fetched 634 / 351; links handed to an idle spider: 49, taken: 49"
    )
    spent = {"dedup/pages_fetched": 277, "dedup/requests_handed_over": 801}
    assert spiders_line([spent, {"dedup/requests_taken_over": 127}]).endswith(
        "handed to an idle spider: 801, taken: 127; 674 left in the crawl's shared list with the"
        " budget spent (the same crawl id run again takes them)"
    )


def test_several_spiders_split_the_budget_and_each_hosts_concurrency() -> None:
    from crawler import settings

    assert settings.CONCURRENT_REQUESTS_PER_DOMAIN == PER_HOST_REQUESTS
    options = CrawlOptions(seeds=("http://a.test/",), out=Path("d.jsonl"), max_pages=101)
    argv = " ".join(CrawlRun(options)._spider_argv())
    assert "max_pages=101" in argv and "CONCURRENT_REQUESTS_PER_DOMAIN" not in argv
    argv = " ".join(CrawlRun(replace(options, crawlers=3))._spider_argv())
    assert "max_pages=34" in argv  # 3 x 34 >= 101: no place lost to rounding
    assert f"CONCURRENT_REQUESTS_PER_DOMAIN={PER_HOST_REQUESTS // 3}" in argv
