"""Benchmark one ``dedup-worker`` process end to end: throughput, then latency at a fixed load.

Run from the repository root (package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_worker.py [--count 20000] [--rate 2000] [--seconds 10] [--repeat 3]
                                      [--backend redis|memory] [--transactional on|off]

It starts its own Tansu broker and redis-server on loopback ports, and the worker as a
subprocess (exactly as deployed), so broker, Redis, worker and this script share the machine.

1. Throughput: ``--count`` 900-word pages (``synthetic_text.documents``) are produced to
   ``pages`` first; then one worker starts and the script reads ``decisions`` as the
   crawler does (fetches the broker may hold ``READER_FETCH_WAIT_MS``); the pages go out
   with the crawler's default codec, none (``--pages-codec`` to compare). pages/s =
   decisions read between the first and the last one, divided by that time (worker start-up
   excluded).
   It also prints each process's CPU per page decided, and the ceiling their sum puts on this
   host's cores: a run cannot beat it, whatever the worker overlaps.
2. Latency: on fresh topics and a fresh worker, pages are produced at ``--rate`` pages/s for
   ``--warmup`` + ``--seconds``, each with ``fetched_at`` = its send time; latency = time
   the decision is consumed here (fetches the broker holds 5 ms at most) - that send time,
   for the pages after the warm-up. Prints p50/p99/max.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from host_speed import host_speed_line
from synthetic_text import documents

from dedup_worker.adapters.kafka import PARTITIONER
from dedup_worker.adapters.kafka.reader import READER_FETCH_WAIT_MS
from dedup_worker.adapters.kafka.settings import CODECS
from dedup_worker.contract.messages import decode_decision
from dedup_worker.contract.reading import fold_decisions
from dedup_worker.core.text import content_checksum
from neardup.stack import KafkaBroker, RedisServer

logger = logging.getLogger(__name__)

#: The latency run's reader asks the broker every 5 ms, so a decision is read within ~5 ms of
#: its commit (the measure is of the worker, not of the reader's polling).
LATENCY_FETCH_WAIT_MS = 5


def page_bodies(count: int, checksums: bool = False, corpus: Path | None = None) -> list[bytes]:
    """``count`` distinct page messages: halves of documents recombined. The documents are
    synthetic 900-word Zipf texts (``synthetic_text``), or the texts of a JSONL corpus
    (``--corpus``, e.g. ``tools/build_corpus.py``'s) to see the worker on real text.

    ``fetched_at`` is left as a ``%FETCHED%`` placeholder so the latency phase can stamp the
    send time without re-encoding the page. With ``checksums`` each page carries its
    ``checksum`` as the crawler sends it; without, the worker computes it (~16 us a page).
    """
    docs = documents(max(200, count // 20)) if corpus is None else real_texts(corpus)
    halves = [(d[: len(d) // 2], d[len(d) // 2 :]) for d in docs]
    bodies = []
    for i in range(count):
        head, tail = halves[i % len(halves)][0], halves[(i * 7 + i // len(halves)) % len(halves)][1]
        host, text = f"host{i % 500}.example", head + " " + tail
        page: dict[str, object] = {
            "schema": "neardup.page/1",
            "url": f"https://{host}/p{i}",
            "host": host,
            "fetched_at": 0.0,
            "status": 200,
            "title": f"page {i}",
            "text": text,
            "outlinks": [],
            "depth": 1,
        }
        if checksums:
            page["checksum"] = content_checksum(text)
        bodies.append(json.dumps(page).replace('"fetched_at": 0.0', '"fetched_at": %FETCHED%'))
    return [b.encode() for b in bodies]


def real_texts(path: Path) -> list[str]:
    """The texts of a corpus file of ``{"text": ...}`` lines with 100 to 20,000 words (the
    broker's default message limit is 1 MB)."""
    with path.open(encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line in lines if line.strip()]
    return [t for t in texts if 100 <= len(t.split()) <= 20_000 and len(t) < 400_000]


def stamp(body: bytes, at: float) -> bytes:
    return body.replace(b"%FETCHED%", repr(at).encode(), 1)


def key_of(i: int) -> bytes:
    return f"host{i % 500}.example".encode()


def create_topics(broker: KafkaBroker, prefix: str, partitions: int) -> tuple[str, str]:
    pages, decisions = f"{prefix}-pages", f"{prefix}-decisions"
    broker.admin().create([pages, decisions, f"{pages}.dlq"], partitions)
    return pages, decisions


def delete_topics(broker: KafkaBroker, prefix: str) -> None:
    """Drop a finished run's topics: Tansu's memory store lists every stored batch of a
    partition on each fetch, so topics left behind would slow the next run's fetches."""
    broker.admin().delete([f"{prefix}-pages", f"{prefix}-decisions", f"{prefix}-pages.dlq"])


def start_worker(broker: KafkaBroker, redis_url: str, pages: str, decisions: str, args: Any,
                 log: Path) -> subprocess.Popen[bytes]:  # fmt: skip
    env = {
        **os.environ,
        "NEARDUP_KAFKA_BOOTSTRAP": broker.bootstrap,
        "NEARDUP_REDIS_URL": redis_url,
        "NEARDUP_PAGES_TOPIC": pages,
        "NEARDUP_DECISIONS_TOPIC": decisions,
        "NEARDUP_GROUP_ID": f"{pages}-group",
        "NEARDUP_INDEX_NAMESPACE": pages,
        "NEARDUP_TRANSACTIONAL": args.transactional,
        "NEARDUP_BATCH_MAX_RECORDS": str(args.batch),
        "NEARDUP_BATCH_MAX_WAIT_MS": str(args.wait_ms),
        "NEARDUP_EXPECTED_PAGES": str(max(args.count, args.rate * (args.seconds + args.warmup))),
        "NEARDUP_WORKER_ID": pages,
    }
    for name, value in (("SHINGLE", args.shingle), ("TF_CAP", args.tf_cap), ("K", args.k)):
        if value is not None:
            env[f"NEARDUP_{name}"] = str(value)
    command = [str(Path(sys.executable).parent / "dedup-worker")]
    profile = os.environ.get("BENCH_PROFILE")
    if profile:  # cProfile the worker's main thread; the file is written when it stops
        module = "dedup_worker.worker.main"
        command = [sys.executable, "-m", "cProfile", "-o", profile, "-m", module]
    return subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def decision_reader(
    broker: KafkaBroker, topic: str, partitions: int, fetch_wait_ms: int = LATENCY_FETCH_WAIT_MS
) -> Consumer:
    """A light reader of the decisions (librdkafka), so this script takes little CPU."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"{topic}-bench-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": fetch_wait_ms,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return consumer


def read_some(reader: Consumer, timeout_s: float) -> list[Any]:
    """The decisions there are, as soon as there is one (``consume(n, t)`` alone would wait
    for ``n`` messages or the whole ``t``, which adds up to ``t`` to every latency)."""
    first = reader.poll(timeout_s)
    if first is None:
        return []
    return [m for m in [first, *reader.consume(10_000, 0)] if m.error() is None]


def _producer(broker: KafkaBroker, linger_ms: int, codec: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": linger_ms,
            "partitioner": PARTITIONER,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 4 << 20,
            "compression.type": codec,
        }
    )


class Candidates:
    """Candidates the index proposed per page, and the share the sketch rejected (false
    candidates: earlier pages within k whose resemblance is under the threshold).

    It also keeps every decision's bytes, to fold them after the timed part: a page's first
    decision depends on the order the worker met the partitions in (a later page decided before
    its earlier partner is ``unique`` until corrected), its standing decision does not."""

    def __init__(self) -> None:
        self.pages = self.proposed = self.rejected = 0
        self.verdicts: dict[str, int] = {}
        self.raw: list[bytes] = []

    def add(self, messages: list[Any]) -> int:
        """Count ``messages``; returns how many are first decisions (not corrections)."""
        first = 0
        for message in messages:
            self.raw.append(message.value())
            decision = orjson.loads(message.value())  # this process shares the cores
            if decision.get("corrects"):
                continue
            first += 1
            evidence = decision.get("evidence", {})
            self.pages += 1
            self.proposed += int(evidence.get("candidates", 0))
            self.rejected += int(evidence.get("rejected_by_sketch", 0))
            verdict = decision["verdict"]
            self.verdicts[verdict] = self.verdicts.get(verdict, 0) + 1
        return first

    def report(self) -> str:
        per_page = self.proposed / max(self.pages, 1)
        false_rate = self.rejected / max(self.proposed, 1)
        return (
            f"candidates examined: {per_page:.2f} per page, {false_rate:.1%} of them false "
            f"(rejected by the sketch); first verdicts: {_counts(self.verdicts)}"
        )

    def standing(self) -> str:
        """The verdicts once corrections are folded in (the README's reading rule)."""
        final = fold_decisions(decode_decision(raw) for raw in self.raw)
        verdicts: dict[str, int] = {}
        for decision in final.values():
            verdicts[decision.verdict.value] = verdicts.get(decision.verdict.value, 0) + 1
        corrected = sum(1 for decision in final.values() if decision.corrects)
        return f"standing verdicts: {_counts(verdicts)} ({corrected} pages corrected)"


def _counts(verdicts: Mapping[str, int]) -> str:
    return ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items()))


def throughput(
    broker: KafkaBroker, redis_url: str, args: Any, workdir: Path, run: int = 0
) -> float:
    pages, decisions = create_topics(broker, f"throughput{run}", args.partitions)
    bodies = page_bodies(args.count, args.checksums, args.corpus)
    producer = _producer(broker, linger_ms=20, codec=args.pages_codec)
    for i, body in enumerate(bodies):
        producer.produce(pages, stamp(body, 1_000_000 + i / 1000), key_of(i))
        producer.poll(0)
    producer.flush()
    # Read as the crawler reads them (its DecisionFeed): a fetch every 5 ms, as the latency
    # run reads, cost the broker ~4 us a page (17 -> 13) of the cores the worker shares.
    reader = decision_reader(broker, decisions, args.partitions, READER_FETCH_WAIT_MS)
    worker = start_worker(
        broker, redis_url, pages, decisions, args, workdir / f"throughput{run}.log"
    )
    pids = {**SERVERS, "worker": worker.pid, "this script": os.getpid()}
    meter = None
    seen, first, last = 0, 0.0, 0.0
    candidates = Candidates()
    try:
        while seen < args.count:
            _stop_if_dead(worker, workdir / f"throughput{run}.log")
            batch = read_some(reader, 0.2)
            if batch:
                now = time.perf_counter()
                decided = candidates.add(batch)  # a correction is not a page decided
                if not seen:
                    first, first_count = now, decided
                    meter = CpuMeter(pids)
                seen += decided
                last = now
        rate = (seen - first_count) / (last - first)
        if meter is not None:
            print(f"  CPU from the first decision to the last, % of one core: {meter.report()}")
            print(f"  {meter.budget(seen - first_count)}")
            # The run's rate over that ceiling: how well the stack uses the cores, a figure the
            # host's speed (which moves the CPU per page by a third from run to run) leaves be.
            print(f"  share of the ceiling reached: {rate / meter.ceiling(seen - first_count):.1%}")
        print(f"  {candidates.report()}")
        while batch := read_some(reader, 1.0):  # corrections after the last first decision
            candidates.add(batch)
        print(f"  {candidates.standing()}")
    finally:
        worker.terminate()
        worker.wait(30)
        reader.close()
        delete_topics(broker, f"throughput{run}")
    return rate


def latency(
    broker: KafkaBroker, redis_url: str, args: Any, workdir: Path, run: int = 0
) -> np.ndarray:
    """Decision latencies (s) of the pages sent after the first ``--warmup`` seconds."""
    pages, decisions = create_topics(broker, f"latency{run}", args.partitions)
    WARM_UNTIL[0] = float("inf")
    total = args.rate * (args.warmup + args.seconds)
    bodies = page_bodies(total, args.checksums, args.corpus)
    reader = decision_reader(broker, decisions, args.partitions)
    worker = start_worker(broker, redis_url, pages, decisions, args, workdir / f"latency{run}.log")
    delays: list[tuple[float, float]] = []  # (send -> decided_at, decided_at -> read)
    seen = 0
    try:
        _wait_for_assignment(workdir / f"latency{run}.log")
        sender = threading.Thread(
            target=_offer, args=(broker, pages, bodies, args.rate, args.warmup, args.pages_codec)
        )
        sender.start()
        meter = CpuMeter({**SERVERS, "worker": worker.pid, "this script": os.getpid()})
        while seen < total:
            batch = read_some(reader, 0.1)
            now = time.time()
            seen += len(batch)
            for sent, decided in map(_times, batch):
                if sent >= WARM_UNTIL[0]:
                    delays.append((decided - sent, now - decided))
        sender.join()
        print(f"  CPU during the run, % of one core: {meter.report()}")
    finally:
        worker.terminate()
        worker.wait(30)
        reader.close()
        delete_topics(broker, f"latency{run}")
    return np.array(delays)


#: Server processes whose CPU the runs report (name -> pid), set by main.
SERVERS: dict[str, int] = {}


class CpuMeter:
    """CPU time of some processes (and their threads) from now until ``report``."""

    def __init__(self, pids: Mapping[str, int | None]) -> None:
        self.processes = {n: psutil.Process(p) for n, p in pids.items() if p is not None}
        self.start = time.monotonic()
        self.before = {n: self._used(p) for n, p in self.processes.items()}

    @staticmethod
    def _used(process: psutil.Process) -> float:
        times = process.cpu_times()
        return float(times.user + times.system)

    def report(self) -> str:
        wall = time.monotonic() - self.start
        return ", ".join(f"{n} {100 * used / wall:.0f}" for n, used in self._spent().items())

    def ceiling(self, pages: int) -> float:
        """Pages/s this host's cores allow at the CPU per page measured (see ``budget``)."""
        stack = sum(self._spent().values()) / max(pages, 1)
        return (os.cpu_count() or 1) / max(stack, 1e-12)

    def budget(self, pages: int) -> str:
        """CPU per page decided, by process, and the ceiling it puts on this host: the
        broker, Redis, the worker and this reader share its cores, so at these costs no run
        goes faster than cores / (their sum), however well the worker overlaps its waits.
        Seconds of CPU per page vary with the host (see ``bench_instructions.py``)."""
        per_page = {n: 1e6 * used / max(pages, 1) for n, used in self._spent().items()}
        parts = ", ".join(f"{n} {us:.0f}" for n, us in per_page.items())
        return (
            f"CPU per page decided (us): {parts}; all {sum(per_page.values()):.0f}, so "
            f"{os.cpu_count() or 1} cores cap a run at {self.ceiling(pages):,.0f} pages/s"
        )

    def _spent(self) -> dict[str, float]:
        return {n: self._used(p) - self.before[n] for n, p in self.processes.items()}


#: Send time of the first measured page (set by the sender after the warm-up).
WARM_UNTIL = [float("inf")]
_FETCHED_AT = re.compile(rb'"fetched_at":([0-9.e+]+)')
_DECIDED_AT = re.compile(rb'"decided_at":([0-9.e+]+)')


def _times(record: Any) -> tuple[float, float]:
    """The decision's fetched_at (the page's send time here) and decided_at, without parsing
    the whole decision (this process is busy)."""
    value = record.value()
    sent, decided = _FETCHED_AT.search(value), _DECIDED_AT.search(value)
    return (float(sent.group(1)) if sent else 0.0, float(decided.group(1)) if decided else 0.0)


def _offer(
    broker: KafkaBroker, topic: str, bodies: list[bytes], rate: int, warmup: int, codec: str
) -> None:
    """Send at ``rate`` pages/s in 10 ms ticks, stamping each page with its send time."""
    producer = _producer(broker, linger_ms=0, codec=codec)
    per_tick = max(1, rate // 100)
    warm = rate * warmup
    start = time.perf_counter()
    for tick, lo in enumerate(range(0, len(bodies), per_tick)):
        if lo >= warm and WARM_UNTIL[0] == float("inf"):
            WARM_UNTIL[0] = time.time()
        for i in range(lo, min(lo + per_tick, len(bodies))):
            producer.produce(topic, stamp(bodies[i], time.time()), key_of(i))
        producer.poll(0)
        pause = start + (tick + 1) / 100 - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    producer.flush()


def _stop_if_dead(worker: subprocess.Popen[bytes], log: Path) -> None:
    """A worker that exits (a refused configuration, a crash) ends the run with its log tail,
    instead of leaving the benchmark waiting for decisions that never come."""
    if worker.poll() is not None:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"the worker exited with code {worker.returncode}:\n{tail}")


def _wait_for_assignment(log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while "partitions assigned: ['" not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise SystemExit(f"worker never joined its group:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20_000, help="pages for the throughput run")
    parser.add_argument("--rate", type=int, default=2000, help="offered load, pages/s")
    parser.add_argument("--seconds", type=int, default=10, help="duration of the latency run")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of load not measured")
    parser.add_argument(
        "--partitions",
        type=int,
        default=4,
        help="partitions of the run's topics; Tansu's memory store lists every stored batch of a "
        "partition on each fetch, so its cost grows with partitions x batches held",
    )
    parser.add_argument("--backend", choices=["redis", "memory"], default="redis")
    parser.add_argument("--transactional", choices=["on", "off"], default="on")
    parser.add_argument(
        "--pages-codec",
        choices=CODECS,
        default="none",
        help="codec of the pages this script publishes (the crawler's NEARDUP_KAFKA_COMPRESSION;"
        " default: the crawler's default, none)",
    )
    parser.add_argument("--batch", type=int, default=1000, help="worker batch_max_records")
    parser.add_argument("--wait-ms", type=int, default=20, help="worker batch_max_wait_ms")
    parser.add_argument(
        "--shingle",
        type=int,
        help="words per feature (default: the worker's); with 1 and --tf-cap 0, the synthetic "
        "Zipf corpus puts ~5%% of all page pairs within k=3 (common words outvote the rest)",
    )
    parser.add_argument("--tf-cap", type=int, help="the worker's NEARDUP_TF_CAP (default: its own)")
    parser.add_argument("--k", type=int, help="the worker's NEARDUP_K (default: its own)")
    parser.add_argument(
        "--checksums",
        action="store_true",
        help="pages carry their checksum, as the crawler sends them (else the worker computes it)",
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        help="JSONL corpus whose texts make the pages (default: synthetic Zipf texts, the worst "
        "case for simhash bucket skew: every page draws from one word distribution)",
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--keep-logs", type=Path, help="copy the worker logs here")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each phase (figures drift between runs)"
    )
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}, {os.cpu_count()} cpus")
    print(host_speed_line())
    with tempfile.TemporaryDirectory() as tmp, KafkaBroker(Path(tmp) / "kafka") as broker:
        redis = RedisServer(Path(tmp) / "redis").start() if args.backend == "redis" else None
        redis_url = redis.url if redis else "memory"
        SERVERS.update({"broker": broker.pid or 0, **({"redis": redis.pid or 0} if redis else {})})
        try:
            _run(broker, redis_url, args, Path(tmp))
        finally:
            if redis:
                redis.close()
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for log in Path(tmp).glob("*.log"):
                    shutil.copy(log, args.keep_logs / log.name)
    print(f"load average after: {os.getloadavg()}")


def _run(broker: KafkaBroker, redis_url: str, args: Any, workdir: Path) -> None:
    label = (
        f"backend={args.backend} transactional={args.transactional} batch={args.batch} "
        f"shingle={args.shingle or 'default'} tf_cap={args.tf_cap} k={args.k} "
        f"partitions={args.partitions} checksums={args.checksums} pages={args.pages_codec}"
    )
    rates: list[float] = []
    tails: list[float] = []
    for run in range(args.repeat):
        if not args.skip_throughput:
            rates.append(throughput(broker, redis_url, args, workdir, run))
            print(f"throughput ({label}): {args.count} pages, {rates[-1]:,.0f} pages/s end to end")
        if not args.skip_latency:
            tails.append(
                _report_latency(latency(broker, redis_url, args, workdir, run), args, label)
            )
    if args.repeat > 1:
        for name, values, unit in (("throughput", rates, "pages/s"), ("latency p99", tails, "ms")):
            if values:
                low, mid, high = np.percentile(values, [0, 50, 100])
                print(f"{name} over {len(values)} runs: min {low:,.1f}, median {mid:,.1f}, "
                      f"max {high:,.1f} {unit}")  # fmt: skip


def _report_latency(split_s: np.ndarray, args: Any, label: str) -> float:
    """Print one latency run's figures; returns its p99 (ms)."""
    split = split_s * 1000
    delays = split.sum(axis=1)
    p50, p99 = np.percentile(delays, [50, 99])
    print(
        f"latency at {args.rate} pages/s for {args.seconds} s ({label}): "
        f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {delays.max():.1f} ms"
    )
    fifths = ", ".join(f"{np.percentile(c, 99):.0f}" for c in np.array_split(delays, 5))
    print(f"  p99 by fifth of the run, in order (ms): {fifths}")
    inside, after = (np.percentile(split[:, i], [50, 99]) for i in (0, 1))
    print(
        f"  send -> decided (broker in, batching, engine): p50 {inside[0]:.1f}, "
        f"p99 {inside[1]:.1f} ms; decided -> read (produce, commit, broker out): "
        f"p50 {after[0]:.1f}, p99 {after[1]:.1f} ms"
    )
    return float(p99)


if __name__ == "__main__":
    main()
