"""How long this whole process was stopped: paused (Ctrl-Z, a debugger) or not given a core.

The spider closes as ``dedup_stalled`` when no decision came for ``NEARDUP_DECISION_TIMEOUT``;
time it was itself stopped must not count, or a spider paused past the timeout closes the
moment it resumes, before its first look at the decisions that came meanwhile. A gap between
two ticks of its poll loop does not tell a stopped process from a busy reactor (a Redis call
blocking for seconds while Redis is down, when the workers are stalled indeed). A thread that
only sleeps does: it runs whenever the process runs, whatever the reactor does, so a gap
between two of its wake-ups is time the process did not run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Seconds between two wake-ups of the watching thread.
PERIOD = 0.25


class ProcessStops:
    """A daemon thread keeping the longest lateness of its wake-ups since the last ``take``."""

    def __init__(self, period: float = PERIOD, clock: Callable[[], float] = time.monotonic):
        self.period = period
        self.clock = clock
        self._lock = threading.Lock()
        self._longest = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="neardup-stops", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def take(self) -> float:
        """Seconds the process was stopped at once, at most (the longest late wake-up) since
        the last call; 0 when it ran throughout."""
        with self._lock:
            longest, self._longest = self._longest, 0.0
        return longest

    def _watch(self) -> None:
        woke = self.clock()
        while not self._stop.wait(self.period):
            now = self.clock()
            self.late(now - woke - self.period)
            woke = now

    def late(self, seconds: float) -> None:
        """One wake-up ``seconds`` late (the thread's step; a test's stand-in for a pause)."""
        with self._lock:
            self._longest = max(self._longest, seconds)
