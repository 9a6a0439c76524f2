"""End to end: real HTTP (the planted site), real broker, real Redis, the real dedup-worker, and
two ``scrapy crawl neardup`` processes sharing one crawl."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from dedup_worker.contract.messages import decode_page
from neardup.demo.manifest import manifest
from neardup.demo.server import SiteServer
from tests.support.crawl_helpers import Env, final_decisions, read_topic, stats_line, wait_all

pytestmark = pytest.mark.integration

FAST = {"AUTOTHROTTLE_START_DELAY": "0.05", "NEARDUP_DECISION_TIMEOUT": "60"}


def _traced(name: str) -> dict[str, str]:
    return {"USER_AGENT": f"neardup-test ({name})", "LOG_LEVEL": "DEBUG"}


def _who_fetched(server: SiteServer, urls: list[str], logs: list[str]) -> str:
    """What a failure needs to say: each request for the URLs (which connection, which
    process) and what the crawlers' logs say of them (retries are logged at DEBUG)."""
    hits = [h for h in server.log if server.url(h.host, h.path) in urls]
    paths = {h.path for h in hits}
    lines = [
        f"{name}: {line}"
        for name, log in zip(("crawler-1", "crawler-2"), logs, strict=True)
        for line in log.splitlines()
        if any(p in line for p in paths) or "retry" in line.lower()
    ]
    return "\n".join([f"fetched twice: {urls}", *map(str, hits), *lines])


def test_two_crawlers_share_a_crawl_and_skip_near_duplicates(
    site_server: SiteServer, crawl_env: Env
) -> None:
    truth = manifest(site_server)
    (crawl_env.workdir / "manifest.json").write_text(json.dumps(truth, indent=1))
    domains = "allowed_domains=" + ",".join(["127.0.0.2", "127.0.0.3", "127.0.0.4"])
    crawl_env.worker()
    # Each process names itself to the site, and logs every request (DEBUG): a failure below
    # can then say who fetched what.
    first = crawl_env.crawler(
        "crawler-1", truth["seeds"]["main"], domains, **FAST, **_traced("crawler-1")
    )
    second = crawl_env.crawler(
        "crawler-2", truth["seeds"]["other"], domains, **FAST, **_traced("crawler-2")
    )
    wait_all(crawl_env, [first, second], timeout=90)

    fetched = Counter(site_server.fetched())
    decisions = final_decisions(
        read_topic(crawl_env.bootstrap, crawl_env.vars["NEARDUP_DECISIONS_TOPIC"])
    )
    logs = [crawl_env.log(name, 10**6) for name in ("crawler-1", "crawler-2")]

    # No URL was fetched twice, by one process or across the two.
    twice = [url for url, n in fetched.items() if n > 1]
    assert twice == [], _who_fetched(site_server, twice, logs)
    # Every planted near-duplicate was fetched and reported against its original.
    for dup in truth["duplicates"]:
        decision = decisions.get(dup["url"])
        assert decision is not None, f"no decision for {dup['kind']} duplicate {dup['url']}"
        assert (decision.verdict.value, decision.duplicate_of) == (
            dup["verdict"],
            dup["original"],
        ), f"{dup['kind']}: {decision}"
    # Pages reachable only through near-duplicates hold text found nowhere else: a duplicate's
    # outlinks without a counterpart under its keeper are new content, followed (issue 13).
    assert sorted(set(truth["only_via_duplicates"]) - set(fetched)) == []
    # Every unique page was fetched and decided unique.
    assert sorted(set(truth["unique"]) - set(fetched)) == []
    verdicts = {url: decisions[url].verdict.value for url in truth["unique"] if url in decisions}
    assert {u: v for u, v in verdicts.items() if v != "unique"} == {}
    assert sorted(set(truth["unique"]) - set(verdicts)) == []
    # robots.txt obeyed; canonical aliases not fetched as separate URLs.
    assert sorted(set(truth["disallowed"]) & set(fetched)) == []
    assert site_server.log and all(";jsessionid" not in hit.path for hit in site_server.log)
    # Redirects keep the requested URL; non-HTML is fetched but not published.
    pages = [
        decode_page(r.value)
        for r in read_topic(crawl_env.bootstrap, crawl_env.vars["NEARDUP_PAGES_TOPIC"], quiet=0.5)
    ]
    requested = {p.url: p.requested_url for p in pages}
    for redirect in truth["redirects"]:
        assert requested[redirect["url"]] == redirect["requested"]
    assert not set(truth["non_html"]) & set(requested)
    # Stats: no delivery errors, duplicates' new outlinks counted (by whoever met the families).
    assert [stats_line(log, "dedup/publish_errors") for log in logs] == [0, 0]
    assert sum(stats_line(log, "dedup/outlinks_new_content") for log in logs) > 0
    assert all("neardup crawl finished (finished)" in log for log in logs)

    # A third process on the same crawl (same Redis seen set) finds everything seen.
    before = len(site_server.fetched())
    third = crawl_env.crawler("crawler-3", truth["seeds"]["main"], domains, **FAST)
    wait_all(crawl_env, [third], timeout=60)
    assert site_server.fetched()[before:] == []
    assert "already seen - resuming" in crawl_env.log("crawler-3")
