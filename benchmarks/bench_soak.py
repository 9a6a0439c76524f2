"""Soak: one ``dedup-worker`` at a steady load through the embedded stack for a long time.

Run from the repository root (package installed, e.g. ``pip install -e .``)::

    python benchmarks/bench_soak.py [--minutes 30] [--rate 1000] [--window-minutes 5]
                                    [--generations on|off] [--generation-records N]
                                    [--corpus corpus.jsonl [--stream renamed]]

It starts the embedded stack (``neardup.stack.EmbeddedStack``: Tansu with memory storage and
a redis-server) and one worker as a subprocess, exactly as ``neardup crawl`` does, with the
topics rolling as generations (``--generations on``, the embedded default) or not. Pages
(distinct 900-word synthetic texts, or a corpus's real texts with ``--corpus``, made by
``--stream``: see ``page_streams``) are sent at ``--rate`` pages/s through the
project's producer, as the crawler sends them (5 ms linger, keyed by host), each stamped with
its send time as ``fetched_at``; decisions are read back with the project's reader. Per window
it prints the decision latency (send -> decision read here) p50/p99/max of the pages sent in
it, the broker's and Redis's resident memory, the topic generations alive, the load average,
each process's CPU and the CPU time of a fixed piece of work (if it grows, the machine got
slower, not the stack), and, when the worker logs at DEBUG (``NEARDUP_LOG_LEVEL=DEBUG``), its
own batches in the window: how many, their records (p50), decode / engine / produce + commit
ms a batch (mean) and how busy its loop was (where a latency that grows comes from). At the
end: pages without a decision (must be 0), and p99 of the last window against the first
(target: within 1.5x) and the broker's memory (target: bounded).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
from bench_worker import CpuMeter, key_of, stamp
from host_speed import fixed_work_seconds
from page_streams import STREAMS, Pages

from dedup_worker.adapters.kafka import (
    Record,
    RollerThread,
    Sender,
    TopicAdmin,
    TopicReader,
    ensure_topics,
    generations_of,
)
from dedup_worker.worker.config import WorkerConfig, load_config
from neardup.crawl_run import generation_roller
from neardup.stack import EmbeddedStack

_FETCHED_AT = re.compile(rb'"fetched_at":([0-9.e+]+)')
_PAGE = re.compile(rb'"url":"https://[^/"]+/p([0-9]+)"')
_CORRECTS = re.compile(rb'"corrects":true')
MIB = 1024 * 1024
#: A fixed piece of pure-Python work, timed in its own process once per window: its CPU time
#: shows whether the machine itself got slower (a virtual machine on a busy host) when every
#: process of the stack uses more CPU for the same load. ~0.37 s on this machine when idle.
#: The worker's DEBUG line for each batch (``worker.reporting``).
_BATCH = re.compile(
    r"^(\S+ \S+) DEBUG dedup_worker\.worker\.reporting: batch of (\d+) records.* in ([\d.]+) ms "
    r"\(decode ([\d.]+), engine ([\d.]+), produce\+commit ([\d.]+)\)"
)


class WorkerBatches:
    """The worker's per-batch timings, read from its log as it grows (DEBUG only)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.offset = 0
        self.rows: list[tuple[float, int, float, float, float, float]] = []

    def window(self, start: float, seconds: float) -> str:
        """A summary of the batches whose line was logged in [start, start + seconds)."""
        self._read()
        rows = np.array([r for r in self.rows if start <= r[0] < start + seconds])
        if not len(rows):
            return ""
        decode, engine, commit = (rows[:, i].mean() for i in (3, 4, 5))
        return (
            f"; worker: {len(rows)} batches of {np.median(rows[:, 1]):.0f} records (p50), "
            f"decode / engine / produce+commit {decode:.1f} / {engine:.1f} / {commit:.1f} ms a "
            f"batch, loop busy {rows[:, 2].sum() / 1000 / seconds:.0%}"
        )

    def _read(self) -> None:
        with self.log.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next read
        self.offset += end
        for line in chunk[:end].decode("utf-8", "replace").splitlines():
            m = _BATCH.match(line)
            if m:
                at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                total, decode, engine, commit = (float(m.group(i)) for i in range(3, 7))
                self.rows.append((at, int(m.group(2)), total, decode, engine, commit))


