"""Stopping and resuming a crawl (JOBDIR + the Redis seen set), and a stalled dedup pipeline."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from neardup.demo.manifest import manifest
from neardup.demo.server import SiteServer
from tests.support.crawl_helpers import Env, final_decisions, read_topic, stats_line, wait_all

pytestmark = pytest.mark.integration

FAST = {"AUTOTHROTTLE_START_DELAY": "0.05", "NEARDUP_DECISION_TIMEOUT": "60"}
DOMAINS = "allowed_domains=127.0.0.2,127.0.0.3,127.0.0.4"


def test_a_crawl_stopped_by_its_page_budget_resumes_where_it_stopped(
    site_server: SiteServer, crawl_env: Env, tmp_path: Path
) -> None:
    truth = manifest(site_server)
    # With URL rules off, a duplicate's requests are all dropped, as before issue 13: what
    # only duplicates link to stays unfetched across the resume.
    job = {"JOBDIR": str(tmp_path / "job"), "NEARDUP_RULES": "false", **FAST}
    crawl_env.worker()
    seed = truth["seeds"]["main"]
    wait_all(crawl_env, [crawl_env.crawler("run-1", seed, DOMAINS, "max_pages=12", **job)], 60)
    first = len(site_server.fetched())
    assert first <= 12
    wait_all(crawl_env, [crawl_env.crawler("run-2", seed, DOMAINS, **job)], 60)

    fetched = Counter(site_server.fetched())
    assert [url for url, n in fetched.items() if n > 1] == []
    assert len(fetched) > first
    expected = set(truth["unique"]) - {u for u in truth["unique"] if "127.0.0.4" in u}
    assert sorted(expected - set(fetched)) == []
    assert sorted(set(truth["only_via_duplicates"]) & set(fetched)) == []
    decisions = final_decisions(
        read_topic(crawl_env.bootstrap, crawl_env.vars["NEARDUP_DECISIONS_TOPIC"])
    )
    for dup in truth["duplicates"]:
        assert decisions[dup["url"]].duplicate_of == dup["original"], dup
    assert stats_line(crawl_env.log("run-1"), "dedup/outlinks_over_budget") > 0


def test_a_crawl_without_a_worker_stops_with_a_clear_reason(
    site_server: SiteServer, crawl_env: Env
) -> None:
    seed = manifest(site_server)["seeds"]["main"]
    settings = {**FAST, "NEARDUP_DECISION_TIMEOUT": "2"}
    wait_all(crawl_env, [crawl_env.crawler("alone", seed, DOMAINS, **settings)], 60)
    log = crawl_env.log("alone", 10**6)
    assert "dedup pipeline stalled: 1 published pages got no decision in 2 s" in log
    assert "Is a dedup-worker consuming" in log
    assert "'finish_reason': 'dedup_stalled'" in log
    assert stats_line(log, "dedup/stalled_pages") == 1
