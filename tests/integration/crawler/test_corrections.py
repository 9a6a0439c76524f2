"""Decisions the crawler must survive: corrections, duplicates, foreign pages, garbage.

A scripted worker (this test, reading the real ``pages`` topic and writing real decisions)
makes the home page's outlinks followed, then corrects the home page to a near-duplicate while
those links still wait for their turn (one request per 0.6 s per host). With the URL rules (the
default) they go out all the same: a duplicate's outlinks are judged, not dropped, and a
correction has no sample to judge them by. Without the rules a duplicate's outlinks are
dropped, and so are these: released from the shared seen set so that another page may still
schedule them; unless a page of another crawler process wanted them meanwhile (and found them
claimed): then they are fetched after all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest
import redis

from crawler.seen import CrawlSeen, seen_key, url_fingerprint
from crawler.seen_redis import RedisSeenStore
from dedup_worker.adapters.kafka import KafkaSettings, Sender, TopicReader
from dedup_worker.contract.messages import Decision, Page, Verdict, decode_page
from neardup.demo.manifest import manifest
from neardup.demo.server import SiteServer
from neardup.stack import RedisServer
from tests.support.crawl_helpers import Env, stats_line, wait_all

pytestmark = pytest.mark.integration


def decision(page: Page, follow: bool, links: tuple[str, ...] = (), **extra: object) -> bytes:
    verdict = Verdict.UNIQUE if follow else Verdict.NEAR_DUPLICATE
    fields: dict[str, object] = {
        "url": page.url,
        "host": page.host,
        "verdict": verdict,
        "simhash": "0" * 16,
        "priority": 0.9,
        "follow_outlinks": follow,
        "fetched_at": page.fetched_at,
        "decided_at": time.time(),
        "outlinks": links,
        **extra,
    }
    return Decision(**fields).to_json()  # type: ignore[arg-type]


#: One request per 0.6 s per host: the home page's links wait for their turn.
SLOW = {
    "AUTOTHROTTLE_ENABLED": "False",
    "DOWNLOAD_DELAY": "0.6",
    "RANDOMIZE_DOWNLOAD_DELAY": "False",
    "NEARDUP_DECISION_TIMEOUT": "20",
}

#: How long the scripted worker waits for the home page's links to be seen waiting before it
#: corrects the page anyway (the test then fails on the counts): no figure of speed.
LINKS_WAITING_S = 60.0


class ScriptedWorker(threading.Thread):
    """``links_waiting(links)``: whether the crawl shows the followed links scheduled (and
    whatever else the test needs) before the home page is corrected."""

    def __init__(self, env: Env, home: str, links_waiting: Callable[[Sequence[str]], bool]) -> None:
        super().__init__(daemon=True)
        self.env, self.home, self.stop = env, home, threading.Event()
        self.links_waiting = links_waiting
        self.producer = Sender(KafkaSettings(env.bootstrap))

    def run(self) -> None:
        # The crawler creates the pages topic when it opens: wait for it (up to 60 s).
        reader = TopicReader(
            KafkaSettings(self.env.bootstrap), self.env.vars["NEARDUP_PAGES_TOPIC"]
        )
        reader.start("beginning", wait_s=60)
        while not self.stop.is_set():
            for record in reader.poll(0.1):
                self.answer(decode_page(record.value or b""))
        reader.close()

    def send(self, page: Page, value: bytes) -> None:
        topic = self.env.vars["NEARDUP_DECISIONS_TOPIC"]
        self.producer.send(topic, page.host.encode(), value)
        self.producer.flush()

    def answer(self, page: Page) -> None:
        if page.url != self.home:
            self.send(page, decision(page, follow=False))
            return
        articles = tuple(link for link in page.outlinks if "/articles/" in link)[:8]
        self.send(page, b"{not json")
        self.send(page, decision(page, True, articles, fetched_at=page.fetched_at - 1))  # foreign
        self.send(page, decision(page, True, articles))
        self.send(page, decision(page, True, articles))  # redelivered
        # Correct the page once its links are seen waiting, not after a fixed pause: on a busy
        # machine the crawler may schedule them later than that, and every 0.6 s the
        # correction comes later one more of them is fetched (the test allows two).
        deadline = time.monotonic() + LINKS_WAITING_S
        while not self.links_waiting(articles) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.send(page, decision(page, False, corrects=True, duplicate_of="http://x.test/"))
        self.send(page, decision(page, True, articles))  # must not undo the correction


def test_with_the_url_rules_a_correction_keeps_the_links_already_out(
    site_server: SiteServer, crawl_env: Env, redis_client: redis.Redis
) -> None:
    """Cancelled whole, a corrected page's subtree was lost when its pages differ from the
    original's (13 unique pages of a release's renderings, in a crawl stopped and run again)."""
    home = manifest(site_server)["seeds"]["main"]
    store = RedisSeenStore(redis_client, crawl_env.vars["NEARDUP_CRAWL_ID"])
    log = _crawl_home(crawl_env, home, _scheduled(store), SLOW)
    fetched = [url for url in site_server.fetched() if "/articles/" in url]
    kept = stats_line(log, "dedup/links_of_corrected_pages_kept")
    assert len(fetched) == 8 and kept >= 6, (fetched, kept)
    assert stats_line(log, "dedup/corrections") == 1
    assert stats_line(log, "dedup/requests_cancelled") == 0
    assert store.in_flight() == (0, 0)
    assert "'finish_reason': 'finished'" in log


def _crawl_home(
    env: Env, home: str, links_waiting: Callable[[Sequence[str]], bool], settings: dict[str, str]
) -> str:
    """Crawl from ``home`` against the scripted worker; the crawler's log."""
    worker = ScriptedWorker(env, home, links_waiting)
    worker.start()
    crawler = env.crawler("slow", home, **settings)
    try:
        wait_all(env, [crawler], timeout=60)
    finally:
        worker.stop.set()
    return env.log("slow", 10**6)


