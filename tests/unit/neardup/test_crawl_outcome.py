"""``neardup crawl``'s exit code: a crawl the spider closed for a failure exits non-zero."""

from __future__ import annotations

import pytest

from neardup.crawl_outcome import exit_code, failure


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
