"""Work sharing between a crawl's processes (crawler.sharing): when a busy process hands links
over, when an idle one waits for its peers or closes, and requests through the shared list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import scrapy

from crawler.sharing import (
    BEAT_EVERY,
    BUSY,
    GIVE_PER_BEAT,
    HUNGRY,
    KEEP_LOCAL,
    LOOK_EVERY,
    PEER_TIMEOUT,
    SILENT_AFTER,
    TAKE_AT_ONCE,
    WorkSharing,
    decode_request,
    encode_request,
)
from crawler.sharing_store import MemoryPeerStore
from crawler.spider import NeardupSpider


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _pair() -> tuple[WorkSharing, WorkSharing, Clock]:
    clock = Clock()
    store = MemoryPeerStore(clock)
    return WorkSharing(store, "busy", clock), WorkSharing(store, "idle", clock), clock


def _spider() -> NeardupSpider:
    return NeardupSpider(seeds="http://a.test/")


def _request(url: str) -> scrapy.Request:
    return _spider().page_request(url, depth=2)


def test_a_busy_process_hands_links_over_only_to_a_hungry_peer_and_keeps_its_own_queue() -> None:
    busy, idle, clock = _pair()
    busy.beat(BUSY)
    assert not busy.gives(queued=KEEP_LOCAL * 10)  # nobody is hungry
    idle.beat(HUNGRY)
    assert not busy.gives(queued=KEEP_LOCAL * 10)  # not seen before its next beat
    clock.now += BEAT_EVERY
    assert busy.due()
    busy.beat(BUSY)
    assert busy.gives(queued=KEEP_LOCAL)
    assert not busy.gives(queued=KEEP_LOCAL - 1)  # too little queued here to give any away


def test_at_most_a_batch_per_hungry_peer_is_handed_over_between_two_beats() -> None:
    busy, idle, _ = _pair()
    idle.beat(HUNGRY)
    busy.beat(BUSY)
    spider = _spider()
    given = 0
    while busy.gives(queued=KEEP_LOCAL):
        assert busy.hand_over(_request(f"http://a.test/{given}"), spider)
        given += 1
    assert given == GIVE_PER_BEAT
    assert busy.flush() == GIVE_PER_BEAT
    assert busy.flush() == 0
    taken = idle.take(None, spider)
    assert [r.url for r in taken] == [f"http://a.test/{n}" for n in range(TAKE_AT_ONCE)]


def _stays_open(sharing: WorkSharing, room: int | None = None) -> bool:
    """An idle check as the scheduler makes it: take what was handed over, else wait?"""
    return bool(sharing.take(room, _spider())) or sharing.waits_for_peers(room)


def test_an_idle_process_waits_while_a_peer_is_busy_and_not_for_a_peer_gone_silent() -> None:
    busy, idle, clock = _pair()
    busy.beat(BUSY)
    assert _stays_open(idle)
    assert idle.state == HUNGRY
    clock.now += PEER_TIMEOUT + 1  # the busy process was killed: it no longer beats
    assert _stays_open(idle)  # its beat shows nobody busy: one more look at the list
    assert not _stays_open(idle)


def test_an_idle_process_with_no_place_left_in_its_budget_does_not_wait() -> None:
    busy, idle, _ = _pair()
    busy.beat(BUSY)
    assert not idle.waits_for_peers(room=0)
    assert idle.waits_for_peers(room=3)


def test_two_idle_processes_do_not_wait_for_each_other() -> None:
    first, second, _ = _pair()
    first.beat(HUNGRY)
    assert _stays_open(second)  # its first beat came after its look at the list: once more
    assert not _stays_open(second)
    assert not _stays_open(first)  # it beat before it looked


def test_a_process_takes_no_more_than_its_budget_has_places_for() -> None:
    busy, idle, _ = _pair()
    spider = _spider()
    urls = [f"http://a.test/{n}" for n in range(5)]
    busy.store.push([encode_request(_request(url), spider) or b"" for url in urls])
    assert [r.url for r in idle.take(2, spider)] == ["http://a.test/0", "http://a.test/1"]
    assert idle.take(0, spider) == []
    assert len(idle.take(None, spider)) == 3


def test_an_empty_shared_list_is_looked_at_again_only_after_a_while() -> None:
    busy, idle, clock = _pair()
    spider = _spider()
    assert idle.take(None, spider) == []
    busy.store.push([encode_request(_request("http://a.test/x"), spider) or b""])
    assert idle.take(None, spider) == []  # looked just now
    clock.now += LOOK_EVERY
    assert [r.url for r in idle.take(None, spider)] == ["http://a.test/x"]


def test_a_request_crosses_the_shared_list_whole() -> None:
    spider = _spider()
    request = _request("http://a.test/p?q=1")
    request = request.replace(
        priority=42, headers={"Referer": "http://a.test/é"}, meta={**request.meta, "k": [1, "v"]}
    )
    encoded = encode_request(request, spider)
    assert encoded is not None
    back = decode_request(encoded, spider)
    assert (back.url, back.priority, back.method) == (request.url, 42, "GET")
    assert back.callback == spider.parse and back.errback == spider.on_error
    assert back.meta == request.meta
    assert back.headers.getlist("Referer") == request.headers.getlist("Referer")


def test_a_request_that_cannot_be_json_stays_with_its_process() -> None:
    spider = _spider()
    busy, idle, _ = _pair()
    idle.beat(HUNGRY)
    busy.beat(BUSY)
    odd: Any = _request("http://a.test/odd").replace(meta={"object": object()})
    assert encode_request(odd, spider) is None
    assert not busy.hand_over(odd, spider)
    foreign = scrapy.Request("http://a.test/f", callback=lambda r: None)
    assert encode_request(foreign, spider) is None
    assert busy.flush() == 0


def test_a_process_whose_budget_is_spent_gives_what_it_could_not_send_to_any_live_peer() -> None:
    spent, peer, clock = _pair()
    spent.beat(BUSY)
    assert not spent.gives(queued=0, spent=True)  # alone in the crawl: nobody would take it
    peer.beat(BUSY)  # busy, not hungry: it takes the link once it is idle
    clock.now += BEAT_EVERY
    spent.beat(BUSY)
    assert not spent.gives(queued=KEEP_LOCAL)
    assert spent.gives(queued=0, spent=True)
    clock.now += PEER_TIMEOUT + 1
    spent.beat(BUSY)  # the peer stopped beating
    assert not spent.gives(queued=0, spent=True)


def test_an_idle_process_looks_once_more_after_the_beat_that_shows_the_busy_peer_gone() -> None:
    """The last busy peer hands its links over and leaves between two looks at the list: the
    beat that shows it gone does not close the idle process before it looked again."""
    busy, idle, clock = _pair()
    spider = _spider()
    busy.beat(BUSY)
    assert idle.take(None, spider) == []
    assert idle.waits_for_peers(room=None)  # the busy peer may still hand links over
    clock.now += BEAT_EVERY - 0.125  # (steps exact in binary: the beat is due to the bit)
    assert idle.take(None, spider) == []  # looks: still empty
    clock.now += 0.0625
    busy.hand_over(_request("http://a.test/last"), spider)
    busy.flush()
    busy.leave()
    clock.now += 0.0625  # the beat is due; the last look is too recent to look again
    assert idle.due() and LOOK_EVERY > 0.125
    assert idle.take(None, spider) == []
    assert idle.waits_for_peers(room=None)  # no busy peer, but the list was seen before that
    assert [r.url for r in idle.take(None, spider)] == ["http://a.test/last"]
    assert idle.take(None, spider) == []
    assert not idle.waits_for_peers(room=None)  # looked after the beat: nothing left, closes


class FailingStore(MemoryPeerStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    def push(self, requests: Sequence[bytes]) -> None:
        if self.fail:
            raise ConnectionError("Redis is restarting")
        super().push(requests)


def test_links_whose_hand_over_fails_are_kept_for_the_next_flush() -> None:
    store, spider = FailingStore(), _spider()
    busy = WorkSharing(store, "busy")
    WorkSharing(store, "idle").beat(HUNGRY)
    busy.beat(BUSY)
    busy.hand_over(_request("http://a.test/1"), spider)
    with pytest.raises(ConnectionError):
        busy.flush()
    busy.hand_over(_request("http://a.test/2"), spider)
    store.fail = False
    assert busy.flush() == 2
    assert [decode_request(raw, spider).url for raw in store.shared] == [
        "http://a.test/1",
        "http://a.test/2",
    ]


def test_an_entry_a_process_cannot_read_costs_only_itself() -> None:
    busy, idle, _ = _pair()
    spider = _spider()
    good = encode_request(_request("http://a.test/ok"), spider) or b""
    busy.store.push([b"{not json", good, b'{"url": "http://a.test/no-headers"}'])
    assert [r.url for r in idle.take(None, spider)] == ["http://a.test/ok"]
    assert idle.unreadable == 2


def test_a_process_beats_on_its_own_timer_and_ages_its_peers_by_the_stores_clock() -> None:
    """Its beats are paced by a monotonic timer (an NTP step of the wall clock must not stop
    them: the peers would take it for dead); peers' ages come from the store's one clock, so
    processes on machines whose clocks disagree still see each other alive."""
    store_clock, busy_timer, idle_timer = Clock(), Clock(), Clock()
    store = MemoryPeerStore(store_clock)
    busy, idle = WorkSharing(store, "busy", busy_timer), WorkSharing(store, "idle", idle_timer)
    busy.beat(BUSY)
    assert not busy.due()
    busy_timer.now += BEAT_EVERY
    assert busy.due()
    store_clock.now += PEER_TIMEOUT  # the store's clock alone says how old a beat is
    assert _stays_open(idle)  # the busy beat is PEER_TIMEOUT old: still alive
    store_clock.now += 1
    idle_timer.now += BEAT_EVERY
    assert _stays_open(idle)  # its beat shows nobody busy, after its look: one more look
    assert not _stays_open(idle)


class JournalStore(MemoryPeerStore):
    """Journals as Redis keeps them (every entry still in flight here)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.journals: dict[str, dict[bytes, bytes]] = {}

    def pop(self, count: int, token: str | None = None) -> list[bytes]:
        taken = super().pop(count)
        if token is not None:  # each under itself, as the Redis store's pop files them
            self.journals.setdefault(token, {}).update((raw, raw) for raw in taken)
        return taken

    def remember(self, token: str, requests: Mapping[bytes, bytes]) -> None:
        journal = self.journals.setdefault(token, {})
        journal.update(requests)
        for raw in requests.values():
            journal.pop(raw, None)

    def forget(self, token: str, fingerprints: Sequence[bytes]) -> None:
        for fp in fingerprints:
            self.journals.get(token, {}).pop(fp, None)

    def owes(self, token: str) -> int:
        return len(self.journals.get(token, {}))

    def take_over(self, token: str, timeout: float, taker: str = "", state: str = "") -> int:
        if super().take_over(token, timeout) < 0:
            return -1
        moved = list(self.journals.pop(token, {}).values())
        self.push(moved)
        return len(moved)


