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
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from dedup_worker.contract.messages import Decision, decode_decision

REPO = Path(__file__).resolve().parents[3]


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
        """The real ``dedup-worker`` (the console script if installed, else its module)."""
        script = shutil.which("dedup-worker", path=str(Path(sys.executable).parent))
        command = [script] if script else [sys.executable, "-m", "dedup_worker.worker.main"]
        return self._spawn(command, name, {"NEARDUP_LOG_LEVEL": "INFO"})

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

    def _spawn(
        self, command: list[str], name: str, extra: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, **self.vars, **extra},
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


def read_topic(bootstrap: str, topic: str, quiet: float = 1.0) -> list[Any]:
    """Every record of ``topic`` (read_committed), read until ``quiet`` seconds bring nothing."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        partitions = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        records: list[Any] = []
        last = time.monotonic()
        while time.monotonic() - last < quiet:
            for batch in consumer.poll(200).values():
                records.extend(batch)
                last = time.monotonic()
        return records
    finally:
        consumer.close()


def final_decisions(records: Iterable[Any]) -> dict[str, Decision]:
    """Per URL, the decision that stands: a correction wins over any other decision."""
    final: dict[str, Decision] = {}
    for record in records:
        decision = decode_decision(record.value)
        current = final.get(decision.url)
        if current is None or decision.corrects or not current.corrects:
            final[decision.url] = decision
    return final


def stats_line(log: str, key: str) -> int:
    """A ``'dedup/...': N`` value from Scrapy's stats dump at the end of a crawler's log."""
    marker = f"'{key}': "
    at = log.rfind(marker)
    if at < 0:
        return 0
    digits = log[at + len(marker) :].split(",", 1)[0].split("}", 1)[0].strip()
    return int(float(digits))
