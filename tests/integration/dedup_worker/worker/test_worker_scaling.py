"""Scaling the way users do it: the same command started again, with ONE environment (no
``NEARDUP_WORKER_ID``), then killed, restarted, paused, or restarted in turn while pages flow.

Every run ends checked against the earliest-wins oracle (every page one final decision, no
near-duplicate pair both suppressed). Leases are short here (ttl 4 s, renewed every 0.5 s) so a
dead worker's slot is fenced within seconds; waits are on what the logs, the slot table and the
decisions topic show, with generous bounds.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from dedup_worker.adapters.redis_client import connect
from dedup_worker.adapters.redis_slots import RedisSlotStore
from dedup_worker.contract.messages import Decision, Verdict
from dedup_worker.core.slots import Taken
from neardup.stack import RedisCluster, RedisServer
from tests.support.flow_helpers import Flow, wait_for_log
from tests.support.worker_helpers import (
    DecisionReader,
    Setup,
    WorkerProcess,
    check_against_oracle,
    family_stream,
    page,
    produce_pages,
    text,
)

pytestmark = pytest.mark.integration

TTL_MS, RENEW_MS = 4000, 500
ASSIGNED = r"partitions assigned: \['"
STOPPED_BY_ERROR = "worker stopped by an error"


def one_environment(s: Setup) -> dict[str, str]:
    """The test's environment as every process gets it: no worker id, short leases."""
    env = {k: v for k, v in s.env.items() if k != "NEARDUP_WORKER_ID"}
    return env | {"NEARDUP_LEASE_TTL_MS": str(TTL_MS), "NEARDUP_LEASE_RENEW_MS": str(RENEW_MS)}


def slot_table(s: Setup) -> RedisSlotStore:
    config = s.config
    client = connect(config.redis_url, cluster=config.redis_cluster)
    return RedisSlotStore(client, config.index_namespace, config.group_id, config.worker_slots)


def slots_taken(worker: WorkerProcess) -> list[int]:
    return [int(slot) for slot in re.findall(r"took worker slot (\d+)", worker.full_log())]


def start(spawn: Callable[..., WorkerProcess], env: dict[str, str], n: int) -> list[WorkerProcess]:
    workers = [spawn(env) for _ in range(n)]
    for worker in workers:
        wait_for_log(worker, ASSIGNED, timeout=120)
    return workers


def fenced(slot: int) -> str:
    """Log lines of the two ways a dead slot gets fenced: a live worker's fencing thread, or a
    starting worker taking the lapsed slot (its producer's initialisation fences it)."""
    return rf"fenced and freed worker slot {slot}\b|took worker slot {slot}: .*lease lapsed"


