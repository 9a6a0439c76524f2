"""The worker times the process's garbage collections: a full one stalls the batch in flight."""

from __future__ import annotations

import gc

from dedup_worker.worker.main import GC_THRESHOLDS, settle_heap
from dedup_worker.worker.metrics import GcPauses, WorkerMetrics


def _count(metrics: WorkerMetrics, generation: int) -> float:
    value = metrics.registry.get_sample_value(
        "neardup_worker_gc_pause_seconds_count", {"generation": str(generation)}
    )
    return value or 0.0


def test_collections_are_timed_by_generation_while_entered_and_not_after() -> None:
    metrics = WorkerMetrics()
    pauses = GcPauses(metrics)
    with pauses:
        gc.collect()
        gc.collect(0)
        assert _count(metrics, 2) >= 1
        assert _count(metrics, 0) >= 1
        assert pauses.take_longest_full() > 0.0
        assert pauses.take_longest_full() == 0.0  # taken: the next progress line starts afresh
    full = _count(metrics, 2)
    gc.collect()
    assert _count(metrics, 2) == full
    assert pauses.take_longest_full() == 0.0


def test_a_young_collection_is_not_reported_as_a_full_one() -> None:
    pauses = GcPauses(WorkerMetrics())
    with pauses:
        gc.collect(0)
        gc.collect(1)
    assert pauses.take_longest_full() == 0.0


def test_the_worker_freezes_start_up_and_collects_less_often() -> None:
    thresholds = gc.get_threshold()
    try:
        settle_heap()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] > thresholds[0]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
