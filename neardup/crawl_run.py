"""``neardup crawl``: a whole crawl from two commands.

One run owns everything it starts and stops all of it, in this order, also on Ctrl-C or errors:
the embedded stack (only when no ``NEARDUP_KAFKA_BOOTSTRAP``/``NEARDUP_REDIS_URL`` is set), the
topics, a decisions recorder (positioned at the topic's end *before* the crawl, so only this
run's decisions land in ``--out``), N ``dedup-worker`` processes and the spider (``scrapy crawl
neardup``). The spider closes when no decision is owed; the recorder then drains to the
topic's end and the workers are stopped with SIGTERM (they finish their batch and commit).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from neardup.errors import NeardupError

logger = logging.getLogger(__name__)

TOPICS = ("pages", "decisions", "pages.dlq")
PROGRESS_EVERY = 2.0


class CrawlError(NeardupError):
    """The crawl could not be set up or did not complete; the message says why."""


@dataclass(frozen=True)
class CrawlOptions:
    seeds: tuple[str, ...]
    out: Path
    workers: int = 2
    max_pages: int | None = None
    max_depth: int | None = None
    allowed_domains: tuple[str, ...] = ()
    state_dir: Path = Path(".neardup")
    crawl_id: str = ""
    partitions: int = 4
    progress: bool = True


@dataclass
class Tally:
    """What the recorder has seen: final verdict per page, corrections applied."""

    verdicts: dict[tuple[str, float], str] = field(default_factory=dict)
    corrected: set[tuple[str, float]] = field(default_factory=set)
    suppressed_links: int = 0
    lines: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, raw: bytes) -> None:
        from dedup_worker.contract.messages import decode_decision
        from dedup_worker.errors import ContractError

        try:
            decision = decode_decision(raw)
        except ContractError:
            return
        key = (decision.url, decision.fetched_at)
        with self.lock:
            self.lines += 1
            if key in self.corrected and not decision.corrects:
                return
            if decision.corrects:
                self.corrected.add(key)
            self.verdicts[key] = decision.verdict.value
            links = decision.evidence.get("suppressed_outlinks")
            self.suppressed_links += links if isinstance(links, int) else 0

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(self.verdicts.values())


class Recorder(threading.Thread):
    """Copies every decision of this run to the output file, and tallies them."""

    def __init__(self, bootstrap: str, topic: str, out: IO[bytes], tally: Tally) -> None:
        super().__init__(name="decisions-recorder", daemon=True)
        from kafka import KafkaConsumer, TopicPartition

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None
        )
        partitions = self.consumer.partitions_for_topic(topic) or {0}
        self.partitions = [TopicPartition(topic, p) for p in sorted(partitions)]
        self.consumer.assign(self.partitions)
        self.consumer.seek_to_end(*self.partitions)
        for tp in self.partitions:
            self.consumer.position(tp)  # resolve now: the crawl's decisions come after this
        self.out, self.tally = out, tally
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for records in self.consumer.poll(timeout_ms=200).values():
                for record in records:
                    self.out.write(record.value + b"\n")
                    self.tally.add(record.value)
            self.out.flush()

    def drain(self, timeout: float = 15.0) -> None:
        """Wait until everything on the topic now has been recorded, then stop."""
        ends = self.consumer.end_offsets(self.partitions)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.consumer.position(tp) >= ends[tp] for tp in self.partitions):
                break
            time.sleep(0.1)
        self.stopping.set()
        self.join(timeout=5)
        self.consumer.close()


class CrawlRun:
    """Starts and always stops the parts of one crawl."""

    def __init__(self, options: CrawlOptions) -> None:
        self.options = options
        self.children: list[subprocess.Popen[bytes]] = []
        self.tally = Tally()
        self.started = time.monotonic()

    def run(self) -> int:
        from neardup.stack import EmbeddedStack

        bootstrap, redis_url = _external_services()
        self.options.state_dir.mkdir(parents=True, exist_ok=True)
        stack = None if bootstrap else EmbeddedStack(self.options.state_dir / "stack").start()
        try:
            if stack is not None:
                bootstrap, redis_url = stack.bootstrap, stack.redis_url
                logger.info("embedded stack: kafka %s, redis %s", bootstrap, redis_url)
            return self._crawl(bootstrap, redis_url)
        finally:
            self._stop_children()
            if stack is not None:
                stack.close()

    def _crawl(self, bootstrap: str, redis_url: str) -> int:
        _create_topics(bootstrap, max(self.options.partitions, self.options.workers, 1))
        with self.options.out.open("wb") as out:
            recorder = Recorder(bootstrap, "decisions", out, self.tally)
            recorder.start()
            env = self._env(bootstrap, redis_url)
            for number in range(self.options.workers):
                # Distinct ids: a worker's transactional id derives from it, and equal ids fence.
                worker_env = {**env, "NEARDUP_WORKER_ID": f"crawl-worker-{number}"}
                self.children.append(self._spawn(["dedup-worker"], worker_env, f"worker-{number}"))
            spider = self._spawn(self._spider_argv(), env, "spider")
            self.children.append(spider)
            code = self._wait(spider)
            recorder.drain()
        self._summary(code)
        return code

    def _env(self, bootstrap: str, redis_url: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            NEARDUP_KAFKA_BOOTSTRAP=bootstrap,
            NEARDUP_REDIS_URL=redis_url,
            NEARDUP_PARTITIONS=str(max(self.options.partitions, self.options.workers, 1)),
            SCRAPY_SETTINGS_MODULE="crawler.settings",
        )
        if self.options.crawl_id:
            env["NEARDUP_CRAWL_ID"] = self.options.crawl_id
        return env

    def _spider_argv(self) -> list[str]:
        o = self.options
        argv = [
            sys.executable,
            "-m",
            "scrapy",
            "crawl",
            "neardup",
            "-a",
            "seeds=" + ",".join(o.seeds),
        ]
        if o.max_pages:
            argv += ["-a", f"max_pages={o.max_pages}"]
        if o.max_depth is not None:
            argv += ["-a", f"max_depth={o.max_depth}"]
        if o.allowed_domains:
            argv += ["-a", "allowed_domains=" + ",".join(o.allowed_domains)]
        return argv

    def _spawn(self, argv: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        log = (self.options.state_dir / f"{name}.log").open("ab")
        logger.info("starting %s: %s (log %s)", name, " ".join(argv), log.name)
        # Own process group: Ctrl-C reaches us only, and we stop each child deliberately.
        return subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def _wait(self, spider: subprocess.Popen[bytes]) -> int:
        last = 0.0
        while spider.poll() is None:
            dead = [c for c in self.children if c is not spider and c.poll() is not None]
            if dead:
                logs = self.options.state_dir
                code = dead[0].returncode
                raise CrawlError(f"a dedup worker exited with code {code}; see its log in {logs}")
            if self.options.progress and time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                print(self._progress_line(), file=sys.stderr, flush=True)
            time.sleep(0.2)
        return spider.returncode

    def _progress_line(self) -> str:
        counts = self.tally.counts()
        decided = sum(counts.values())
        elapsed = time.monotonic() - self.started
        dups = counts["near_duplicate"] + counts["exact_duplicate"]
        return (
            f"[{elapsed:6.1f}s] {decided} pages decided ({decided / max(elapsed, 1e-9):.1f}/s): "
            f"{counts['unique']} unique, {dups} duplicates, "
            f"{self.tally.suppressed_links} outlinks suppressed"
        )

    def _stop_children(self) -> None:
        for child in self.children:
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in self.children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child, signal.SIGKILL)
                child.wait(timeout=5)
        self.children.clear()

    def _summary(self, code: int) -> None:
        counts = self.tally.counts()
        elapsed = time.monotonic() - self.started
        outcome = "finished" if code == 0 else f"ended with code {code}"
        print(f"\nneardup crawl {outcome} in {elapsed:.1f}s")
        print(f"{'verdict':<18}{'pages':>8}")
        for verdict in ("unique", "near_duplicate", "exact_duplicate", "changed", "unchanged"):
            print(f"{verdict:<18}{counts.get(verdict, 0):>8}")
        print(f"{'total':<18}{sum(counts.values()):>8}")
        corrections = len(self.tally.corrected)
        print(f"outlinks suppressed: {self.tally.suppressed_links}; corrections: {corrections}")
        print(f"decisions: {self.options.out} ({self.tally.lines} lines)")
        print(f"logs: {self.options.state_dir}")


def _signal_group(child: subprocess.Popen[bytes], sig: int) -> None:
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, sig)


def _external_services() -> tuple[str, str]:
    bootstrap = os.environ.get("NEARDUP_KAFKA_BOOTSTRAP", "")
    redis_url = os.environ.get("NEARDUP_REDIS_URL", "")
    if bool(bootstrap) != bool(redis_url):
        raise CrawlError(
            "set both NEARDUP_KAFKA_BOOTSTRAP and NEARDUP_REDIS_URL to use your own services, "
            "or neither to use the embedded stack"
        )
    return bootstrap, redis_url


def _create_topics(bootstrap: str, partitions: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    try:
        existing = set(admin.list_topics())
        wanted = [NewTopic(t, partitions, 1) for t in TOPICS if t not in existing]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):  # another run created it first
                admin.create_topics(wanted)
    finally:
        admin.close()
