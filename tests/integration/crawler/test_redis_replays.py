"""A crawl's Redis calls sent twice, against a real redis-server behind a relay that loses one
reply (``tests/support/cutting_proxy.py``): the server runs the command, the client never
hears back. The crawler's stores send a call that raised again themselves (the link scheduler
claims a failed poll's links at the next poll; ``Sharing.flush`` keeps its outbox), and
redis-py's cluster client sends the command again on a new connection by itself (its default
retry; a single server's client here gets the same retry, since the relay cannot stand
between a cluster client and the nodes it discovers).

Before reply keys, the second run answered differently: a claim that had succeeded came back
"claimed elsewhere" (nobody fetched the URL), a release un-claimed a link another process
wanted, a pop lost the requests it had taken, a push added its requests twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from crawler.redis_replies import SCRIPT_CHUNK, reply_prefix
from crawler.seen_redis import RedisSeenStore
from crawler.sharing_redis import RedisPeerStore
from dedup_worker.adapters.redis_client import BackendError
from dedup_worker.errors import BackendUnavailable
from neardup.stack import RedisServer
from tests.support.cutting_proxy import CuttingProxy

pytestmark = pytest.mark.integration

FP = bytes(range(16))
OTHER_FP = bytes(range(1, 17))
THIRD_FP = bytes(range(2, 18))


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[CuttingProxy]:
    relay = CuttingProxy(redis_server.port).start()
    yield relay
    relay.stop()


@pytest.fixture
def crawl_id() -> str:
    return f"replays-{uuid.uuid4().hex[:8]}"


def _resending(url: str) -> redis.Redis:
    """A client that sends a command again when its connection drops (the cluster client's
    default; a single server's client from a URL does not)."""
    return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 3))


def _seen(url: str, crawl_id: str, *, resend: bool = False) -> RedisSeenStore:
    if resend:
        return RedisSeenStore(_resending(url), crawl_id)
    return RedisSeenStore.from_url(url, crawl_id)  # the crawler's own


def _peers(url: str, crawl_id: str, *, resend: bool = False) -> RedisPeerStore:
    if resend:
        return RedisPeerStore(_resending(url), crawl_id)
    return RedisPeerStore.from_url(url, crawl_id)


