"""Prometheus metrics of one worker, served over HTTP when a port is configured.

Each ``WorkerMetrics`` owns its registry, so several workers in one process (the tests) do not
collide. Probe latency is measured by wrapping the index (``InstrumentedIndex``), so it needs
nothing from the engine; candidates per probe come from each decision's evidence.
"""

from __future__ import annotations

import collections
import gc
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from dedup_worker.contract.messages import Decision
from dedup_worker.core.index_api import HammingIndex, I32Array, Matches, U64Array

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
        self.candidates = CountHistogram(
            "neardup_worker_candidates_per_probe",
            "index entries within k found for one page",
            _CANDIDATE_BUCKETS,
            self.registry,
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

    def observe_decisions(self, decisions: Sequence[Decision]) -> None:
        # A batch at a time: a labels() lookup and a Histogram.observe per decision cost ~2 us
        # a page on the main thread (a StrEnum verdict is its value, for the label).
        counts = collections.Counter((d.verdict, d.corrects) for d in decisions)
        for (verdict, corrects), count in counts.items():
            self.decisions.labels(verdict, str(corrects).lower()).inc(count)
        found = [d.evidence.get("candidates") for d in decisions if not d.corrects]
        self.candidates.observe_many([c for c in found if isinstance(c, int)])

    def observe_lag(self, lag: Mapping[tuple[str, int], int]) -> None:
        for (topic, partition), behind in lag.items():
            self.lag.labels(topic, str(partition)).set(behind)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """A sample's current value (0 if absent): for tests and the benchmark."""
        found = self.registry.get_sample_value(name, dict(labels or {}))
        return 0.0 if found is None else found


class CountHistogram(Collector):
    """A Prometheus histogram fed a batch of values at once (``Histogram.observe`` costs
    ~0.7 us a value, and the worker has one per page); exposed like ``Histogram``'s."""

    def __init__(
        self, name: str, doc: str, bounds: Sequence[float], registry: CollectorRegistry
    ) -> None:
        self._name, self._doc = name, doc
        self._bounds = np.asarray(bounds, dtype=np.float64)
        self._counts = np.zeros(len(bounds) + 1, dtype=np.int64)  # the last: above all bounds
        self._sum = 0.0
        self._lock = threading.Lock()  # the HTTP server's thread collects
        registry.register(self)

    def observe_many(self, values: Sequence[float]) -> None:
        if not values:
            return
        at = np.searchsorted(self._bounds, np.asarray(values, dtype=np.float64), side="left")
        counts = np.bincount(at, minlength=self._counts.size)
        with self._lock:
            self._counts += counts
            self._sum += float(sum(values))

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            cumulative = np.cumsum(self._counts).tolist()
            total = self._sum
        buckets = [(_le(b), c) for b, c in zip(self._bounds.tolist(), cumulative, strict=False)]
        family = HistogramMetricFamily(self._name, self._doc)
        family.add_metric([], [*buckets, ("+Inf", cumulative[-1])], total)
        yield family


def _le(bound: float) -> str:
    """A bucket's ``le`` label as prometheus_client spells it (``1.0``, ``+Inf``)."""
    return str(float(bound))


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

    def query(self, fingerprints: U64Array, margins: I32Array | None = None) -> Matches:
        with self._seconds.time():
            return self._index.query(fingerprints, margins)

    def probe_insert(
        self, fingerprints: U64Array, ids: U64Array, margins: I32Array | None = None
    ) -> Matches:
        started = time.perf_counter()
        try:
            return self._index.probe_insert(fingerprints, ids, margins)
        finally:
            self._seconds.observe(time.perf_counter() - started)

    def mutual(self, diff: int) -> bool:
        return self._index.mutual(diff)

    def insert(self, fingerprints: U64Array, ids: U64Array) -> None:
        self._index.insert(fingerprints, ids)

    def delete(self, fingerprints: U64Array, ids: U64Array) -> int:
        return self._index.delete(fingerprints, ids)