def wait_until(what: str, done: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def assigned_partitions(worker: WorkerProcess) -> set[int]:
    """The partitions of the worker's latest assignment, from its log."""
    assignments = re.findall(r"partitions assigned: (\[.*\])$", worker.full_log(), re.M)
    return {int(p) for p in re.findall(r"\[(\d+)\]'", assignments[-1])} if assignments else set()


def stop_all(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        assert worker.terminate() == 0, worker.log_text()


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_workers_started_from_one_environment_all_work(
    backend: str,
    setup: Callable[..., Setup],
    spawn: Callable[..., WorkerProcess],
    request: pytest.FixtureRequest,
) -> None:
    """Three processes, one environment: three slots, no fencing, the oracle's answer, and
    each slot freed on the way out."""
    if backend == "redis":
        url, cluster = request.getfixturevalue("redis_server").url, "0"
    else:
        nodes: RedisCluster = request.getfixturevalue("redis_cluster")
        url, cluster = nodes.url, "1"
    s = setup(redis_url=url, redis_cluster=cluster, partitions=6, batch_max_records="20")
    pages = family_stream(seed=21, families=80, members=4, singles=300)
    workers = start(spawn, one_environment(s), 3)
    assert sorted(slot for worker in workers for slot in slots_taken(worker)) == [0, 1, 2]
    table = slot_table(s)
    leases = table.leases()
    assert sorted(leases) == [0, 1, 2] and not any(lease.lapsed for lease in leases.values())
    reader = s.reader()
    produce_pages(s.bootstrap, s.pages, pages)
    reader.wait_for_pages(pages, timeout=180)
    reader.settle(1.5)
    stop_all(workers)
    reader.close()
    assert table.leases() == {}  # each worker freed its slot: nothing is open under its id
    for worker in workers:
        assert "FENCED" not in worker.full_log()
    assert check_against_oracle(reader.decisions, pages) > 150


def test_a_killed_worker_restarted_from_the_same_environment(
    setup: Callable[..., Setup], spawn: Callable[..., WorkerProcess], redis_server: RedisServer
) -> None:
    """SIGKILL one of three mid-stream and start the same command again: the restarted worker
    takes a free slot, the dead one's slot is fenced once its lease lapses, nothing stops."""
    s = setup(redis_url=redis_server.url, partitions=6, batch_max_records="10")
    env = one_environment(s)
    workers = start(spawn, env, 3)
    reader = s.reader()
    flow = Flow(s.bootstrap, s.pages, family_stream(seed=22, families=300, members=4, singles=1200))
    reader.read_until(lambda records: len(records) >= 150, timeout=120)
    victim = workers[1]
    dead_slot = slots_taken(victim)[-1]
    victim.kill()
    workers[1] = spawn(env)
    wait_for_log(workers[1], ASSIGNED, timeout=120)
    wait_until(
        f"slot {dead_slot} is fenced",
        lambda: any(re.search(fenced(dead_slot), w.full_log()) for w in workers),
    )
    assert flow.flowing, "the stream ended before the restart; make it longer"
    pages = flow.stop()
    reader.wait_for_pages(pages, timeout=180)
    reader.settle(1.5)
    stop_all(workers)
    reader.close()
    assert not any(STOPPED_BY_ERROR in w.full_log() for w in workers)
    assert check_against_oracle(reader.decisions, pages) > 20


def test_a_killed_worker_not_restarted_its_partitions_move_and_its_slot_is_fenced(
    setup: Callable[..., Setup], spawn: Callable[..., WorkerProcess], redis_server: RedisServer
) -> None:
    """SIGKILL one of three in a backlog of small batches (a transaction is open most of the
    time): the two others take its partitions and one of them fences its slot, so no
    read_committed reader waits behind a transaction it left open; every page is decided."""
    s = setup(redis_url=redis_server.url, partitions=6, batch_max_records="10")
    workers = start(spawn, one_environment(s), 3)
    reader = s.reader()
    flow = Flow(s.bootstrap, s.pages, family_stream(seed=23, families=300, members=4, singles=1200))
    reader.read_until(lambda records: len(records) >= 150, timeout=120)
    victim = workers.pop(1)
    dead_slot = slots_taken(victim)[-1]
    victim.kill()
    wait_until(
        f"slot {dead_slot} is fenced",
        lambda: any(re.search(fenced(dead_slot), w.full_log()) for w in workers),
    )
    wait_until(
        "the survivors own every partition",
        lambda: set().union(*(assigned_partitions(w) for w in workers)) == set(range(6)),
    )
    pages = flow.stop()
    reader.wait_for_pages(pages, timeout=180)
    reader.settle(1.5)
    stop_all(workers)
    reader.close()
    assert slot_table(s).leases() == {}  # the dead slot was freed after fencing, the others too
    assert check_against_oracle(reader.decisions, pages) > 20


def test_a_dead_workers_open_transaction_holds_readers_only_until_its_lease_lapses(
    setup: Callable[..., Setup], spawn: Callable[..., WorkerProcess], redis_server: RedisServer
) -> None:
    """A worker that died inside a transaction, made deterministic: the test takes slot 1 with
    a 10 s lease, opens a transaction under its id, produces a decision and never commits or
    renews. read_committed readers then see nothing past it on that partition (Tansu never
    times the transaction out) until the live worker fences the slot: within the lease ttl
    plus the renew interval of the last renewal, plus one producer initialisation."""
    dead_ttl_s = 10
    s = setup(redis_url=redis_server.url, partitions=2)
    env = one_environment(s)
    worker = start(spawn, env, 1)[0]
    table = slot_table(s)
    assert table.acquire("dead-worker", dead_ttl_s * 1000) == Taken(1, False)
    died_at = time.monotonic()
    zombie = Producer(
        {"bootstrap.servers": s.bootstrap, "transactional.id": f"{s.config.group_id}.slot-1"}
    )
    zombie.init_transactions(30)
    zombie.begin_transaction()
    planted = Decision(
        url="https://dead.example/open", host="dead.example", verdict=Verdict.UNIQUE,
        simhash="0" * 16, priority=0.0, follow_outlinks=False, fetched_at=1.0, decided_at=1.0,
    )  # fmt: skip
    zombie.produce(s.decisions, planted.to_json(), b"dead.example", partition=0)
    assert zombie.flush(30) == 0
    pages = [page(f"https://h{i}.example/{i}", text(7000 + i), 100.0 + i) for i in range(40)]
    produce_pages(s.bootstrap, s.pages, pages)
    everything = DecisionReader(s.bootstrap, s.decisions, isolation="read_uncommitted")
    everything.wait_for_pages(pages, timeout=60)
    behind = _decided_after(everything.records, planted.url)
    assert behind, "no decision landed behind the open transaction"
    committed = s.reader()
    committed.settle(1.0)
    held_back = behind - committed.pages_decided()
    assert table.leases()[1].owner == "dead-worker"  # not fenced yet, so this is the stall:
    assert held_back == behind
    committed.wait_for_pages(pages, timeout=90)
    stalled_s = time.monotonic() - died_at
    wait_for_log(worker, r"fenced and freed worker slot 1\b", timeout=30)
    stop_all([worker])
    everything.close()
    committed.close()
    del zombie
    bound_s = dead_ttl_s + RENEW_MS / 1000
    print(f"read_committed readers held {stalled_s:.1f} s by a dead transaction (bound {bound_s})")
    # The bound plus a generous allowance for a busy machine; without fencing, it is forever.
    assert stalled_s < bound_s + 30


def _decided_after(records: list[Any], url: str) -> set[tuple[str, float]]:
    """Pages whose decision landed after ``url``'s record in the same partition."""
    from dedup_worker.contract.messages import decode_decision

    mark = next(r for r in records if decode_decision(r.value).url == url)
    return {
        (d.url, d.fetched_at)
        for r in records
        if r.partition == mark.partition and r.offset > mark.offset
        for d in [decode_decision(r.value)]
    }


def test_a_rolling_restart_while_pages_flow(
    setup: Callable[..., Setup], spawn: Callable[..., WorkerProcess], redis_server: RedisServer
) -> None:
    """SIGTERM each of three workers in turn and start the same command again, pages flowing
    all along: every stop exits 0, no worker fences another, the oracle's answer."""
    s = setup(redis_url=redis_server.url, partitions=6, batch_max_records="20")
    env = one_environment(s)
    workers = start(spawn, env, 3)
    everyone = list(workers)
    reader = s.reader()
    flow = Flow(s.bootstrap, s.pages, family_stream(seed=24, families=300, members=4, singles=1200))
    reader.read_until(lambda records: len(records) >= 100, timeout=120)
    for i in range(3):
        assert workers[i].terminate() == 0, workers[i].log_text()
        workers[i] = spawn(env)
        everyone.append(workers[i])
        wait_for_log(workers[i], ASSIGNED, timeout=120)
    assert flow.flowing, "the stream ended before the last restart; make it longer"
    pages = flow.stop()
    reader.wait_for_pages(pages, timeout=180)
    reader.settle(1.5)
    stop_all(workers)
    reader.close()
    for worker in everyone:
        assert STOPPED_BY_ERROR not in worker.full_log()
        assert "was taken over" not in worker.full_log()  # no live worker lost its slot
    assert check_against_oracle(reader.decisions, pages) > 20


def test_a_paused_worker_loses_its_slot_and_carries_on_under_another(
    setup: Callable[..., Setup], spawn: Callable[..., WorkerProcess], redis_server: RedisServer
) -> None:
    """SIGSTOP one of two workers past its lease: the other fences its slot (aborting what it
    had open) and frees it. On SIGCONT the paused worker finds its slot gone, says so, takes a
    slot again and goes on; nothing dies, the oracle's answer."""
    s = setup(redis_url=redis_server.url, partitions=4, batch_max_records="10")
    workers = start(spawn, one_environment(s), 2)
    reader = s.reader()
    flow = Flow(s.bootstrap, s.pages, family_stream(seed=25, families=300, members=4, singles=1200))
    reader.read_until(lambda records: len(records) >= 100, timeout=120)
    paused, other = workers
    slot = slots_taken(paused)[-1]
    os.kill(paused.proc.pid, signal.SIGSTOP)
    try:
        wait_for_log(other, rf"fenced and freed worker slot {slot}\b", timeout=90)
    finally:
        os.kill(paused.proc.pid, signal.SIGCONT)
    wait_for_log(paused, rf"worker slot {slot} was taken over|taken over; the batch is redone")
    wait_until("the paused worker takes a slot again", lambda: len(slots_taken(paused)) >= 2)
    assert flow.flowing, "the stream ended before the worker came back; make it longer"
    pages = flow.stop()
    reader.wait_for_pages(pages, timeout=180)
    reader.settle(1.5)
    stop_all(workers)
    reader.close()
    assert STOPPED_BY_ERROR not in paused.full_log()
    assert check_against_oracle(reader.decisions, pages) > 20
