"""The end-of-crawl summary and the bandwidth estimate."""

from __future__ import annotations

from crawler.rules.policy import Evidence, State
from crawler.rules.store import RuleStatus
from crawler.stats import bytes_saved_estimate, mean_page_bytes, summary, verdict_counts
from neardup.crawl_outcome import outcome_lines
from neardup.rules_table import rule_rows


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
    assert "skipped by rule" not in text  # no URL rules in this crawl: no lines about them


def test_summary_counts_what_the_url_rules_and_the_outlink_judge_did() -> None:
    stats = {
        "dedup/pages_fetched": 10,
        "dedup/requests_skipped/rule": 7,
        "dedup/requests_skipped_before_fetch": 6,
        "dedup/rules/predicted": 7,
        "dedup/rules/explored": 1,
        "dedup/rules/known_to_differ": 1,
        "dedup/rules/paced": 4,
        "dedup/rules/waited_for_counterpart": 5,
        "dedup/rules/counterpart_fetched_first": 9,
        "dedup/rules/active": 2,
        "dedup/rules/dropped": 1,
        "dedup/outlinks_new_content": 3,
        "dedup/outlinks_known_to_differ": 2,
        "dedup/groups_sampled": 2,
        "dedup/groups_suppressed": 1,
        "dedup/groups_followed": 1,
        "dedup/groups_refuted": 4,
    }
    text = summary(stats, "finished")
    assert "skipped by rule    7 (6 just before fetching)" in text
    assert "1 fetched anyway as checks (1 known to differ), 4 held" in text
    assert "5 while their counterpart was being fetched, 9 while it was fetched ahead" in text
    assert "2 active" in text and "1 dropped" in text
    assert "3 new content followed (2 known to differ from their counterpart); groups: 2" in text
    assert "1 suppressed" in text
    assert "1 followed, 4 not formed (their rewrite's rule failed a check)" in text


def test_neardup_crawls_outcome_lines_name_the_counts_and_the_rules() -> None:
    key = "host http://m.test http://d.test"
    rows = rule_rows({key: RuleStatus(key, State.ACTIVE, Evidence(12, 0, 0, 0, 12), 30)})
    lines = outcome_lines({"dedup/pages_fetched": 9, "dedup/requests_skipped/rule": 30}, rows)
    text = "\n".join(lines)
    assert "pages fetched: 9" in text and "skipped by URL rule: 30" in text
    assert "URL rules: 1 active, 0 dropped, 0 candidates" in text and key in text
    assert outcome_lines({}, []) == ["spider stats: none written (see the spider's log)"]


def test_a_resumed_crawl_says_so_and_how_to_crawl_again() -> None:
    """Run again with the same seeds, a crawl resumes under its id: with every URL seen it
    fetches nothing, and the summary says why instead of leaving a bare 0."""
    stats = {"crawl_id": "seeds-831b1c23d7e1", "dedup/seen_at_start": 117}
    text = "\n".join(outcome_lines({**stats, "dedup/pages_fetched": 0}, []))
    assert "resumed crawl 'seeds-831b1c23d7e1': 117 URLs were claimed before" in text
    assert "killed left its queue claimed" in text  # not all of them fetched, maybe
    assert "--crawl-id" in text
    assert "resumed" not in "\n".join(outcome_lines({"dedup/pages_fetched": 3}, []))


def test_a_recrawl_says_what_it_fetched_because_it_is_one() -> None:
    stats = {
        "dedup/pages_fetched": 50,
        "dedup/rules/counterpart_changed": 2,
        "dedup/rules/original_of_counterpart": 5,
        "dedup/outlinks_recrawl_fetched": 11,
    }
    text = "\n".join(outcome_lines(stats, []))
    assert (
        "fetched because this is a recrawl: 7 URLs a rule maps onto a page that changed (2) "
        "or that was their original (5); 11 duplicates' outlinks likewise"
    ) in text
    assert "recrawl" not in "\n".join(outcome_lines({"dedup/pages_fetched": 3}, []))


def test_a_crawl_that_reached_its_page_budget_says_so() -> None:
    stats = {"dedup/pages_fetched": 50, "dedup/outlinks_over_budget": 70}
    more = {"dedup/budget_returned": 4, "dedup/requests_http_error": 2}
    text = "\n".join(outcome_lines({**stats, **more}, []))
    assert "page budget reached (--max-pages, NEARDUP_MAX_PAGES): 70 links" in text
    assert "(4 places given back" in text
    assert "; 2 spent on requests answered with an HTTP error status" in text
    assert "budget" not in "\n".join(outcome_lines({"dedup/pages_fetched": 3}, []))


def test_a_crawl_whose_fetches_failed_says_how_many_a_later_run_tries_again() -> None:
    stats = {"crawl_id": "c1", "dedup/fetches_failed": 3, "dedup/failed_left_for_a_later_run": 2}
    text = "\n".join(outcome_lines({**stats, "dedup/pages_fetched": 9}, []))
    assert "fetches failed for a passing reason after Scrapy's retries" in text
    assert ": 3; 2 kept for a later run of crawl 'c1'" in text
    assert "fetches failed" not in "\n".join(outcome_lines({"dedup/pages_fetched": 3}, []))


def test_a_stopped_crawls_outcome_says_what_it_left_for_a_later_run() -> None:
    stats = {
        "crawl_id": "docs",
        "dedup/requests_left_to_the_crawl": 40,
        "dedup/undecided_left_to_the_crawl": 2,
        "dedup/decisions_applied_while_stopping": 7,
    }
    [line] = [x for x in outcome_lines(stats, []) if x.startswith("stopped before the end")]
    assert "42 requests left for a later run of crawl 'docs'" in line
    assert "2 of them undecided; 7 decisions applied while stopping" in line
    assert "resuming needs NEARDUP_REDIS_URL" in line  # the embedded Redis is gone with it
    assert not [x for x in outcome_lines({"dedup/pages_fetched": 3}, []) if "stopped" in x]