@dataclass
class Window:
    """What one window saw: latencies of the pages sent in it (by their send time)."""

    latencies: list[float] = field(default_factory=list)


class Soak:
    def __init__(self, args: argparse.Namespace, stack: EmbeddedStack, workdir: Path) -> None:
        self.args = args
        self.stack = stack
        self.workdir = workdir
        self.window_s = args.window_minutes * 60
        self.duration_s = args.minutes * 60
        self.windows = [Window() for _ in range(int(np.ceil(self.duration_s / self.window_s)))]
        self.sent = 0
        self.decided: set[int] = set()
        self.printed = 0
        self.printing = threading.Lock()
        self.started = 0.0
        self.meter: CpuMeter | None = None
        self.trace = args.trace.open("w") if args.trace else None
        self.worker_pid: int | None = None
        self.roller: RollerThread | None = None
        self.config = self._config()
        self.batches = WorkerBatches(workdir / "worker.log")
        # Made before the clock starts: the renamed stream takes ~12 s to prepare.
        self.pages = Pages(words=args.words, corpus=args.corpus, stream=args.stream)

    def _config(self) -> WorkerConfig:
        return load_config([], self._env())

    def _env(self) -> dict[str, str]:
        a = self.args
        return {
            "NEARDUP_KAFKA_BOOTSTRAP": self.stack.bootstrap,
            "NEARDUP_REDIS_URL": self.stack.redis_url,
            "NEARDUP_TOPIC_GENERATIONS": a.generations,
            **(
                {"NEARDUP_GENERATION_RECORDS": str(a.generation_records)}
                if a.generation_records
                else {}
            ),
            "NEARDUP_PARTITIONS": str(a.partitions),
            "NEARDUP_EXPECTED_PAGES": str(a.rate * int(self.duration_s) + 1000),
            "NEARDUP_WORKER_ID": "soak-worker",
            "NEARDUP_TRANSACTIONAL": a.transactional,
            **({"NEARDUP_FETCH_WAIT_MS": str(a.fetch_wait_ms)} if a.fetch_wait_ms else {}),
        }

    def run(self) -> int:
        config = self.config
        kafka = config.kafka(client_id="soak")
        topics = [config.pages_topic, config.decisions_topic, config.dlq_topic]
        ensure_topics(kafka, topics, self.args.partitions)
        roller = None
        if config.topic_generations:
            roller = self.roller = RollerThread(generation_roller(config, self.args.partitions))
            roller.start()
        reader = TopicReader(kafka, config.decisions_topic, fetch_wait_ms=5)
        reader.start("end")
        log = self.workdir / "worker.log"
        worker = subprocess.Popen(
            [sys.executable, "-m", "dedup_worker.worker.main"],
            env={**os.environ, **self._env()},
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_for(log, "partitions assigned: ['")
            self.worker_pid = worker.pid
            self.meter = self._cpu_meter()
            self.started = time.time()
            sender = threading.Thread(target=self._offer, daemon=True)
            sender.start()
            self._read(reader, worker)
            sender.join()
            self._drain(reader)
        finally:
            worker.terminate()
            worker.wait(30)
            reader.close()
            if roller is not None:
                roller.stop()
        return self._summary()

    def _offer(self) -> None:
        """Send at ``--rate`` pages/s in 10 ms ticks for ``--minutes``."""
        pages = self.pages
        sender = Sender(self.config.kafka(client_id="soak-pages"), linger_ms=5)
        per_tick = max(1, self.args.rate // 100)
        tick = 0
        while time.time() - self.started < self.duration_s:
            for _ in range(per_tick):
                i = self.sent
                sender.send(self.config.pages_topic, key_of(i), stamp(pages.body(i), time.time()))
                self.sent += 1
            tick += 1
            pause = self.started + tick / 100 - time.time()
            if pause > 0:
                time.sleep(pause)
        sender.flush()

    def _read(self, reader: TopicReader, worker: subprocess.Popen[bytes]) -> None:
        """Read decisions until the last page is sent. Windows are printed by another thread:
        a print takes ~0.5 s (an admin client, the fixed-work probe), and made here it held
        every decision in flight that long (seen as a burst of late pages at each print)."""
        printer = threading.Thread(target=self._print_windows, daemon=True)
        printer.start()
        while time.time() - self.started < self.duration_s:
            self._take(reader.poll(0.1))
            if worker.poll() is not None:
                raise SystemExit(f"the worker exited: see {self.workdir / 'worker.log'}")

    def _print_windows(self) -> None:
        """Print each window once the next one is half over (its pages' decisions are in)."""
        while self.printed < len(self.windows) - 1:
            due = self.started + (self.printed + 1.5) * self.window_s
            if time.time() < due:
                time.sleep(min(1.0, due - time.time()))
                continue
            with self.printing:
                if self.printed < len(self.windows) - 1:
                    self._print_window(self.printed)

    def _take(self, records: list[Record]) -> None:
        now = time.time()
        for record in records:
            value = record.value or b""
            page, found = _PAGE.search(value), _FETCHED_AT.search(value)
            if _CORRECTS.search(value) or not page or not found:
                continue
            number, sent = int(page.group(1)), float(found.group(1))
            if number in self.decided:
                continue  # a redelivery
            self.decided.add(number)
            if self.trace is not None and number % 10 == 0:
                self.trace.write(f"{sent:.3f},{now - sent:.4f}\n")
            index = min(int((sent - self.started) // self.window_s), len(self.windows) - 1)
            self.windows[max(index, 0)].latencies.append(now - sent)

    def _drain(self, reader: TopicReader, quiet_s: float = 30.0) -> None:
        """After the last page: read until every page has its decision, or nothing came for
        ``quiet_s``."""
        last = time.monotonic()
        while len(self.decided) < self.sent and time.monotonic() - last < quiet_s:
            records = reader.poll(0.2)
            if records:
                last = time.monotonic()
                self._take(records)
        with self.printing:
            while self.printed < len(self.windows):
                self._print_window(self.printed)

    def _print_window(self, index: int) -> None:
        latencies = list(self.windows[index].latencies)  # a copy: the reader still appends
        ms = np.array(latencies) * 1000 if latencies else np.array([np.nan])
        p50, p99 = np.percentile(ms, [50, 99])
        print(
            f"window {index + 1} ({index * self.args.window_minutes}-"
            f"{(index + 1) * self.args.window_minutes} min): {len(latencies)} pages, "
            f"latency p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {np.nanmax(ms):.0f} ms; "
            f"broker RSS {_rss(self.stack.kafka.pid)} MiB, redis RSS "
            f"{_rss(self.stack.redis.pid)} MiB; {self._generations()}; "
            f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; CPU % of a core: "
            f"{self.meter.report() if self.meter else '-'}; "
            f"fixed work {fixed_work_seconds():.3f} s CPU"
            + self.batches.window(self.started + index * self.window_s, self.window_s),
            flush=True,
        )
        self.meter = self._cpu_meter()
        self.printed = index + 1

    def _cpu_meter(self) -> CpuMeter:
        return CpuMeter(
            {
                "broker": self.stack.kafka.pid,
                "redis": self.stack.redis.pid,
                "worker": self.worker_pid,
                "this script": os.getpid(),
            }
        )

    def _generations(self) -> str:
        names = TopicAdmin(self.config.kafka(client_id="soak-admin")).names()
        alive = generations_of(self.config.pages_topic, names)
        deleted = len(set(self.roller.deleted)) if self.roller is not None else 0
        return (
            f"{len(names)} topics (pages generations alive: {alive or '-'}, "
            f"{deleted} topic generations deleted so far)"
        )

    def _summary(self) -> int:
        missing = self.sent - len(self.decided)
        first, last = self.windows[0].latencies, self.windows[-1].latencies
        p99_first = float(np.percentile(first, 99) * 1000) if first else float("nan")
        p99_last = float(np.percentile(last, 99) * 1000) if last else float("nan")
        ratio = p99_last / p99_first if p99_first else float("nan")
        print(
            f"sent {self.sent} pages, {len(self.decided)} decided, {missing} without a decision; "
            f"p99 last window / first = {p99_last:.1f} / {p99_first:.1f} ms = {ratio:.2f}x "
            f"(target <= 1.5x); broker RSS at the end {_rss(self.stack.kafka.pid)} MiB"
        )
        return 0 if missing == 0 else 1


def _rss(pid: int | None) -> str:
    if pid is None:
        return "-"
    try:
        return f"{psutil.Process(pid).memory_info().rss / MIB:.0f}"
    except psutil.Error:
        return "-"


def _wait_for(log: Path, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise SystemExit(f"worker never joined its group:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30, help="how long to send pages")
    parser.add_argument("--rate", type=int, default=1000, help="offered load, pages/s")
    parser.add_argument("--window-minutes", type=float, default=5, help="report period")
    parser.add_argument("--generations", choices=["on", "off"], default="on")
    parser.add_argument("--generation-records", type=int, default=0, help="0: the stack's default")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--words",
        type=int,
        default=900,
        help="words per page; the broker keeps every page (it frees nothing unless generations "
        "are deleted), ~11 MB/s at 1,000 pages/s of 900 words",
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        help="JSONL corpus of {'text': ...} lines (e.g. tools/build_corpus.py's) whose texts make "
        "the pages instead of synthetic ones; --words is then ignored",
    )
    parser.add_argument(
        "--stream",
        choices=STREAMS,
        default="recombined",
        help="how the pages are made (see page_streams); renamed needs --corpus",
    )
    parser.add_argument("--transactional", choices=["on", "off"], default="on")
    parser.add_argument("--fetch-wait-ms", type=int, default=0, help="0: the worker's default")
    parser.add_argument("--keep-log", type=Path, help="copy the worker log here")
    parser.add_argument(
        "--trace", type=Path, help="write 'send time,latency' of every 10th page here (CSV)"
    )
    parser.add_argument(
        "--log",
        type=Path,
        help="write this script's own clients' log (its decisions reader, the roller) here, "
        "at INFO with millisecond times, to set beside --trace and --keep-log",
    )
    args = parser.parse_args()
    if args.log:
        logging.basicConfig(
            filename=args.log, level=logging.INFO, format="%(asctime)s %(name)s: %(message)s"
        )
    kind = f"{args.words} words" if args.corpus is None else f"texts of {args.corpus}"
    kind += f", {args.stream}"
    print(
        f"soak: {args.rate} pages/s of {kind} for {args.minutes:g} min, "
        f"generations {args.generations} transactions {args.transactional} "
        f"({args.generation_records or 'default'} records a partition), "
        f"{args.partitions} partitions; "
        f"uptime: {_uptime()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStack(Path(tmp) / "stack") as stack:
        soak = Soak(args, stack, Path(tmp))
        try:
            code = soak.run()
        finally:
            if args.keep_log:
                args.keep_log.write_bytes((Path(tmp) / "worker.log").read_bytes())
    print(f"uptime at the end: {_uptime()}")
    raise SystemExit(code)


def _uptime() -> str:
    found = subprocess.run(["uptime"], check=False, capture_output=True, text=True)
    return found.stdout.strip()


if __name__ == "__main__":
    main()
