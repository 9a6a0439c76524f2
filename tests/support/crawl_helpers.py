"""Helpers of the crawler's end-to-end tests: crawler and worker subprocesses, topic readers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from dedup_worker.adapters.kafka import KafkaSettings, Record, TopicReader
from dedup_worker.contract.messages import Decision, decode_decision
from dedup_worker.contract.reading import fold_decisions
from tests.support.paths import REPO

#: What ``dedup-worker`` logs once it consumes (``dedup_worker.worker.service``).
WORKER_RUNNING = "worker running ("
#: How long a worker may take to get there: generous, it is no figure of speed.
WORKER_START_S = 300.0


@dataclass
class Env:
    """One test's crawl: topics, crawl id, Kafka and Redis, as ``NEARDUP_*`` variables."""

    vars: dict[str, str]
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return self.vars["NEARDUP_KAFKA_BOOTSTRAP"]

    def worker(self, name: str = "worker") -> subprocess.Popen[bytes]:
        """The real ``dedup-worker`` (the console script if installed, else its module), once
        it says it is running. Crawlers started before then wait for their first decision
        against ``NEARDUP_DECISION_TIMEOUT``, and a worker's start-up is not bounded by that:
        on a fresh clone it compiles its numba kernels first (~40 s on a busy 2-core
        machine, 2 s once cached)."""
        script = shutil.which("dedup-worker", path=str(Path(sys.executable).parent))
        command = [script] if script else [sys.executable, "-m", "dedup_worker.worker.main"]
        process = self._spawn(command, name, {"NEARDUP_LOG_LEVEL": "INFO"})
        deadline = time.monotonic() + WORKER_START_S
        while WORKER_RUNNING not in self.log(name, 10**6):
            assert process.poll() is None, f"{name} exited {process.returncode}:\n{self.log(name)}"
            assert time.monotonic() < deadline, f"{name} not running:\n{self.log(name)}"
            time.sleep(0.2)
        return process

    def crawler(
        self, name: str, seeds: str, *args: str, **settings: str
    ) -> subprocess.Popen[bytes]:
        """``scrapy crawl neardup`` from the repository root (where scrapy.cfg is)."""
        command = [sys.executable, "-m", "scrapy", "crawl", "neardup", "-a", f"seeds={seeds}"]
        for arg in args:
            command += ["-a", arg]
        for key, value in settings.items():
            command += ["-s", f"{key}={value}"]
        return self._spawn(command, name, {})

    def project_crawler(
        self, name: str, project: Path, spider: str, *args: str, items: Path, **settings: str
    ) -> subprocess.Popen[bytes]:
        """``scrapy crawl SPIDER -O ITEMS`` of another Scrapy project (its ``scrapy.cfg`` in
        ``project``), with this crawl's ``NEARDUP_*`` environment."""
        command = [sys.executable, "-m", "scrapy", "crawl", spider, "-O", str(items)]
        for arg in args:
            command += ["-a", arg]
        for key, value in settings.items():
            command += ["-s", f"{key}={value}"]
        return self._spawn(command, name, {}, cwd=project)

    def _spawn(
        self, command: list[str], name: str, extra: dict[str, str], cwd: Path = REPO
    ) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        env = {**os.environ, **self.vars, **extra}
        if cwd != REPO:
            env.pop("SCRAPY_SETTINGS_MODULE", None)  # the project's scrapy.cfg names its own
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        process.args = name  # for messages: which process
        self.processes.append(process)
        return process

    def log(self, name: str, tail: int = 6000) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else "(no log)"

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)


def wait_all(env: Env, processes: Iterable[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for process in processes:
        name = str(process.args)
        try:
            code = process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{name} still running:\n{env.log(name)}") from None
        assert code == 0, f"{name} exited {code}:\n{env.log(name)}"


def read_topic(bootstrap: str, topic: str, quiet: float = 1.0) -> list[Record]:
    """Every record of ``topic`` (read_committed), read until ``quiet`` seconds bring nothing."""
    reader = TopicReader(KafkaSettings(bootstrap), topic)
    try:
        reader.start("beginning")
        records: list[Record] = []
        last = time.monotonic()
        while time.monotonic() - last < quiet:
            batch = reader.poll(0.2)
            if batch:
                records.extend(batch)
                last = time.monotonic()
        return records
    finally:
        reader.close()


def final_decisions(records: Iterable[Record]) -> dict[str, Decision]:
    """Each page's standing decision (the contract's rule), by URL: these crawls fetch every
    URL once, which this checks (two pages of one URL would need the fetch time too)."""
    final = fold_decisions(decode_decision(record.value or b"") for record in records)
    by_url = {key.url: decision for key, decision in final.items()}
    assert len(by_url) == len(final), "a URL was decided as two pages (fetched twice)"
    return by_url


def stats_line(log: str, key: str) -> int:
    """A ``'dedup/...': N`` value from Scrapy's stats dump at the end of a crawler's log."""
    marker = f"'{key}': "
    at = log.rfind(marker)
    if at < 0:
        return 0
    digits = log[at + len(marker) :].split(",", 1)[0].split("}", 1)[0].strip()
    return int(float(digits))