def _journaling(store: JournalStore, token: str, clock: Clock) -> WorkSharing:
    return WorkSharing(store, token, clock, fingerprint=lambda r: r.url.encode())


def test_a_killed_processs_journal_goes_to_an_idle_peer_once_its_beat_ages_out() -> None:
    """Killed while idle (its last beat HUNGRY) with requests claimed: an idle peer waits for
    its beat to age out, then takes its journal over and fetches what it owed."""
    clock, spider = Clock(), _spider()
    store = JournalStore(clock)
    killed, idle = _journaling(store, "killed", clock), _journaling(store, "idle", clock)
    killed.beat(HUNGRY)
    store.remember("killed", {b"x": encode_request(_request("http://a.test/owed"), spider) or b""})
    idle.beat(HUNGRY)
    clock.now += SILENT_AFTER + 1
    assert _stays_open(idle) and _stays_open(idle)  # not for a HUNGRY peer, but a silent one
    clock.now += PEER_TIMEOUT  # that owes
    idle.beat(HUNGRY)
    assert idle.taken_from_killed == 1 and store.owes("killed") == 0
    assert [r.url for r in idle.take(None, spider)] == ["http://a.test/owed"]
    assert store.owes("idle") == 1  # in the taker's journal now, until it goes out
    assert not _stays_open(idle) or not _stays_open(idle)


