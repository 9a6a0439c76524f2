"""A spider stopped before the end (Ctrl-C, no ``JOBDIR``) keeps applying the decisions of the
pages it published until they are in or ``NEARDUP_STOP_GRACE`` passes: their links go to the
crawl's shared list judged (a duplicate's dropped), where undecided each one cost a later run
a fetch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from scrapy import Request
from scrapy.core.scheduler import Scheduler
from scrapy.exceptions import DontCloseSpider

from crawler.frontier import Held, PageKey
from crawler.judging import DecidedPage, Judgement
from crawler.regroup import LIKELY_DUPLICATE_META, group_meta, has_group
from crawler.scheduling import DecisionScheduler
from crawler.sharing import BUSY, WorkSharing, decode_request
from crawler.sharing_store import MemoryPeerStore
from dedup_worker.contract.messages import Decision, Verdict
from tests.unit.crawler.test_plugin_components import Plugin, requests


class Feed:
    """The decisions topic's feed, stood in: what the worker has decided so far."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []

    def drain(self, limit: int) -> list[Decision]:
        out, self.decisions = self.decisions[:limit], self.decisions[limit:]
        return out


class Loop:
    running = True


def _decision(plugin: Plugin, index: int, follow: bool) -> Decision:
    page = plugin.publisher.pages[index]
    return Decision(
        url=page.url, host=page.host, fetched_at=page.fetched_at, decided_at=1.0,
        verdict=Verdict.UNIQUE if follow else Verdict.NEAR_DUPLICATE, simhash="0" * 16,
        priority=0.5, follow_outlinks=follow, outlinks=page.outlinks if follow else (),
        duplicate_of=None if follow else "http://a.test/original",
    )  # fmt: skip


def _stopped(**settings: Any) -> tuple[Plugin, DecisionScheduler, Feed]:
    """A new page and a duplicate published, neither decided yet; then Ctrl-C."""
    plugin = Plugin(NEARDUP_RULES=False, **settings)
    plugin.session.links.sharing = WorkSharing(MemoryPeerStore(), "this")
    plugin.respond(requests("/new/1", "/new/2"), url="http://a.test/new")
    plugin.respond(requests("/dup/1", "/dup/2"), url="http://a.test/dup")
    scheduler = DecisionScheduler(plugin.crawler, plugin.session)
    scheduler.feed = feed = Feed()  # type: ignore[assignment]
    plugin.crawler.crawling = False
    return plugin, scheduler, feed


def _left(plugin: Plugin) -> list[str]:
    """What the stopped spider leaves to the crawl's shared list."""
    links = plugin.session.links
    links.leave_queue()
    links.leave_undecided()
    links.sharing.flush()  # type: ignore[union-attr]
    store = links.sharing.store  # type: ignore[union-attr]
    return sorted(decode_request(raw, plugin.crawler.spider).url for raw in store.shared)


def test_decisions_that_come_while_stopping_judge_the_links_left() -> None:
    plugin, scheduler, feed = _stopped()
    feed.decisions = [_decision(plugin, 0, follow=True), _decision(plugin, 1, follow=False)]
    scheduler._tick()
    assert plugin.session.links.ledger.outstanding == 0
    assert plugin.stat("dedup/decisions_applied_while_stopping") == 2
    # The new page's links wait in the queue and go claimed; the duplicate's are dropped.
    assert _left(plugin) == ["http://a.test/new/1", "http://a.test/new/2"]
    assert plugin.stat("dedup/undecided_left_to_the_crawl") in (None, 0)


def test_without_them_every_link_went_undecided() -> None:
    """The behaviour before: nothing applied once stopping (still so with a grace of 0)."""
    plugin, scheduler, feed = _stopped(NEARDUP_STOP_GRACE="0")
    feed.decisions = [_decision(plugin, 0, follow=True), _decision(plugin, 1, follow=False)]
    scheduler._tick()
    assert plugin.session.links.ledger.outstanding == 2
    assert len(_left(plugin)) == 4
    assert plugin.stat("dedup/undecided_left_to_the_crawl") == 4


