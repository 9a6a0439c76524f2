"""Stopping and resuming a crawl (JOBDIR + the Redis seen set), and a stalled dedup pipeline."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from dedup_worker.contract import decode_decision
from dedup_worker.contract.messages import Decision
from dedup_worker.contract.reading import fold_decisions
from neardup.demo.manifest import manifest
from neardup.demo.planted import article
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


def test_a_link_robots_txt_refuses_gives_its_budget_place_back(
    site_server: SiteServer, crawl_env: Env
) -> None:
    """The front page links to /private/ledger, which robots.txt disallows: its request is
    refused before it is sent (Scrapy's RobotsTxtMiddleware), and its place goes to a link
    that can be fetched. It used to count as a fetch."""
    truth = manifest(site_server)
    crawl_env.worker()
    seed = truth["seeds"]["main"]
    wait_all(crawl_env, [crawl_env.crawler("run", seed, DOMAINS, "max_pages=18", **FAST)], 60)
    log = crawl_env.log("run")
    assert stats_line(log, "robotstxt/forbidden") == 1
    assert stats_line(log, "dedup/requests_refused_before_download") == 1
    assert stats_line(log, "dedup/budget_returned") >= 1
    assert stats_line(log, "dedup/outlinks_over_budget") > 0
    assert sorted(set(truth["disallowed"]) & set(site_server.fetched())) == []


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


def test_a_recrawl_on_the_same_index_reaches_a_page_that_changed_below_unchanged_ones(
    site_server: SiteServer, crawl_env: Env
) -> None:
    """A second crawl (a new crawl id) of the same site against the index of the first: the
    seeds come back unchanged, and the crawl goes on through them to every page again; the
    page that changed in between is decided ``changed``; a duplicate stays a duplicate of the
    same original, its outlinks unfollowed."""
    truth = manifest(site_server)
    crawl_env.worker()
    seeds = ",".join([truth["seeds"]["main"], truth["seeds"]["other"]])
    wait_all(crawl_env, [crawl_env.crawler("crawl-1", seeds, DOMAINS, **FAST)], 120)
    first = Counter(site_server.fetched())
    assert sorted(set(truth["unique"]) - set(first)) == []
    site = site_server.site
    deep = max(
        (key for key in site.pages if site_server.url(*key) in truth["unique"]),
        key=lambda key: (key[1].count("/"), key),
    )
    site.pages[deep].body = article(4242, deep[1], []).body  # rewritten between the crawls
    recrawl = {**FAST, "NEARDUP_CRAWL_ID": crawl_env.vars["NEARDUP_CRAWL_ID"] + "-again"}
    wait_all(crawl_env, [crawl_env.crawler("crawl-2", seeds, DOMAINS, **recrawl)], 120)

    second = Counter(site_server.fetched()) - first
    assert sorted(set(truth["unique"]) - set(second)) == []  # past the unchanged seeds
    records = read_topic(crawl_env.bootstrap, crawl_env.vars["NEARDUP_DECISIONS_TOPIC"])
    latest: dict[str, Decision] = {}
    for (url, _), decision in sorted(
        fold_decisions(decode_decision(r.value or b"") for r in records).items(),
        key=lambda item: item[0].fetched_at,
    ):
        latest[url] = decision  # each URL's decision of the recrawl
    changed = site_server.url(*deep)
    assert latest[changed].verdict == "changed" and latest[changed].follow_outlinks
    for url in set(truth["unique"]) - {changed}:
        assert latest[url].verdict == "unchanged" and latest[url].follow_outlinks, url
        assert latest[url].duplicate_of is None
    again = [dup for dup in truth["duplicates"] if dup["url"] in second]
    assert again, "no planted duplicate was fetched again"
    for dup in again:
        decision = latest[dup["url"]]
        assert decision.verdict == "unchanged" and not decision.follow_outlinks, dup
        assert decision.duplicate_of == dup["original"], dup


def test_a_page_that_failed_in_one_run_is_fetched_by_the_next_run_of_the_crawl(
    site_server: SiteServer, crawl_env: Env
) -> None:
    """/guide answers 503 during the first run (retries included): it stays claimed while that
    run goes on, and at its close goes to the crawl's shared list. The next run of the same
    crawl id fetches it. It used to stay claimed for good: a passing failure lost the page."""
    truth = manifest(site_server)
    site = site_server.site
    answer = site.respond
    busy = {"/guide"}

    def respond(host: str, path: str, base: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if host == "main" and path in busy:
            return 503, {"Content-Type": "text/plain"}, b"busy"
        return answer(host, path, base)

    site.respond = respond  # type: ignore[method-assign]
    crawl_env.worker()
    seed = truth["seeds"]["main"]
    once = {**FAST, "RETRY_TIMES": "1"}
    wait_all(crawl_env, [crawl_env.crawler("run-1", seed, DOMAINS, **once)], 60)
    assert _statuses(site_server, "main", "/guide") == [503, 503]
    busy.clear()
    wait_all(crawl_env, [crawl_env.crawler("run-2", seed, DOMAINS, **once)], 60)
    assert _statuses(site_server, "main", "/guide") == [503, 503, 200]
    log = crawl_env.log("run-1")
    assert stats_line(log, "dedup/fetches_failed") == 1
    assert stats_line(log, "dedup/failed_left_for_a_later_run") == 1
    assert stats_line(crawl_env.log("run-2"), "dedup/requests_taken_over") == 1


def _statuses(server: SiteServer, host: str, path: str) -> list[int]:
    return [hit.status for hit in server.log if (hit.host, hit.path) == (host, path)]


def test_a_jobdir_crawl_stopped_then_killed_loses_nothing_when_resumed(
    site_server: SiteServer, crawl_env: Env, tmp_path: Path
) -> None:
    """Stopped (Ctrl-C), a JOBDIR crawl keeps its journal for the resume, which adopts it;
    killed (SIGKILL), its queue is not read back (Scrapy writes its state only as it closes:
    ``crawler.jobdir``), so the next run discards it and takes over the killed process's
    journal, adopted entries included. Before, a JOBDIR crawl journaled nothing: the last
    run found every link claimed and the killed run's queue unreadable, and lost the pages."""
    truth = manifest(site_server)
    job = tmp_path / "job"
    settings = {"JOBDIR": str(job), "NEARDUP_RULES": "false", **FAST}
    # Decisions every 2 s pace the crawl, so the stops land mid-crawl on a busy machine too.
    crawl_env.vars["NEARDUP_BATCH_INTERVAL_MS"] = "2000"
    crawl_env.worker()
    seed = truth["seeds"]["main"]
    expected = set(truth["unique"]) - {u for u in truth["unique"] if "127.0.0.4" in u}

    def stopped(name: str, sig: signal.Signals) -> None:
        process = crawl_env.crawler(name, seed, DOMAINS, **settings)
        goal, deadline = len(site_server.fetched()) + 3, time.monotonic() + 120
        while len(site_server.fetched()) < goal and process.poll() is None:
            assert time.monotonic() < deadline, crawl_env.log(name)
            time.sleep(0.05)
        assert process.poll() is None, f"{name} ended before its stop"
        process.send_signal(sig)
        process.wait(60)
        assert expected - set(site_server.fetched()), "the stop should leave unique pages"

    stopped("run-1", signal.SIGINT)
    assert not (job / "neardup-running").exists()
    stopped("run-2", signal.SIGKILL)
    assert "took up the journal of the run this JOBDIR resumes" in crawl_env.log("run-2", 10**6)
    assert (job / "neardup-running").exists()
    stats_file = tmp_path / "run-3.json"
    last = crawl_env.crawler("run-3", seed, DOMAINS, NEARDUP_STATS_FILE=str(stats_file),
                             **settings)  # fmt: skip
    wait_all(crawl_env, [last], 240)

    assert sorted(expected - set(site_server.fetched())) == []
    assert "did not close (killed?)" in crawl_env.log("run-3", 10**6)
    assert json.loads(stats_file.read_text())["dedup/requests_taken_from_killed"] > 0
    assert not (job / "neardup-running").exists()