def test_what_a_process_takes_is_journaled_as_it_is_taken() -> None:
    """Its pop journals what it takes (the store writes each request under itself in the
    same step), so a kill before the requests are filed under their fingerprints loses
    none; once filed, each is there once."""
    clock, spider = Clock(), _spider()
    store = JournalStore(clock)
    taker = _journaling(store, "taker", clock)
    raw = encode_request(_request("http://a.test/shared"), spider) or b""
    store.push([raw])
    popped: list[str | None] = []
    pop = store.pop
    store.pop = lambda count, token=None: popped.append(token) or pop(count, token)  # type: ignore[method-assign]
    assert [r.url for r in taker.take(None, spider)] == ["http://a.test/shared"]
    assert popped == ["taker"]
    assert store.journals["taker"] == {b"http://a.test/shared": raw}
    plain = WorkSharing(store, "plain", clock)  # a process without a journal (no Redis)
    store.push([raw])
    assert plain.take(None, spider) and popped == ["taker", None]


def test_what_the_pop_journaled_and_is_not_sent_leaves_the_journal() -> None:
    """A request this spider cannot read is dropped, and of two copies of one request only
    one is filed under its fingerprint: neither stays in the journal under itself, where a
    take-over after every kill would hand it on again."""
    clock, spider = Clock(), _spider()
    store = JournalStore(clock)
    taker = _journaling(store, "taker", clock)
    first = encode_request(_request("http://a.test/x"), spider) or b""
    copy = first.replace(b'"priority":0', b'"priority":1')
    assert copy != first
    store.push([b"not a request", first, copy])
    assert [r.url for r in taker.take(None, spider)] == ["http://a.test/x"] * 2
    assert store.journals["taker"] == {b"http://a.test/x": copy} and taker.unreadable == 1


