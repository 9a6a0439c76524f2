"""Page streams that keep flowing while a test acts, and waiting on a worker's log.

Everything talks to the session's real Tansu broker; nothing is mocked.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from dedup_worker.adapters.kafka import KafkaSettings, Sender
from dedup_worker.contract.messages import Page
from tests.support.worker_helpers import WorkerProcess, produce_pages


@contextmanager
def trickle(
    bootstrap: str, topic: str, pages: list[Page], chunk: int = 25, pause: float = 0.05
) -> Iterator[threading.Event]:
    """Produce ``pages`` in small chunks in the background (a stream, not one burst).

    Each chunk takes a new producer, whose first send waits ~0.5 s (librdkafka's idempotent
    producer asks for its id then), so a chunk goes out about every ``pause`` + 0.5 s. Set the
    yielded event once the test has done what needed a flowing stream: the rest of the pages
    then go out at once instead of taking that pace to the end."""
    rush = threading.Event()

    def run() -> None:
        lo = 0
        while lo < len(pages):
            step = len(pages) - lo if rush.is_set() else chunk
            produce_pages(bootstrap, topic, pages[lo : lo + step])
            lo += step
            rush.wait(pause)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield rush
    finally:
        rush.set()
        thread.join(300)


class Flow:
    """Pages produced by a background thread, ``chunk`` every ``pause`` seconds, until they run
    out or ``stop()``; ``produced`` is what was sent so far. A stream that is still flowing when
    the test acts (restarts, kills) and stops when the test says."""

    def __init__(
        self, bootstrap: str, topic: str, pages: list[Page], chunk: int = 10, pause: float = 0.2
    ) -> None:
        self.produced: list[Page] = []
        self._stop = threading.Event()
        self._producer = Sender(KafkaSettings(bootstrap), linger_ms=5)
        self._thread = threading.Thread(
            target=self._run, args=(topic, pages, chunk, pause), daemon=True
        )
        self._thread.start()

    def _run(self, topic: str, pages: list[Page], chunk: int, pause: float) -> None:
        for lo in range(0, len(pages), chunk):
            if self._stop.is_set():
                break
            for p in pages[lo : lo + chunk]:
                self._producer.send(topic, p.host.encode(), p.to_json())
            self._producer.flush()
            self.produced.extend(pages[lo : lo + chunk])
            self._stop.wait(pause)

    @property
    def flowing(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> list[Page]:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the page stream did not stop"
        return list(self.produced)


def wait_for_log(worker: WorkerProcess, pattern: str, timeout: float = 120) -> None:
    """Wait for ``pattern`` in the worker's log: generous, a cold numba cache compiles every
    kernel at start-up (warm_up), and this is no figure of speed."""
    deadline = time.monotonic() + timeout
    while not re.search(pattern, worker.full_log()):
        assert worker.proc.poll() is None, f"worker exited:\n{worker.log_text()}"
        assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n{worker.log_text()}"
        time.sleep(0.1)
