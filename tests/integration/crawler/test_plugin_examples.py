"""Issue 14.1 acceptance: an ordinary Scrapy project (``examples/myproject``) with neardup added
by its settings lines, both spider styles (a CrawlSpider with rules, a plain callback spider),
crawling the planted site on the real broker and Redis with a real ``dedup-worker``: the
outlinks of near-duplicates are not followed, those of unique pages are, and the user's items
arrive unchanged (with the verdict when ``NEARDUP_ITEM_VERDICT`` asks for it)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from neardup.demo.manifest import manifest
from neardup.demo.server import SiteServer
from tests.support.crawl_helpers import REPO, Env, final_decisions, read_topic, stats_line, wait_all

pytestmark = pytest.mark.integration

PROJECT = REPO / "examples" / "myproject"
FAST = {"AUTOTHROTTLE_ENABLED": "False", "NEARDUP_DECISION_TIMEOUT": "60", "LOG_LEVEL": "INFO"}


def _crawl(
    site_server: SiteServer, crawl_env: Env, spider: str, **settings: str
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    truth = manifest(site_server)
    seeds = ",".join([truth["seeds"]["main"], truth["seeds"]["other"]])
    domains = ",".join(["127.0.0.2", "127.0.0.3", "127.0.0.4"])
    items = crawl_env.workdir / f"{spider}-items.jsonl"
    crawl_env.worker()
    process = crawl_env.project_crawler(
        spider, PROJECT, spider, f"start_urls={seeds}", f"allowed_domains={domains}",
        items=items, **FAST, **settings,
    )  # fmt: skip
    wait_all(crawl_env, [process], timeout=120)
    exported = [json.loads(line) for line in items.read_text().splitlines()]
    return truth, exported, crawl_env.log(spider, 10**6)


def _titles(site_server: SiteServer) -> dict[str, str]:
    return {site_server.url(h, p): spec.title for (h, p), spec in site_server.site.pages.items()}


def _check_the_crawl(site_server: SiteServer, truth: dict[str, Any], log: str) -> Counter[str]:
    fetched = Counter(site_server.fetched())
    # Start URLs too: Scrapy requests them with dont_filter, but neardup claims them in the
    # crawl's seen set, so a link back to one does not fetch it again.
    assert [url for url, n in fetched.items() if n > 1] == [], "a URL was fetched twice"
    # Every page reachable without passing through a duplicate was fetched...
    assert sorted(set(truth["unique"]) - set(fetched)) == []
    # ...every planted duplicate too (its link is on a unique page)...
    assert sorted({d["url"] for d in truth["duplicates"]} - set(fetched)) == []
    # ...and what only a duplicate links to: these pages hold text found nowhere else, and
    # with URL rules on (the default) a duplicate's outlink without a counterpart under its
    # keeper is new content, followed (issue 13).
    assert sorted(set(truth["only_via_duplicates"]) - set(fetched)) == []
    assert sorted(set(truth["disallowed"]) & set(fetched)) == []  # robots.txt still obeyed
    assert stats_line(log, "dedup/requests_held") > 0
    assert stats_line(log, "dedup/outlinks_new_content") > 0
    assert stats_line(log, "dedup/publish_errors") == 0
    assert "neardup crawl finished (finished)" in log
    return fetched


def _decided(crawl_env: Env) -> dict[str, str]:
    topic = crawl_env.vars["NEARDUP_DECISIONS_TOPIC"]
    final = final_decisions(read_topic(crawl_env.bootstrap, topic))
    return {url: decision.verdict.value for url, decision in final.items()}


def test_a_crawlspider_with_rules(site_server: SiteServer, crawl_env: Env) -> None:
    truth, items, log = _crawl(site_server, crawl_env, "rules")
    fetched = _check_the_crawl(site_server, truth, log)
    decided = _decided(crawl_env)
    for dup in truth["duplicates"]:
        assert decided[dup["url"]] == dup["verdict"], dup
    # The user's items, as the callback made them: one per page, nothing added.
    titles = _titles(site_server)
    assert items and all(item == {"url": item["url"], "title": titles[item["url"]],
                                  "spider": "rules"} for item in items)  # fmt: skip
    assert {item["url"] for item in items} == set(decided)  # every published page, once
    assert set(decided) <= set(fetched)


def test_a_plain_spider_with_verdicts_on_its_items(site_server: SiteServer, crawl_env: Env) -> None:
    truth, items, log = _crawl(site_server, crawl_env, "pages", NEARDUP_ITEM_VERDICT="True")
    _check_the_crawl(site_server, truth, log)
    decided = _decided(crawl_env)
    titles = _titles(site_server)
    assert len(items) == len(decided)
    for item in items:
        # The callback's item, plus the verdict of its page; nothing else changed.
        assert item == {"url": item["url"], "title": titles[item["url"]], "spider": "pages",
                        "neardup_verdict": decided[item["url"]]}  # fmt: skip
    verdicts = Counter(item["neardup_verdict"] for item in items)
    assert verdicts["unique"] > 0 and verdicts["near_duplicate"] > 0


def test_the_example_project_names_every_component(tmp_path: Path) -> None:
    """The settings lines in the README are the example's (what users copy is what runs)."""
    readme = (REPO / "README.md").read_text()
    settings = (PROJECT / "myproject" / "settings.py").read_text()
    block = settings.split("# ---- neardup ", 1)[1].split("\n", 1)[1]
    for line in block.splitlines():
        if line and not line.startswith("#"):
            assert line in readme, line