def test_requests_handed_over_leave_the_givers_journal() -> None:
    clock, spider = Clock(), _spider()
    store = JournalStore(clock)
    busy, idle = _journaling(store, "busy", clock), _journaling(store, "idle", clock)
    store.remember("busy", {b"http://a.test/1": b"r1", b"http://a.test/2": b"r2"})
    idle.beat(HUNGRY)
    busy.beat(BUSY)
    assert busy.gives(queued=KEEP_LOCAL) and busy.hand_over(_request("http://a.test/1"), spider)
    assert busy.flush() == 1
    assert store.journals["busy"] == {b"http://a.test/2": b"r2"}
    assert busy.taken_from_killed == 0 and idle.taken_from_killed == 0


def test_two_idle_processes_with_stale_journals_do_not_wait_for_each_other() -> None:
    """A live idle process beats at every look, so its peers never find it silent, whatever
    its journal still holds (an entry un-claimed, refused on the way out, ...)."""
    clock = Clock()
    store = JournalStore(clock)
    first, second = _journaling(store, "first", clock), _journaling(store, "second", clock)
    store.remember("first", {b"a": b"ra"})
    store.remember("second", {b"b": b"rb"})
    first.beat(HUNGRY)
    for _ in range(3):  # at the pace of their looks
        clock.now += LOOK_EVERY
        second_open, first_open = _stays_open(second), _stays_open(first)
    assert not second_open and not first_open
    assert first.taken_from_killed == second.taken_from_killed == 0


def test_a_process_cut_off_as_long_as_its_peers_takes_none_of_them_over() -> None:
    """Redis out of reach for everyone for longer than PEER_TIMEOUT: every row has aged, but
    the peers are alive (their queues would be fetched twice)."""
    clock = Clock()
    store = JournalStore(clock)
    first, second = _journaling(store, "first", clock), _journaling(store, "second", clock)
    first.beat(BUSY)
    second.beat(BUSY)
    store.remember("first", {b"a": b"ra"})
    clock.now += PEER_TIMEOUT + 5  # neither could beat meanwhile
    second.beat(BUSY)
    assert second.taken_from_killed == 0 and store.owes("first") == 1
    clock.now += PEER_TIMEOUT - 1  # a live peer has beaten by now
    second.beat(BUSY)
    assert second.taken_from_killed == 0
    clock.now += 2  # first is still silent (killed, say): now it is taken over
    second.beat(BUSY)
    assert second.taken_from_killed == 1 and store.owes("first") == 0
