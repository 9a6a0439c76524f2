"""``dedup-worker`` processes: graceful SIGTERM, kill -9 and restart, a group of workers racing.

All against the real Tansu broker and redis-server, with the earliest-wins oracle computed from
the same fingerprints the engine uses.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from urllib.request import urlopen

import numpy as np
import pytest

from dedup_worker.adapters import kafka
from dedup_worker.adapters.kafka import KafkaSettings
from dedup_worker.contract.messages import decode_page
from dedup_worker.worker.main import build_backends, engine_settings
from neardup.stack import RedisCluster, RedisServer, free_port
from tests.support.flow_helpers import trickle, wait_for_log
from tests.support.worker_helpers import (
    Setup,
    TopicReader,
    WorkerProcess,
    check_against_oracle,
    family_stream,
)

pytestmark = pytest.mark.integration


def committed_offsets(s: Setup, partitions: int) -> dict[int, int]:
    found = kafka.committed_offsets(KafkaSettings(s.bootstrap), s.env["NEARDUP_GROUP_ID"], s.pages)
    assert len(found) == partitions
    return found


@pytest.mark.parametrize("batch", [1000, 10])
def test_sigterm_finishes_the_batch_commits_and_exits_0(
    batch: int,
    setup: Callable[..., Setup],
    spawn: Callable[..., WorkerProcess],
    redis_server: RedisServer,
) -> None:
    """Mid-stream SIGTERM: exit 0; decisions published == pages committed, exactly; a restarted
    worker then decides the rest with no page decided twice. In batches of 10 the stream is a
    backlog, so the stop finds the next batch prefetched and must leave it uncommitted."""
    port = free_port()
    s = setup(
        redis_url=redis_server.url,
        partitions=2,
        metrics_port=str(port),
        batch_max_records=str(batch),
    )
    pages = family_stream(seed=1, families=40, members=3, singles=480)
    reader = s.reader()
    worker = spawn(s.env)
    wait_for_log(worker, r"partitions assigned: \['")
    with trickle(s.bootstrap, s.pages, pages) as rush:
        reader.read_until(lambda records: len(records) >= 150)
        metrics = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert worker.terminate() == 0, worker.log_text()
        rush.set()
    for name in ("pages_total", "decisions_total", "probe_seconds", "consumer_lag"):
        assert f"neardup_worker_{name}" in metrics
    prefetched = re.search(r"^neardup_worker_prefetched_batches_total (\S+)$", metrics, re.M)
    assert prefetched is not None
    assert (float(prefetched.group(1)) > 0) == (batch == 10)
    assert "worker stopped" in worker.log_text()
    committed = committed_offsets(s, 2)
    topic = TopicReader(s.bootstrap, s.pages)
    records = topic.read_until(lambda records: len(records) == len(pages))
    topic.close()
    committed_pages = {
        (page.url, page.fetched_at)
        for page in (decode_page(r.value) for r in records if r.offset < committed[r.partition])
    }
    reader.settle(1.0)
    decided = {(d.url, d.fetched_at) for d in reader.decisions if not d.corrects}
    assert 0 < len(committed_pages) < len(pages)
    assert decided == committed_pages  # published <=> committed, at the moment of the stop
    restarted = spawn(s.env)
    reader.wait_for_pages(pages)
    assert restarted.terminate() == 0
    reader.settle(1.0)
    reader.close()
    firsts = Counter((d.url, d.fetched_at) for d in reader.decisions if not d.corrects)
    assert set(firsts.values()) == {1}, "a page was decided twice after a graceful stop"
    check_against_oracle(reader.decisions, pages)


@pytest.mark.parametrize(("backend", "batch"), [("redis", 1000), ("cluster", 1000), ("redis", 10)])
def test_kill_9_then_restart_ends_with_one_final_decision_per_page(
    backend: str,
    batch: int,
    setup: Callable[..., Setup],
    spawn: Callable[..., WorkerProcess],
    request: pytest.FixtureRequest,
) -> None:
    """kill -9 mid-batch, restart with the same worker id: every page has a final decision
    equal to the oracle's, and the index holds every page exactly once; on one Redis and on a
    3-node Redis Cluster.

    Redis is paused just before the kill (every node of the cluster), so the worker dies inside
    ``engine.decide`` with its batch partly written to Redis and not committed to Kafka: the
    restart replays it. In batches of 10 (a backlog) the kill may also cut a commit in flight."""
    if backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        servers, url, cluster = [server], server.url, "0"
    else:
        nodes: RedisCluster = request.getfixturevalue("redis_cluster")
        servers, url, cluster = list(nodes.nodes), nodes.url, "1"
    s = setup(redis_url=url, redis_cluster=cluster, partitions=2, batch_max_records=str(batch))
    pages = family_stream(seed=2, families=60, members=4, singles=360)
    reader = s.reader()
    worker = spawn(s.env)
    wait_for_log(worker, r"partitions assigned: \['")
    with trickle(s.bootstrap, s.pages, pages) as rush:
        reader.read_until(lambda records: len(records) >= 150)
        for server in servers:
            server.pause()
        try:
            time.sleep(0.3)
            worker.kill()
        finally:
            for server in servers:
                server.resume()
        restarted = spawn(s.env)
        rush.set()
        reader.wait_for_pages(pages, timeout=90)
    reader.settle(1.0)
    assert restarted.terminate() == 0
    reader.close()
    assert check_against_oracle(reader.decisions, pages) > 100
    config = s.config
    index, _ = build_backends(config, engine_settings(config).version_tag)
    assert len(index) == len(pages)
    for table in range(len(index.design.tables)):  # type: ignore[attr-defined]
        _, ids = index.entries(table)  # type: ignore[attr-defined]
        assert ids.size == len(pages) == np.unique(ids).size, f"table {table} has duplicates"


@pytest.mark.parametrize(("backend", "batch"), [("redis", 50), ("cluster", 50), ("redis", 8)])
def test_a_group_of_workers_ends_with_the_earliest_wins_answer(
    backend: str,
    batch: int,
    setup: Callable[..., Setup],
    spawn: Callable[..., WorkerProcess],
    request: pytest.FixtureRequest,
) -> None:
    """Workers in one group race on families spread over hosts and partitions, and the group
    rebalances mid-stream (a third worker joins, then the first leaves on SIGTERM): after
    corrections every page's final verdict is the oracle's, no original is a later page; on
    one Redis and on a 3-node Redis Cluster. In batches of 8 the workers mostly run a backlog,
    so partitions are revoked while commits are in flight."""
    if backend == "redis":
        url, cluster = request.getfixturevalue("redis_server").url, "0"
    else:
        url, cluster = request.getfixturevalue("redis_cluster").url, "1"
    s = setup(redis_url=url, redis_cluster=cluster, partitions=4, batch_max_records=str(batch))
    pages = family_stream(seed=3, families=120, members=5, singles=400)
    workers = [spawn(s.env | {"NEARDUP_WORKER_ID": f"w{i}"}) for i in range(2)]
    for worker in workers:
        wait_for_log(worker, r"partitions assigned: \['")
    reader = s.reader()
    with trickle(s.bootstrap, s.pages, pages, chunk=15) as rush:
        reader.read_until(lambda records: len(records) >= 200)
        workers.append(spawn(s.env | {"NEARDUP_WORKER_ID": "w2"}))
        wait_for_log(workers[2], r"partitions assigned: \['")
        assert workers[0].terminate() == 0, workers[0].log_text()
        rush.set()  # the rebalances happened mid-stream: the rest can come as a backlog
    reader.wait_for_pages(pages, timeout=90)
    reader.settle(1.5)
    for worker in workers[1:]:
        assert worker.terminate() == 0, worker.log_text()
    reader.close()
    assert check_against_oracle(reader.decisions, pages) > 300
    assert any(d.corrects for d in reader.decisions), "no race needed a correction"


def test_two_workers_given_one_worker_id_the_fenced_one_says_so_and_no_page_is_lost(
    setup: Callable[..., Setup],
    spawn: Callable[..., WorkerProcess],
    redis_server: RedisServer,
) -> None:
    """A misconfiguration a user can make: two processes with one ``NEARDUP_WORKER_ID``. The
    second one's producer fences the first, whose next commit fails: it must exit 1 with the
    reason and what to fix (not a SystemError from closing its fenced producer with decisions
    queued), and the survivor must decide every page, the fenced batch included."""
    s = setup(redis_url=redis_server.url, partitions=2)
    pages = family_stream(seed=3, families=30, members=3, singles=360)
    reader = s.reader()
    first = spawn(s.env)
    wait_for_log(first, r"partitions assigned: \['")
    with trickle(s.bootstrap, s.pages, pages, pause=0.1) as rush:
        reader.read_until(lambda records: len(records) >= 60)
        second = spawn(s.env)  # same NEARDUP_WORKER_ID: its producer fences the first's
        assert first.wait(60) == 1, first.log_text()
        rush.set()
        log = first.full_log()
        assert "worker stopped by an error" in log, first.log_text()
        assert "do two workers share one NEARDUP_WORKER_ID?" in log, first.log_text()
        assert "SystemError" not in log and "Traceback" not in log, first.log_text()
        reader.wait_for_pages(pages)
    assert second.terminate() == 0, second.log_text()
    reader.settle(1.0)
    reader.close()
    check_against_oracle(reader.decisions, pages)


def test_workers_stopped_before_their_first_assignment_leave_a_group_later_ones_can_join(
    setup: Callable[..., Setup],
    spawn: Callable[..., WorkerProcess],
    redis_server: RedisServer,
) -> None:
    """A member that leaves while the group first forms wedges it on Tansu as a leader leaving
    mid-rebalance does: a `neardup crawl` of two spiders stopped 5 s in (its workers 1.6 s
    after they started) left a group whose later workers never got a partition, and the next
    run stalled. A new member now waits for its first assignment before it leaves."""
    s = setup(redis_url=redis_server.url, partitions=2)
    first = [spawn(s.env | {"NEARDUP_WORKER_ID": f"first-{i}"}) for i in range(2)]
    for worker in first:
        wait_for_log(worker, "worker running")
    for worker in first:
        worker.proc.send_signal(signal.SIGTERM)
    for worker in first:
        assert worker.wait(60) == 0, worker.log_text()
    later = [spawn(s.env | {"NEARDUP_WORKER_ID": f"later-{i}"}) for i in range(2)]
    for worker in later:
        wait_for_log(worker, r"partitions assigned: \['", timeout=60)
    for worker in later:
        assert worker.terminate() == 0, worker.log_text()


@pytest.mark.parametrize("generations", ["on", "off"])
def test_workers_stopped_together_leave_a_group_later_workers_can_join(
    setup: Callable[..., Setup],
    spawn: Callable[..., WorkerProcess],
    redis_server: RedisServer,
    generations: str,
) -> None:
    """Tansu 0.6.0 wedges a group for good when its leader leaves before it has rejoined after
    a follower left: no member, old or new, ever gets a partition again (``redis_leave_turn``).
    Workers sharing Redis therefore leave one at a time. The sequence that wedged the group in
    3 of 3 tries without that: the follower gets SIGTERM 0.2 s before the leader; two workers
    started after them must both be assigned. Until 29 Nov only the workers of a rolling topic
    (the embedded stack's setting) took turns: two ``neardup crawl`` runs in a row against
    ``neardup up`` without ``NEARDUP_TOPIC_GENERATIONS`` stalled the second."""
    s = setup(redis_url=redis_server.url, partitions=2, topic_generations=generations)
    leader = spawn(s.env | {"NEARDUP_WORKER_ID": "leader"})
    wait_for_log(leader, r"partitions assigned: \['")  # the first member leads the group
    follower = spawn(s.env | {"NEARDUP_WORKER_ID": "follower"})
    wait_for_log(follower, r"partitions assigned: \['")
    time.sleep(1.5)
    follower.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    leader.proc.send_signal(signal.SIGTERM)
    assert follower.wait(60) == 0, follower.log_text()
    assert leader.wait(60) == 0, leader.log_text()
    assert "waited" in leader.full_log() + follower.full_log()  # the second one took its turn
    later = [spawn(s.env | {"NEARDUP_WORKER_ID": f"later-{i}"}) for i in range(2)]
    for worker in later:
        wait_for_log(worker, r"partitions assigned: \['", timeout=60)
    for worker in later:
        assert worker.terminate() == 0, worker.log_text()