def test_the_close_waits_for_the_decisions_owed_then_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugin, scheduler, feed = _stopped()
    scheduler._loop = Loop()  # type: ignore[assignment]
    arriving = [_decision(plugin, 0, follow=True), _decision(plugin, 1, follow=False)]
    pauses: list[float] = []

    async def pause(seconds: float) -> None:  # a poll interval: one decision comes, one poll
        pauses.append(seconds)
        feed.decisions.append(arriving.pop(0))
        scheduler._tick()

    monkeypatch.setattr("crawler.scheduling._pause", pause)
    asyncio.run(scheduler._await_decisions("shutdown"))
    assert len(pauses) == 2 and plugin.session.links.ledger.outstanding == 0
    assert plugin.stat("dedup/stop_grace_decided") == 2


def test_the_wait_ends_at_the_grace_when_a_decision_never_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugin, scheduler, _ = _stopped(NEARDUP_STOP_GRACE="0.3")
    scheduler._loop = Loop()  # type: ignore[assignment]
    now = [50.0]
    monkeypatch.setattr("crawler.scheduling.time.monotonic", lambda: now[0])

    async def pause(seconds: float) -> None:
        now[0] += 0.1

    monkeypatch.setattr("crawler.scheduling._pause", pause)
    asyncio.run(scheduler._await_decisions("shutdown"))
    assert plugin.session.links.ledger.outstanding == 2 and now[0] == pytest.approx(50.3)
    assert plugin.stat("dedup/stop_grace_decided") == 0


