"""The worker's batch-fed histogram exposes exactly what prometheus_client's Histogram would."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from dedup_worker.contract.messages import Decision, Verdict
from dedup_worker.worker.metrics import CountHistogram, WorkerMetrics

BOUNDS = (0, 1, 2, 4, 8, 16, 32, 64, 128)


def _exposed(registry: CollectorRegistry) -> list[str]:
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if "_created" not in line]


def test_count_histogram_matches_prometheus_histogram() -> None:
    rng = random.Random(7)
    values = [rng.choice([0, 0, 1, 2, 3, 4, 5, 9, 17, 64, 65, 128, 129, 5000]) for _ in range(3000)]
    reference = CollectorRegistry()
    histogram = Histogram("x_candidates", "doc", buckets=BOUNDS, registry=reference)
    for value in values:
        histogram.observe(value)
    ours = CollectorRegistry()
    batched = CountHistogram("x_candidates", "doc", BOUNDS, ours)
    batched.observe_many(values[:1000])
    batched.observe_many([])
    batched.observe_many(values[1000:])
    assert _exposed(ours) == _exposed(reference)


def _decision(verdict: Verdict, candidates: object, corrects: bool = False) -> Decision:
    return Decision(
        url="https://a.example/p", host="a.example", verdict=verdict, simhash="0" * 16,
        priority=1.0, follow_outlinks=True, fetched_at=1.0, decided_at=1.0, corrects=corrects,
        evidence={"candidates": candidates},
    )  # fmt: skip


def test_observe_decisions_counts_verdicts_and_candidates_of_first_decisions() -> None:
    metrics = WorkerMetrics()
    metrics.observe_decisions(
        [
            _decision(Verdict.UNIQUE, 0),
            _decision(Verdict.UNIQUE, 3),
            _decision(Verdict.NEAR_DUPLICATE, 2),
            _decision(Verdict.NEAR_DUPLICATE, 9, corrects=True),  # a correction: no probe
            _decision(Verdict.CHANGED, None),  # no count in its evidence
        ]
    )
    decisions = "neardup_worker_decisions_total"
    assert metrics.value(decisions, {"verdict": "unique", "corrects": "false"}) == 2
    assert metrics.value(decisions, {"verdict": "near_duplicate", "corrects": "true"}) == 1
    assert metrics.value(decisions, {"verdict": "changed", "corrects": "false"}) == 1
    assert metrics.value("neardup_worker_candidates_per_probe_count") == 3
    assert metrics.value("neardup_worker_candidates_per_probe_sum") == 5
    assert metrics.value("neardup_worker_candidates_per_probe_bucket", {"le": "2.0"}) == 2
