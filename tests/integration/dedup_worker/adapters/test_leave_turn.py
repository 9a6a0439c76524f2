"""The leave turn on a real redis-server and the 3-node cluster: one member of a group at a
time, the waiting one keeps polling, a turn is only given back by its holder, one that is never
given back lapses, and a Redis that is gone never blocks a stop."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from dedup_worker.adapters.redis_client import connect
from dedup_worker.adapters.redis_leave_turn import RedisLeaveTurn, leave_turn_key
from neardup.stack import RedisCluster, RedisServer, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis", "cluster"])
def client(request: pytest.FixtureRequest) -> Any:
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return connect(server.url)
    cluster: RedisCluster = request.getfixturevalue("redis_cluster")
    return connect(cluster.url, cluster=True)


def test_one_member_leaves_at_a_time_and_the_next_polls_meanwhile(client: Any) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    first, second = RedisLeaveTurn(client, "ns", group), RedisLeaveTurn(client, "ns", group)
    polls: list[float] = []
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def hold() -> None:
        with first(lambda: None):
            order.append("first in")
            inside.set()
            release.wait(10)
            order.append("first out")

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)

    def poll() -> None:
        polls.append(time.monotonic())
        if len(polls) == 5:
            release.set()  # the holder leaves once the second has polled a while
        time.sleep(0.01)

    with second(poll):
        order.append("second in")
    holder.join(10)
    assert order == ["first in", "first out", "second in"]
    assert len(polls) >= 5
    assert client.get(leave_turn_key("ns", group)) is None  # given back


def test_a_turn_is_given_back_only_by_its_holder_and_a_lost_one_lapses(client: Any) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    key = leave_turn_key("ns", group)
    client.set(key, "a worker that died holding it", px=300)
    started = time.monotonic()
    with RedisLeaveTurn(client, "ns", group)(lambda: time.sleep(0.02)):
        waited = time.monotonic() - started
        client.set(key, "someone else's", px=60_000)  # ours lapsed and another took it
    assert waited >= 0.2  # it waited for the dead holder's turn to lapse
    assert client.get(key) == b"someone else's"  # not deleted by the former holder


def test_a_member_leaves_anyway_when_redis_is_gone_or_the_wait_is_over(client: Any) -> None:
    group = f"g-{uuid.uuid4().hex[:8]}"
    client.set(leave_turn_key("ns", group), "held for good", px=60_000)
    started = time.monotonic()
    with RedisLeaveTurn(client, "ns", group, wait_s=0.3)(lambda: time.sleep(0.02)):
        assert time.monotonic() - started >= 0.3
    gone = connect(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    with RedisLeaveTurn(gone, "ns", group)(lambda: None):
        pass  # no exception: a stop never fails for want of a turn
