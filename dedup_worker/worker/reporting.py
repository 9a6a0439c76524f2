"""What a committed batch reports: metrics, a DEBUG line per batch, an INFO progress line."""

from __future__ import annotations

import logging
import time

from dedup_worker.adapters.kafka import Offsets, offsets_text
from dedup_worker.worker.batching import Batch, Encoded, Progress, Timing
from dedup_worker.worker.metrics import GcPauses, WorkerMetrics

logger = logging.getLogger(__name__)

#: How often an INFO line reports progress (per-batch lines are DEBUG).
PROGRESS_INTERVAL_S = 10.0


class BatchReporter:
    """Counts committed batches into the metrics and the periodic progress line."""

    def __init__(self, metrics: WorkerMetrics, gc_pauses: GcPauses | None = None) -> None:
        self.metrics = metrics
        self.gc_pauses = gc_pauses or GcPauses(metrics)
        self._progress = Progress(time.monotonic())

    def committed(
        self, batch: Batch, encoded: list[Encoded], timing: Timing, offsets: Offsets
    ) -> None:
        """A batch is committed: count it, log it (DEBUG) and the progress window (INFO)."""
        self._account(batch, encoded, timing)
        self._report_progress(len(batch.records), offsets)

    def _account(self, batch: Batch, encoded: list[Encoded], timing: Timing) -> None:
        decisions = [e.decision for e in encoded]
        self.metrics.pages.inc(len(batch.records))
        self.metrics.batch_size.observe(len(batch.records))
        self.metrics.engine_seconds.observe(timing.engine)
        self.metrics.commit_seconds.observe(timing.commit)
        self.metrics.batch_seconds.observe(timing.total)
        self.metrics.observe_decisions(decisions)
        for dead in batch.dead:
            self.metrics.dead_letters.labels(dead.reason).inc()
        corrections = len(decisions) - len(batch.pages)
        logger.debug(
            "batch of %d records: %d decisions (%d corrections), %d dead letters in %.1f ms "
            "(decode %.1f, engine %.1f, produce+commit %.1f)",
            len(batch.records),
            len(decisions),
            corrections,
            len(batch.dead),
            timing.total * 1000,
            timing.decode * 1000,
            timing.engine * 1000,
            timing.commit * 1000,
        )

    def _report_progress(self, records: int, offsets: Offsets) -> None:
        now = time.monotonic()
        progress = self._progress
        progress.records += records
        progress.offsets.update(offsets)
        if now - progress.since < PROGRESS_INTERVAL_S:
            return
        rate = progress.records / (now - progress.since)
        gc_ms = self.gc_pauses.take_longest_full() * 1000
        logger.info(
            "%d records in %.0f s (%.0f/s); committed up to %s%s",
            progress.records,
            now - progress.since,
            rate,
            offsets_text(progress.offsets),
            f"; longest full GC {gc_ms:.0f} ms" if gc_ms else "",
            extra={
                "records": progress.records,
                "records_per_s": round(rate, 1),
                "gc_full_longest_ms": round(gc_ms, 1),
            },
        )
        self._progress = Progress(now)