def test_a_claim_whose_reply_was_lost_is_still_this_process_s(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    store, other = _seen(proxy.url, crawl_id, resend=True), _seen(redis_server.url, crawl_id)
    store.claim_many([b"w" * 16], [])  # the script is loaded: the cut reply is the claim's
    proxy.cut_next_reply()
    assert store.claim_many([FP], []) == [True]
    assert proxy.cut_replies == 1
    assert other.claim_many([FP], []) == [False]
    assert other.in_flight() == (2, 1)  # the warm-up and FP, which the other one wants


def test_a_filter_claim_whose_reply_was_lost_is_still_new(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    store, other = _seen(proxy.url, crawl_id, resend=True), _seen(redis_server.url, crawl_id)
    store.add_many([b"w" * 16])
    proxy.cut_next_reply()
    assert store.add_many([FP, FP]) == [True, False]
    assert proxy.cut_replies == 1
    assert other.add_many([FP]) == [False]


def test_a_release_whose_reply_was_lost_keeps_a_wanted_link(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    store, other = _seen(proxy.url, crawl_id, resend=True), _seen(redis_server.url, crawl_id)
    store.release_unwanted(b"w" * 16)
    assert store.claim_many([FP], []) == [True]
    assert other.claim_many([FP], []) == [False]  # wanted elsewhere: FP must be fetched
    proxy.cut_next_reply()
    assert store.release_unwanted(FP) is False  # so it stays claimed, and this one fetches it
    assert proxy.cut_replies == 1
    assert other.contains_many([FP]) == [True]


def test_a_removal_resent_after_another_claim_leaves_that_claim(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    store, other = _seen(proxy.url, crawl_id, resend=True), _seen(redis_server.url, crawl_id)
    store.remove(b"w" * 16)
    assert store.claim_many([FP], []) == [True]
    proxy.cut_next_reply()
    proxy.before_resend = lambda: other.claim_many([FP], [])  # claimed in between
    store.remove(FP)
    assert proxy.cut_replies == 1
    assert other.contains_many([FP]) == [True]  # the resend did not undo the other's claim


def test_a_pop_whose_reply_was_lost_gives_the_requests_it_took(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    taker, giver = _peers(proxy.url, crawl_id, resend=True), _peers(redis_server.url, crawl_id)
    taker.pop(1)
    giver.push([b"r1", b"r2", b"r3", b"r4", b"r5"])
    proxy.cut_next_reply()
    assert taker.pop(3) == [b"r1", b"r2", b"r3"]
    assert proxy.cut_replies == 1
    assert giver.pop(10) == [b"r4", b"r5"]


def test_a_push_whose_reply_was_lost_adds_its_requests_once(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    giver, taker = _peers(proxy.url, crawl_id, resend=True), _peers(redis_server.url, crawl_id)
    giver.push([b"r0"])
    proxy.cut_next_reply()
    giver.push([b"r1", b"r2"])
    assert proxy.cut_replies == 1
    assert taker.pop(10) == [b"r0", b"r1", b"r2"]


def test_a_push_of_several_calls_whose_first_reply_was_lost_adds_each_request_once(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    giver, taker = _peers(proxy.url, crawl_id, resend=True), _peers(redis_server.url, crawl_id)
    queue = [b"r%d" % i for i in range(2 * SCRIPT_CHUNK + 3)]  # three script calls
    giver.push([b"w"])
    proxy.cut_next_reply()
    giver.push(queue)
    assert proxy.cut_replies == 1
    assert taker.pop(len(queue) + 2) == [b"w", *queue]


def test_a_claim_that_raised_is_sent_again_when_its_links_are_asked_again(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    """The crawler's client does not send a command again: the lost reply raises. Asked again
    for one of its links (the link scheduler's next poll), the store sends the failed call
    again first, with its reply key, and gets its answer; what it claimed that nobody asks
    for again is un-claimed."""
    seen, other = _seen(proxy.url, crawl_id), _seen(redis_server.url, crawl_id)
    seen.claim_many([b"w" * 16], [])
    proxy.cut_next_reply()
    with pytest.raises(BackendUnavailable):
        seen.claim_many([FP, OTHER_FP], [b"w" * 16])
    assert seen.claim_many([THIRD_FP], []) == [True]  # other links: the failed call waits
    assert other.contains_many([FP, OTHER_FP]) == [True, True]  # it ran
    assert seen.claim_many([FP], []) == [True]
    assert other.contains_many([FP, OTHER_FP]) == [True, False]  # nobody asked: un-claimed
    assert other.in_flight() == (2, 0)  # the warm-up went out with the failed call


def test_a_push_of_several_calls_refused_midway_adds_each_request_once_when_sent_again(
    redis_server: RedisServer, crawl_id: str
) -> None:
    """The second of three calls refused (an error reply, e.g. Redis out of memory): the
    outbox is pushed again by the next flush, and the first call, which ran, answers from its
    kept reply instead of adding its requests a second time."""
    giver, taker = _peers(redis_server.url, crawl_id), _peers(redis_server.url, crawl_id)
    queue = [b"r%d" % i for i in range(2 * SCRIPT_CHUNK + 3)]
    call = giver._replies.call
    made: list[int] = []

    def refusing_the_second(*args: Any) -> Any:
        made.append(1)
        if len(made) == 2:
            raise redis.exceptions.ResponseError("OOM command not allowed")
        return call(*args)

    giver._replies.call = refusing_the_second  # type: ignore[method-assign]
    with pytest.raises(BackendError):
        giver.push(queue)
    giver._replies.call = call  # type: ignore[method-assign]
    giver.push(queue)
    assert taker.pop(len(queue) + 1) == queue


@pytest.mark.parametrize("lost", [2, 70])
def test_a_claim_of_several_calls_that_failed_midway_answers_for_each_when_asked_again(
    redis_server: RedisServer, crawl_id: str, lost: int
) -> None:
    """A claim goes SCRIPT_CHUNK fingerprints a call. When a later call's reply is lost, the
    earlier calls' claims are this process's too: asked again (the next poll), each gets its
    call's kept answer, not "claimed elsewhere" (then nobody would fetch it), however many
    calls the claim made (more than the 64 failed calls a store keeps)."""
    seen, other = _seen(redis_server.url, crawl_id), _seen(redis_server.url, crawl_id)
    fps = [b"%016d" % i for i in range((lost - 1) * SCRIPT_CHUNK + 10)]  # the last call's lost
    call = seen._replies.call
    made: list[int] = []

    def losing_a_reply(*args: Any) -> Any:
        reply = call(*args)
        made.append(1)
        if len(made) == lost:
            raise redis.exceptions.ConnectionError("the reply was lost")
        return reply

    seen._replies.call = losing_a_reply  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable):
        seen.claim_many(fps, [])
    seen._replies.call = call  # type: ignore[method-assign]
    assert seen.claim_many(fps, []) == [True] * len(fps)
    assert other.claim_many(fps[:1] + fps[-1:], []) == [False, False]


def test_a_claim_that_raised_before_it_ran_runs_when_asked_again(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    seen, other = _seen(proxy.url, crawl_id), _seen(redis_server.url, crawl_id)
    seen.add_many([b"w" * 16])
    proxy.refusing = True
    proxy.drop_connections()
    with pytest.raises(BackendUnavailable):
        seen.add_many([FP])
    proxy.refusing = False
    assert other.contains_many([FP]) == [False]
    assert seen.add_many([FP, FP]) == [True, False]


def test_a_push_or_pop_that_raised_is_sent_again_by_the_store(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    peers, taker = _peers(proxy.url, crawl_id), _peers(redis_server.url, crawl_id)
    peers.pop(1)
    proxy.cut_next_reply()
    with pytest.raises(BackendUnavailable):
        peers.push([b"r1", b"r2"])
    peers.push([b"r1", b"r2", b"r3"])  # Sharing.flush sends its outbox again, then the new
    proxy.cut_next_reply()
    with pytest.raises(BackendUnavailable):
        peers.pop(2)
    assert peers.pop(1) == [b"r1"]  # no more than asked now: r2 comes with the next pop
    assert taker.pop(10) == [b"r3"]
    assert peers.pop(5) == [b"r2"]


def test_a_pop_that_raised_gives_back_what_it_took_when_the_store_closes(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    peers, giver = _peers(proxy.url, crawl_id), _peers(redis_server.url, crawl_id)
    peers.pop(1)
    giver.push([b"r1", b"r2", b"r3"])
    proxy.cut_next_reply()
    with pytest.raises(BackendUnavailable):
        peers.pop(2)
    peers.close()
    assert giver.pop(10) == [b"r1", b"r2", b"r3"]

    peers = _peers(proxy.url, crawl_id)  # a resent pop's extra, unused, goes back too
    giver.push([b"r1", b"r2", b"r3"])
    proxy.cut_next_reply()
    with pytest.raises(BackendUnavailable):
        peers.pop(2)
    assert peers.pop(1) == [b"r1"]
    peers.close()
    assert giver.pop(10) == [b"r2", b"r3"]


def test_failed_claims_nobody_asks_for_again_are_undone_as_the_store_closes(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    seen, other = _seen(proxy.url, crawl_id), _seen(redis_server.url, crawl_id)
    seen.claim_many([b"w" * 16], [])
    proxy.cut_next_reply()
    with pytest.raises(BackendUnavailable):
        seen.claim_many([FP], [])
    seen.close()
    assert other.claim_many([FP], []) == [True]  # nobody here would have fetched it


def test_a_filter_claim_that_raised_answers_an_outlink_claim_of_its_url(
    proxy: CuttingProxy, redis_server: RedisServer, crawl_id: str
) -> None:
    """Both answer whether this process claimed the URL: a redirect target claimed by the
    filter, then linked from a page."""
    seen, other = _seen(proxy.url, crawl_id), _seen(redis_server.url, crawl_id)
    seen.add_many([b"w" * 16])
    proxy.cut_next_reply()
    with pytest.raises(BackendUnavailable):
        seen.add_many([FP])
    assert seen.claim_many([FP], []) == [True]
    assert other.claim_many([FP], []) == [False]


@pytest.mark.parametrize("name", ["plain", "with a space"])
def test_answered_calls_leave_no_reply_behind(redis_server: RedisServer, name: str) -> None:
    """A crawl id may hold spaces: only the keys' hex digits travel to be deleted."""
    crawl_id = f"{name} {uuid.uuid4().hex[:8]}"
    seen, peers = _seen(redis_server.url, crawl_id), _peers(redis_server.url, crawl_id)
    for n in range(5):
        seen.claim_many([bytes([n]) * 16], [])
        seen.add_many([bytes([n + 100]) * 16])
        peers.push([b"r"])
        peers.pop(1)
    client = redis_server.client()
    kept = list(client.scan_iter(match=reply_prefix(crawl_id) + "*"))
    # Each store's last reply waits for its next call; each lives a day at most.
    assert len(kept) == 2
    assert all(0 < client.ttl(key) <= 86_400 for key in kept)