def _scheduled(store: RedisSeenStore) -> Callable[[Sequence[str]], bool]:
    def scheduled(links: Sequence[str]) -> bool:  # claimed in the seen set: scheduled
        return all(store.contains_many([url_fingerprint(u) for u in links]))

    return scheduled


def test_without_the_url_rules_a_correction_drops_the_links_still_waiting(
    site_server: SiteServer, crawl_env: Env, redis_client: redis.Redis
) -> None:
    truth = manifest(site_server)
    home = truth["seeds"]["main"]
    store = RedisSeenStore(redis_client, crawl_env.vars["NEARDUP_CRAWL_ID"])
    slow = {**SLOW, "NEARDUP_RULES": "off"}  # a duplicate's outlinks dropped
    log = _crawl_home(crawl_env, home, _scheduled(store), slow)
    fetched = [url for url in site_server.fetched() if "/articles/" in url]
    cancelled = stats_line(log, "dedup/requests_cancelled")
    assert len(fetched) + cancelled == 8 and cancelled >= 6, (fetched, cancelled)
    assert stats_line(log, "dedup/decisions_invalid") == 1
    assert stats_line(log, "dedup/decisions_foreign") == 1
    assert stats_line(log, "dedup/decisions_duplicate") == 2
    assert stats_line(log, "dedup/corrections") == 1
    key = seen_key(crawl_env.vars["NEARDUP_CRAWL_ID"])
    articles = [u for u in truth["unique"] if "/articles/" in u and u.count("/") == 4]
    claimed = [redis_client.sismember(key, url_fingerprint(u)) for u in articles]
    assert sum(claimed) == len(fetched)  # the cancelled ones were released
    in_flight = RedisSeenStore(redis_client, crawl_env.vars["NEARDUP_CRAWL_ID"]).in_flight()
    assert in_flight == (0, 0), in_flight  # what went out or was cancelled left the sets
    assert "'finish_reason': 'finished'" in log


def test_a_cancelled_link_that_another_process_wanted_is_fetched_after_all(
    site_server: SiteServer, crawl_env: Env, redis_server: RedisServer
) -> None:
    """As above, but a second crawler process (this test, through the same seen set) links to
    every article the home page claimed, finds them claimed and filters them: the correction
    must not cancel them, or nobody would fetch them."""
    truth = manifest(site_server)
    home = truth["seeds"]["main"]
    articles = [u for u in truth["unique"] if "/articles/" in u and u.count("/") == 4]
    crawl_id = crawl_env.vars["NEARDUP_CRAWL_ID"]
    other = CrawlSeen(RedisSeenStore.from_url(redis_server.url, crawl_id))
    wanted: set[str] = set()
    done = threading.Event()

    def other_process() -> None:
        probe = RedisSeenStore.from_url(redis_server.url, crawl_id)
        while not done.is_set() and len(wanted) < len(articles):
            claimed = probe.contains_many([url_fingerprint(u) for u in articles])
            fresh = [u for u, c in zip(articles, claimed, strict=True) if c and u not in wanted]
            if fresh:
                assert other.claim_many(fresh) == [False] * len(fresh)
                wanted.update(fresh)
            time.sleep(0.01)

    watcher = threading.Thread(target=other_process, daemon=True)
    watcher.start()
    # The correction must find every link wanted by the other process (what this test is about).
    worker = ScriptedWorker(crawl_env, home, lambda links: wanted >= set(links))
    worker.start()
    slow = {**SLOW, "NEARDUP_RULES": "off"}  # a duplicate's outlinks dropped
    crawler = crawl_env.crawler("slow", home, **slow)
    try:
        wait_all(crawl_env, [crawler], timeout=60)
    finally:
        worker.stop.set()
        done.set()
        watcher.join(5)
    log = crawl_env.log("slow", 10**6)
    fetched = {url for url in site_server.fetched() if "/articles/" in url}
    assert len(wanted) == 8, wanted
    assert wanted <= fetched, wanted - fetched  # nobody else would fetch them
    assert stats_line(log, "dedup/corrections") == 1
    assert stats_line(log, "dedup/requests_cancelled") == 0
    assert stats_line(log, "dedup/requests_kept_wanted_elsewhere") >= 5
    assert other.store.in_flight() == (0, 0)
