"""The worker's start-up warm-up runs a batch's kernels without storing anything."""

from __future__ import annotations

from dedup_worker.contract.messages import Page, Verdict
from dedup_worker.worker.config import load_config
from dedup_worker.worker.main import _WARM_UP_TEXTS, build_engine
from dedup_worker.worker.metrics import WorkerMetrics


def test_the_warm_up_stores_nothing_and_the_first_page_is_still_unique() -> None:
    engine = build_engine(load_config([], {"NEARDUP_REDIS_URL": "memory"}), WorkerMetrics())
    assert len(engine.index) == 0
    # A page with the warm-up's own text is new content: the warm-up left no record behind.
    page = Page(url="https://a.example/", host="a.example", fetched_at=1.0,
                text=_WARM_UP_TEXTS[0], title="warm up")  # fmt: skip
    (decision,) = engine.process([page])
    assert decision.verdict is Verdict.UNIQUE
    assert len(engine.index) == 1
