"""``neardup crawl``: a whole crawl from two commands.

One run owns everything it starts and stops all of it, in this order, also on Ctrl-C or errors:
the embedded stack (only when no ``NEARDUP_KAFKA_BOOTSTRAP``/``NEARDUP_REDIS_URL`` is set), the
topics, a decisions recorder (:mod:`neardup.crawl_record`; positioned at the topic's end
*before* the crawl, so only this run's decisions land in ``--out``), N ``dedup-worker``
processes and the spider (``scrapy crawl neardup``). The spider closes when no decision is
owed; the workers are then stopped with SIGTERM (they finish their batch and commit), and the
recorder drains to the topic's end, so ``--out`` also holds what they decided after the spiders
exited.
On Ctrl-C the spiders get SIGINT first and close (handing what they owe to the crawl's shared
list) while the workers still decide their last pages; then the same.

Children run on this interpreter (``sys.executable -m ...``), never looked up on ``PATH``: an
unactivated virtualenv, a pipx install or a system install all start the workers and the spider
of the same installation as the ``neardup`` command itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from dedup_worker.adapters.kafka import (
    MIN_ROLL_INTERVAL_S,
    GenerationRoller,
    RollerThread,
    TopicAdmin,
    check_access,
    ensure_topics,
)
from dedup_worker.worker.config import WorkerConfig, load_config
from neardup.crawl_outcome import (
    STATS_FILE,
    exit_code,
    failure,
    killed_line,
    load_rules,
    merge_stats,
    outcome_lines,
    read_stats,
    spiders_line,
)
from neardup.crawl_record import Recorder, Tally, summary_lines
from neardup.errors import NeardupError
from neardup.rules_table import RuleRow, rules_path, write_rules

logger = logging.getLogger(__name__)

PROGRESS_EVERY = 2.0
#: ``CONCURRENT_REQUESTS_PER_DOMAIN`` of ``crawler.settings``: what one spider sends a host at once.
PER_HOST_REQUESTS = 8
#: A dedup worker, on this interpreter (the ``dedup-worker`` console script's module).
_WORKER_ARGV = [sys.executable, "-m", "dedup_worker.worker.main"]


class CrawlError(NeardupError):
    """The crawl could not be set up or did not complete; the message says why."""


@dataclass(frozen=True)
class CrawlOptions:
    seeds: tuple[str, ...]
    out: Path
    workers: int = 2
    #: Spider processes of the crawl (``--crawlers``): one crawl id, work shared between them
    #: (:mod:`crawler.sharing`); ``max_pages`` is split between them.
    crawlers: int = 1
    max_pages: int | None = None
    max_depth: int | None = None
    allowed_domains: tuple[str, ...] = ()
    state_dir: Path = Path(".neardup")
    crawl_id: str = ""
    partitions: int = 4
    progress: bool = True
    #: The environment the crawl reads its services from and hands its children (default: this
    #: process's). ``neardup demo`` passes one without ``NEARDUP_*``, so it always runs on a
    #: fresh embedded stack.
    environment: Mapping[str, str] | None = None

    def base_environment(self) -> dict[str, str]:
        return dict(os.environ if self.environment is None else self.environment)


#: The exit code of a crawl stopped by Ctrl-C (a shell's for SIGINT).
STOPPED = 130
#: How long the spiders may take to close after a Ctrl-C (Scrapy lets the downloads in
#: progress finish, then the spider waits ``NEARDUP_STOP_GRACE`` for decisions at most).
STOP_WAIT_S = 120.0


class CrawlRun:
    """Starts and always stops the parts of one crawl."""

    def __init__(self, options: CrawlOptions) -> None:
        self.options = options
        self.children: list[subprocess.Popen[bytes]] = []
        self.spiders: list[subprocess.Popen[bytes]] = []
        self.tally = Tally()
        self.started = time.monotonic()
        self.stats: dict[str, object] = {}
        self.each_stats: list[dict[str, object]] = []  # one per spider (--crawlers)
        self.rules: list[RuleRow] = []
        self.embedded = False

    def run(self) -> int:
        from neardup.stack import EmbeddedStack

        bootstrap, redis_url = _external_services(self.options.base_environment())
        self.options.state_dir.mkdir(parents=True, exist_ok=True)
        self.options.out.parent.mkdir(parents=True, exist_ok=True)  # as Scrapy's -O does
        stack = None if bootstrap else EmbeddedStack(self.options.state_dir / "stack").start()
        self.embedded = stack is not None
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
        env = self._env(bootstrap, redis_url)
        # The workers' and the spider's configuration: the topics are the ones they use.
        config = load_config([], env)
        kafka = config.kafka(client_id="neardup-crawl")
        check_access(kafka)
        ensure_topics(kafka, _topics(config), self._partitions(), config.replication)
        with self._rolling(config), self.options.out.open("wb") as out:
            recorder = Recorder(kafka, config.decisions_topic, out, self.tally)
            recorder.start()
            try:
                for number in range(self.options.workers):
                    # Distinct ids: a worker's transactional id derives from them; equal ones fence.
                    worker_env = {**env, "NEARDUP_WORKER_ID": f"crawl-worker-{number}"}
                    self.children.append(self._spawn(_WORKER_ARGV, worker_env, f"worker-{number}"))
                spiders = [self._spawn_spider(env, n) for n in range(self.options.crawlers)]
                code = self._wait_or_stop(spiders)
                # The workers may still be deciding pages the spiders published as they
                # stopped: stopped first, every decision they make is on the topic to drain.
                self._stop_children(workers_only=True)
                recorder.drain()
            finally:  # before the file closes: the recorder writes to it
                recorder.thread.stop()
        self._collect(config, [self._stats_file(n) for n in range(self.options.crawlers)])
        ended = exit_code(code, self.stats)
        self._summary(ended, killed_line(code, self.options.crawl_id))
        return ended

    def _wait_or_stop(self, spiders: list[subprocess.Popen[bytes]]) -> int:
        """``_wait``; on Ctrl-C the spiders stop first while the workers still decide their
        last pages, so the spiders hand the links those decisions judge over to a later run
        (``NEARDUP_STOP_GRACE``). A worker that dies meanwhile does not cut that short; a second
        Ctrl-C, or ``STOP_WAIT_S``, does (what is not handed over yet then stays claimed).
        The exit code: a spider's that had failed before the Ctrl-C, else 130."""
        try:
            return self._wait(spiders)
        except KeyboardInterrupt:
            pass
        failed = next((s.returncode for s in spiders if s.poll() is not None and s.returncode), 0)
        print(
            "\nneardup crawl: stopping; the spiders hand what they owe over to a later run of "
            "this crawl (Ctrl-C again stops at once: what is not handed over yet stays in their "
            "journals, for a later run of the crawl against the same Redis)",
            file=sys.stderr,
            flush=True,
        )
        for spider in spiders:
            _signal_group(spider, signal.SIGINT)
        self._wait(spiders, deadline=time.monotonic() + STOP_WAIT_S)
        return failed or STOPPED

    def _spawn_spider(self, env: dict[str, str], number: int) -> subprocess.Popen[bytes]:
        stats_file = self._stats_file(number)
        stats_file.unlink(missing_ok=True)
        spider_env = {"NEARDUP_STATS_FILE": str(stats_file), **env}
        name = "spider" if number == 0 else f"spider-{number}"
        spider = self._spawn(self._spider_argv(), spider_env, name)
        self.children.append(spider)
        self.spiders.append(spider)
        return spider

    def _stats_file(self, number: int) -> Path:
        name = STATS_FILE if number == 0 else STATS_FILE.replace(".json", f"-{number}.json")
        return self.options.state_dir / name

    def _collect(self, config: WorkerConfig, stats_files: list[Path]) -> None:
        """The spiders' counts, and the crawl's URL rules from Redis while it still runs."""
        self.each_stats = [read_stats(path) for path in stats_files]
        self.stats = merge_stats(self.each_stats)
        try:
            self.rules = load_rules(config, str(self.stats.get("crawl_id", "")))
        except NeardupError as exc:
            logger.warning("cannot read the crawl's URL rules: %s", exc)
        if self.rules:
            write_rules(rules_path(self.options.out), self.rules)

    @contextlib.contextmanager
    def _rolling(self, config: WorkerConfig) -> Iterator[None]:
        """Roll the topic generations while the crawl runs (when they are on): this run owns
        the stack, so it is the one roller."""
        if not config.topic_generations:
            yield
            return
        roller = RollerThread(generation_roller(config, self._partitions()))
        roller.start()
        try:
            yield
        finally:
            roller.stop()

    def _env(self, bootstrap: str, redis_url: str) -> dict[str, str]:
        env = self.options.base_environment()
        if self.embedded:
            # Tansu's memory storage never frees a record: roll generations (README, "The
            # embedded stack's limits"), unless the environment says otherwise.
            env.setdefault("NEARDUP_TOPIC_GENERATIONS", "on")
        env.update(
            NEARDUP_KAFKA_BOOTSTRAP=bootstrap,
            NEARDUP_REDIS_URL=redis_url,
            NEARDUP_PARTITIONS=str(self._partitions()),
            SCRAPY_SETTINGS_MODULE="crawler.settings",
        )
        if self.options.crawl_id:
            env["NEARDUP_CRAWL_ID"] = self.options.crawl_id
        return env

    def _partitions(self) -> int:
        return max(self.options.partitions, self.options.workers, 1)

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
        if o.crawlers > 1:
            # As polite to each host as one spider: the per-host concurrency is split too.
            per_host = max(1, PER_HOST_REQUESTS // o.crawlers)
            argv += ["-s", f"CONCURRENT_REQUESTS_PER_DOMAIN={per_host}"]
        if o.max_pages:
            # Split between the crawlers: a process with places left takes the others' links.
            argv += ["-a", f"max_pages={-(-o.max_pages // o.crawlers)}"]
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

    def _wait(self, spiders: list[subprocess.Popen[bytes]], deadline: float | None = None) -> int:
        """The first failing spider's exit code, 0 when every spider succeeded. With a
        ``deadline`` (stopping): until then at most, whatever the workers do."""
        last = 0.0
        while any(spider.poll() is None for spider in spiders):
            if deadline is not None:
                if time.monotonic() > deadline:
                    logger.warning("the spiders did not stop in %.0f s; stopping them", STOP_WAIT_S)
                    break
                time.sleep(0.2)
                continue
            dead = [c for c in self.children if c not in spiders and c.poll() is not None]
            if dead:
                logs = self.options.state_dir
                code = dead[0].returncode
                raise CrawlError(f"a dedup worker exited with code {code}; see its log in {logs}")
            if self.options.progress and time.monotonic() - last >= PROGRESS_EVERY:
                last = time.monotonic()
                print(self._progress_line(), file=sys.stderr, flush=True)
            time.sleep(0.2)
        return next((s.returncode for s in spiders if s.returncode), 0)

    def _progress_line(self) -> str:
        counts = self.tally.counts()
        decided = sum(counts.values())
        elapsed = time.monotonic() - self.started
        dups = counts["near_duplicate"] + counts["exact_duplicate"]
        return (
            f"[{elapsed:6.1f}s] {decided} pages decided ({decided / max(elapsed, 1e-9):.1f}/s): "
            f"{counts['unique']} unique, {dups} duplicates, "
            f"{self.tally.suppressed_links()} outlinks suppressed"
        )

    def _stop_children(self, workers_only: bool = False) -> None:
        """SIGTERM, and SIGKILL after 15 s, to every child (or to the workers only: a worker
        finishes and commits its batch, then leaves its group)."""
        stopping = [c for c in self.children if not (workers_only and c in self.spiders)]
        for child in stopping:
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in stopping:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child, signal.SIGKILL)
                child.wait(timeout=5)
        self.children = [c for c in self.children if c not in stopping]

    def _summary(self, code: int, killed: str | None = None) -> None:
        elapsed = time.monotonic() - self.started
        outcome = {0: "finished", STOPPED: "stopped"}.get(code, f"ended with code {code}")
        print(f"\nneardup crawl {outcome} in {elapsed:.1f}s")
        reason = killed or failure(self.stats)
        if reason is not None:
            print(f"neardup crawl: error: {reason}", file=sys.stderr, flush=True)
        with self.tally.lock:
            lines = summary_lines(self.tally.summary)
        print("\n".join(lines))
        print("\n".join(outcome_lines(self.stats, self.rules)))
        if len(self.each_stats) > 1:
            print(spiders_line(self.each_stats))
        print(f"decisions: {self.options.out} ({self.tally.summary.lines} lines)")
        if self.rules:
            print(f"URL rules: {rules_path(self.options.out)} (neardup report shows them)")
        print(f"logs: {self.options.state_dir}")


def _signal_group(child: subprocess.Popen[bytes], sig: int) -> None:
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, sig)


def _external_services(environment: Mapping[str, str]) -> tuple[str, str]:
    bootstrap = environment.get("NEARDUP_KAFKA_BOOTSTRAP", "")
    redis_url = environment.get("NEARDUP_REDIS_URL", "")
    if bool(bootstrap) != bool(redis_url):
        raise CrawlError(
            "set both NEARDUP_KAFKA_BOOTSTRAP and NEARDUP_REDIS_URL to use your own services, "
            "or neither to use the embedded stack"
        )
    return bootstrap, redis_url


def generation_roller(config: WorkerConfig, partitions: int) -> GenerationRoller:
    """The roller of the pages and decisions generations these settings describe."""
    return GenerationRoller(
        TopicAdmin(config.kafka(client_id="neardup-roller")),
        [config.pages_topic, config.decisions_topic],
        roll_records=config.generation_records,
        partitions=partitions,
        replication=config.replication,
        min_roll_s=MIN_ROLL_INTERVAL_S,
    )


def _topics(config: WorkerConfig) -> list[str]:
    return [config.pages_topic, config.decisions_topic, config.dlq_topic]
