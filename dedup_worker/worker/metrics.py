"""Prometheus metrics of one worker, served over HTTP when a port is configured.

Each ``WorkerMetrics`` owns its registry, so several workers in one process (the tests) do not
collide. Probe latency is measured by wrapping the index (``InstrumentedIndex``), so it needs
nothing from the engine; candidates per probe come from each decision's evidence.
"""

from __future__ import annotations

import collections
import gc
import logging
import time
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from dedup_worker.contract.messages import Decision
from dedup_worker.core.index_api import HammingIndex, Matches, U64Array

logger = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
_SIZE_BUCKETS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
_CANDIDATE_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128)
#: CPython's oldest generation: collecting it is a full collection.
_OLDEST = 2


class WorkerMetrics:
    """The worker's counters, histograms and gauges (names prefixed ``neardup_worker_``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.pages = self._counter("pages", "records consumed from the pages topic")
        self.decisions = Counter(
            "neardup_worker_decisions",
            "decisions published, by verdict and whether they correct an earlier one",
            ["verdict", "corrects"],
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "neardup_worker_dead_letters",
            "records sent to the dead-letter topic, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.retries = self._counter("backend_retries", "batches retried after BackendUnavailable")
        self.prefetched_batches = self._counter(
            "prefetched_batches",
            "batches polled and prepared while the previous one was decided (a backlog)",
        )
        # Always 0 since batches no longer commit in a helper thread (README, "Measured
        # figures"); still exported so that dashboards reading it do not break.
        self.overlapped_commits = self._counter(
            "overlapped_commits", "always 0: batches no longer commit while the next is decided"
        )
        self.probe_seconds = self._histogram("probe_seconds", "one index probe_insert call")
        self.engine_seconds = self._histogram("engine_seconds", "engine.process of one batch")
        self.commit_seconds = self._histogram(
            "commit_seconds", "producing one batch's decisions and committing them"
        )
        self.batch_seconds = self._histogram("batch_seconds", "one batch: decode to commit")
        self.page_age_seconds = self._histogram(
            "page_age_seconds", "a batch's oldest page at poll: now - fetched_at"
        )
        self.batch_size = Histogram(
            "neardup_worker_batch_records",
            "records per batch",
            buckets=_SIZE_BUCKETS,
            registry=self.registry,
        )
        self.candidates = Histogram(
            "neardup_worker_candidates_per_probe",
            "index entries within k found for one page",
            buckets=_CANDIDATE_BUCKETS,
            registry=self.registry,
        )
        self.gc_pause_seconds = Histogram(
            "neardup_worker_gc_pause_seconds",
            "one cyclic garbage collection of the process (it holds every thread), by generation",
            ["generation"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.lag = Gauge(
            "neardup_worker_consumer_lag",
            "records behind the end of the partition",
            ["topic", "partition"],
            registry=self.registry,
        )

    def _counter(self, name: str, doc: str) -> Counter:
        return Counter(f"neardup_worker_{name}", doc, registry=self.registry)

    def _histogram(self, name: str, doc: str) -> Histogram:
        return Histogram(
            f"neardup_worker_{name}", doc, buckets=_LATENCY_BUCKETS, registry=self.registry
        )

    def serve(self, port: int) -> None:
        """Expose ``/metrics`` on ``port`` (a daemon thread)."""
        start_http_server(port, registry=self.registry)
        logger.info("metrics on http://0.0.0.0:%d/metrics", port)

    def observe_decisions(self, decisions: Iterable[Decision]) -> None:
        # Counted per label first: a labels() lookup per decision cost ~2% of the worker.
        counts: collections.Counter[tuple[str, bool]] = collections.Counter()
        for decision in decisions:
            counts[(decision.verdict, decision.corrects)] += 1  # a StrEnum member is its value
            candidates = decision.evidence.get("candidates")
            if not decision.corrects and isinstance(candidates, int):
                self.candidates.observe(candidates)
        for (verdict, corrects), count in counts.items():
            self.decisions.labels(verdict, str(corrects).lower()).inc(count)

    def observe_lag(self, lag: Mapping[tuple[str, int], int]) -> None:
        for (topic, partition), behind in lag.items():
            self.lag.labels(topic, str(partition)).set(behind)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """A sample's current value (0 if absent): for tests and the benchmark."""
        found = self.registry.get_sample_value(name, dict(labels or {}))
        return 0.0 if found is None else found


class GcPauses:
    """Times the process's cyclic garbage collections while entered (``gc.callbacks``).

    A collection runs in whichever thread allocates and holds the interpreter lock throughout,
    so a long one stalls the batch in flight: the worker's decision latency cannot be lower.
    Full collections walk every long-lived object the worker keeps (start-up's are frozen,
    ``main.run``; the record cache's are untracked, ``core.record_cache``); their longest since
    the last progress line is logged with it.
    """

    def __init__(self, metrics: WorkerMetrics) -> None:
        self._histogram = metrics.gc_pause_seconds
        self._started = 0.0
        self._longest_full = 0.0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._observe)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self._observe)

    def take_longest_full(self) -> float:
        """The longest full collection (seconds) since the last call; 0.0 if none ran."""
        longest, self._longest_full = self._longest_full, 0.0
        return longest

    def _observe(self, phase: str, info: Mapping[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        generation = info["generation"]
        self._histogram.labels(str(generation)).observe(pause)
        if generation == _OLDEST:
            self._longest_full = max(self._longest_full, pause)


class InstrumentedIndex:
    """A ``HammingIndex`` that times every call of the index it wraps."""

    def __init__(self, index: HammingIndex, metrics: WorkerMetrics) -> None:
        self._index = index
        self._seconds = metrics.probe_seconds

    @property
    def k(self) -> int:
        return self._index.k

    def __len__(self) -> int:
        return len(self._index)

    def query(self, fingerprints: U64Array) -> Matches:
        with self._seconds.time():
            return self._index.query(fingerprints)

    def probe_insert(self, fingerprints: U64Array, ids: U64Array) -> Matches:
        started = time.perf_counter()
        try:
            return self._index.probe_insert(fingerprints, ids)
        finally:
            self._seconds.observe(time.perf_counter() - started)

    def insert(self, fingerprints: U64Array, ids: U64Array) -> None:
        self._index.insert(fingerprints, ids)

    def delete(self, fingerprints: U64Array, ids: U64Array) -> int:
        return self._index.delete(fingerprints, ids)