@pytest.mark.parametrize("reason", ["finished", "dedup_stalled"])
def test_no_wait_when_the_crawl_ended_or_the_workers_stalled(
    reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, scheduler, _ = _stopped()
    scheduler._loop = Loop()  # type: ignore[assignment]

    async def pause(seconds: float) -> None:
        raise AssertionError("no wait")

    monkeypatch.setattr("crawler.scheduling._pause", pause)
    asyncio.run(scheduler._await_decisions(reason))


def test_with_jobdir_the_resume_file_keeps_the_pages_instead(tmp_path: Any) -> None:
    plugin, scheduler, feed = _stopped(JOBDIR=str(tmp_path))
    plugin.session.links.budget.keep_deferred = True  # as spider_opened sets it with JOBDIR
    feed.decisions = [_decision(plugin, 0, follow=True)]
    scheduler._tick()
    assert plugin.session.links.ledger.outstanding == 2 and feed.decisions


class SampleUnanswered:
    """A judge holding a duplicate's outlink back while its sample is fetched."""

    def held_back(self) -> list[Any]:
        key = PageKey("http://a.test/dup", 1.0)
        return [(key, 1, 0.5, [Held("http://a.test/9", requests("/9")[0])])]


def _left_by_a_stopped_run(judge: Any, left: int) -> tuple[MemoryPeerStore, Plugin]:
    """The shared list after a run whose ``judge`` held a duplicate's outlinks back stopped,
    and that run."""
    first = Plugin()
    store = MemoryPeerStore()
    first.session.links.sharing = WorkSharing(store, "first run")
    first.session.links.judge = judge
    assert first.session.links.leave_undecided() == left
    first.session.links.sharing.flush()
    first.session.links.sharing.leave()  # the first run is over
    return store, first


def _taken() -> tuple[Plugin, MemoryPeerStore]:
    """A duplicate's outlink held back on a sample, left at a stop; the next run took it."""
    store, _ = _left_by_a_stopped_run(SampleUnanswered(), 1)
    second = Plugin()
    second.session.links.sharing = WorkSharing(store, "second run")
    assert second.session.links.take_shared() and not store.shared
    return second, store


def _idle_until(scheduler: DecisionScheduler, done: Callable[[], bool]) -> None:
    """Idle moments (the spider stays open) until ``done``: the shared list is looked at once
    more after the last peer left, then what waited for the idle moment goes."""
    for _ in range(3):
        with pytest.raises(DontCloseSpider):
            scheduler.spider_idle(scheduler.crawler.spider)
        if done():
            return


def test_a_held_back_outlink_left_at_a_stop_goes_out_at_the_taking_run_s_idle_moment() -> None:
    """Handed over undecided, it went out at once in the run that took it, before that run's
    pages taught the rule its sample was checking: a fetch each. It now waits for the idle
    moment (the gate, before each fetch, may skip it by then)."""
    second, _ = _taken()
    scheduler = DecisionScheduler(second.crawler, second.session)
    assert second.engine.crawled == []
    _idle_until(scheduler, lambda: bool(second.engine.crawled))
    assert [r.url for r in second.engine.crawled] == ["http://a.test/9"]
    assert LIKELY_DUPLICATE_META not in second.engine.crawled[0].meta
    assert second.stat("dedup/likely_duplicates_sent_at_idle") == 1
    scheduler.spider_idle(second.crawler.spider)  # then it may close


def test_a_taken_likely_duplicate_is_left_again_as_one_if_that_run_stops_first() -> None:
    second, store = _taken()
    links = second.session.links
    assert links.leave_queue() == 1
    links.sharing.flush()  # type: ignore[union-attr]
    left = [decode_request(raw, second.crawler.spider) for raw in store.shared]
    assert [(r.url, r.meta.get(LIKELY_DUPLICATE_META)) for r in left] == [("http://a.test/9", True)]


def test_a_spider_closed_otherwise_than_by_ctrl_c_applies_decisions_only() -> None:
    """``CLOSESPIDER_*`` closes with Scrapy still crawling: once ``spider_closed`` came, the
    poll only applies decisions (taking shared work or sending likely duplicates into a
    spider that downloads nothing more would hand them back unmarked)."""
    plugin, scheduler, feed = _stopped()
    plugin.crawler.crawling = True
    scheduler._spider_closing = True
    feed.decisions = [_decision(plugin, 0, follow=True)]
    plugin.session.links._likely_later.append(requests("/9")[0])
    scheduler._tick()
    assert plugin.stat("dedup/decisions_applied_while_stopping") == 1
    assert plugin.session.links._likely_later  # not sent: the close hands it over, marked


def test_a_stop_leaves_every_request_in_scrapy_s_queue_to_the_crawl() -> None:
    """Redirects, retries and seeds wait in Scrapy's scheduler without a decision having
    released them, so the cache of released links does not know them: claimed, they died
    with the memory queue. The close now takes the queue itself; a released one goes once."""
    plugin = Plugin(SCHEDULER_PRIORITY_QUEUE="scrapy.pqueues.ScrapyPriorityQueue")  # no downloader
    links = plugin.session.links
    store = MemoryPeerStore()
    links.sharing = WorkSharing(store, "this")
    scheduler = Scheduler.from_crawler(plugin.crawler)
    scheduler.open(plugin.crawler.spider)
    plugin.engine._slot = SimpleNamespace(scheduler=scheduler)  # type: ignore[attr-defined]
    plugin.respond(requests("/released"))
    plugin.decide(follow=True)
    redirected = Request("http://a.test/moved-here", meta={"redirect_urls": ["http://a.test/o"]})
    for request in (
        *plugin.engine.crawled,
        redirected,
        Request("http://a.test/r", dont_filter=True),
    ):
        assert scheduler.enqueue_request(request)
    assert links.leave_queue() == 3 and not len(scheduler)
    links.sharing.flush()
    left = sorted(decode_request(raw, plugin.crawler.spider).url for raw in store.shared)
    assert left == ["http://a.test/moved-here", "http://a.test/r", "http://a.test/released"]


class GroupWaiting:
    """A judge like the URL rules' one: a duplicate's group waits on its sample, and the page
    it duplicates is known; judged again, it follows its first request and drops the other."""

    def __init__(self) -> None:
        self.judged: list[DecidedPage] = []

    def held_back(self) -> list[Any]:
        held = [Held(f"http://a.test/{n}", requests(f"/{n}")[0]) for n in (8, 9)]
        return [(PageKey("http://a.test/dup", 1.0), 1, 0.5, held)]

    def keepers(self) -> dict[PageKey, str]:
        return {PageKey("http://a.test/dup", 1.0): "http://a.test/orig"}

    def judge(self, page: DecidedPage) -> Judgement:
        self.judged.append(page)
        return Judgement(follow=page.held[:1], drop=page.held[1:])


def test_a_group_left_at_a_stop_is_judged_again_at_the_taking_run_s_idle_moment() -> None:
    """Left unclaimed with its group; the run that takes it judges it again as its page's
    duplicate decision would have (with that run's evidence of the rewrite) before anything
    of it goes out: what the judge drops is never claimed nor fetched."""
    store, first = _left_by_a_stopped_run(GroupWaiting(), 2)
    urls = ["http://a.test/8", "http://a.test/9"]
    assert not any(first.session.links._seen().contains_many(urls))  # any link may claim them

    second = Plugin()
    links = second.session.links
    links.sharing = WorkSharing(store, "second run")
    links.judge = judge = GroupWaiting()  # type: ignore[assignment]
    scheduler = DecisionScheduler(second.crawler, second.session)
    assert links.take_shared() and second.engine.crawled == [] and judge.judged == []
    _idle_until(scheduler, lambda: bool(judge.judged))
    [page] = judge.judged
    assert page.key == PageKey("http://a.test/dup", 1.0) and page.duplicate
    assert page.decision.duplicate_of == "http://a.test/orig"
    assert [r.url for r in second.engine.crawled] == ["http://a.test/8"]
    assert links._seen().known_claimed("http://a.test/8")
    assert not links._seen().contains_many(["http://a.test/9"])[0]
    assert second.stat("dedup/likely_duplicates_judged_at_idle") == 2


class FailingGroupJudge(GroupWaiting):
    def judge(self, page: DecidedPage) -> Judgement:
        raise RuntimeError("the crawl's rule store is out of reach")


@pytest.mark.parametrize("judge", [FailingGroupJudge(), None], ids=["judging-fails", "no-rules"])
def test_a_group_that_cannot_be_judged_again_is_followed_not_lost(judge: Any) -> None:
    """Judged by a judge that forms no groups (the URL rules off: a duplicate's requests are
    all dropped), or by one that fails, the group would be lost: nothing else knows of it."""
    store, _ = _left_by_a_stopped_run(GroupWaiting(), 2)
    second = Plugin()
    links = second.session.links
    links.sharing = WorkSharing(store, "second run")
    if judge is not None:
        links.judge = judge
    scheduler = DecisionScheduler(second.crawler, second.session)
    assert links.take_shared()
    _idle_until(scheduler, lambda: bool(second.engine.crawled))
    assert sorted(r.url for r in second.engine.crawled) == ["http://a.test/8", "http://a.test/9"]
    assert links._seen().known_claimed("http://a.test/9")


def test_malformed_groups_are_not_groups() -> None:
    good = group_meta(PageKey("http://a.test/dup", 1.0), 1, 0.5, "http://a.test/orig")
    assert has_group(Request("http://a.test/1", meta={LIKELY_DUPLICATE_META: good}))
    for bad in ({**good, "keeper": ""}, {**good, "depth": "1"}, {**good, "priority": None}, True):
        assert not has_group(Request("http://a.test/1", meta={LIKELY_DUPLICATE_META: bad}))


class GroupUnsure(GroupWaiting):
    """A group judge that keeps a group out of its keepers (a sample waits on its counterpart:
    the group may have to be followed)."""

    def keepers(self) -> dict[PageKey, str]:
        return {}


def test_a_group_its_judge_leaves_out_of_its_keepers_is_followed_by_the_taker() -> None:
    store, first = _left_by_a_stopped_run(GroupUnsure(), 2)
    urls = ["http://a.test/8", "http://a.test/9"]
    assert all(first.session.links._seen().contains_many(urls))  # claimed, as before
    second = Plugin()
    links = second.session.links
    links.sharing = WorkSharing(store, "second run")
    links.judge = judge = GroupWaiting()  # type: ignore[assignment]
    scheduler = DecisionScheduler(second.crawler, second.session)
    assert links.take_shared()
    _idle_until(scheduler, lambda: bool(second.engine.crawled))
    assert sorted(r.url for r in second.engine.crawled) == urls and judge.judged == []


@pytest.mark.parametrize("grace", ["5", "0"])
def test_a_stopping_spider_keeps_beating_so_no_peer_takes_it_for_killed(grace: str) -> None:
    """Scrapy's close can outlast PEER_TIMEOUT (downloads in flight, then the grace): a
    silent process would have its journal taken over while it hands the same requests over
    itself, and they would be fetched twice."""
    plugin, scheduler, _ = _stopped(NEARDUP_STOP_GRACE=grace)
    clock = [1_000.0]
    store = MemoryPeerStore(lambda: clock[0])
    sharing = WorkSharing(store, "this", lambda: clock[0])
    plugin.session.links.sharing = sharing
    sharing.beat(BUSY)
    clock[0] += 40.0  # a long close
    scheduler._tick()
    assert store.peers["this"][1] == clock[0]  # beat again: alive to its peers


def _ticks_past_the_timeout(
    steps: list[tuple[float, float]], monkeypatch: pytest.MonkeyPatch
) -> bool:
    """A spider waiting for its two pages' decisions, the poll loop ticking after each step
    (seconds passed, of which seconds the whole process was stopped) and no decision coming:
    whether it closed as stalled."""
    plugin, scheduler, _ = _stopped()
    plugin.crawler.crawling = True
    plugin.engine.spider = plugin.crawler.spider
    closed: list[str] = []
    monkeypatch.setattr(scheduler, "_close", closed.append)
    now = [1_000.0]
    monkeypatch.setattr("crawler.scheduling.time.monotonic", lambda: now[0])
    plugin.session.links.last_progress = now[0]
    scheduler._tick()
    for passed, stopped in steps:
        now[0] += passed
        scheduler._stops.late(stopped)
        scheduler._tick()
    assert plugin.stat("dedup/scheduler_errors") is None  # each tick ran through
    return "dedup_stalled" in closed


def test_time_the_spider_did_not_run_does_not_count_as_the_workers_stalling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Paused past the decision timeout (Ctrl-Z), it looks at the decisions that came meanwhile
    before it judges the workers; it closed as ``dedup_stalled`` at once on resuming before. A
    reactor blocked as long (a Redis call waiting for a Redis that is down) is not a pause: the
    watching thread ran meanwhile."""
    timeout = Plugin().session.config.decision_timeout
    paused = [(0.05, 0.0), (timeout + 30, timeout + 29.9), (0.05, 0.0)]
    assert not _ticks_past_the_timeout(paused, monkeypatch)
    blocked = [(0.05, 0.0), (timeout + 30, 0.2), (0.05, 0.0)]
    assert _ticks_past_the_timeout(blocked, monkeypatch)
    assert _ticks_past_the_timeout([(0.05, 0.0)] * 3 + [(4.0, 0.0)] * 32, monkeypatch)


def test_the_watching_thread_measures_a_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    from crawler.process_stops import ProcessStops

    now, reads = [0.0], [0]

    def clock() -> float:
        reads[0] += 1
        return now[0]

    stops = ProcessStops(period=0.01, clock=clock)
    stops.start()
    try:
        deadline = time.monotonic() + 10  # a busy machine: the thread may start late
        while reads[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stops.take() <= 0.0  # woke on time (its clock stood still)
        now[0] += 40.0  # the process (its clock) jumped 40 s between two wake-ups
        while stops._longest < 39 and time.monotonic() < deadline + 10:
            time.sleep(0.01)
        assert 39.9 <= stops.take() <= 40.0 and stops.take() <= 0.0
    finally:
        stops.stop()
