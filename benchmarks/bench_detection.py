"""Detection quality through the worker's own decision path, on a labelled corpus.

    python benchmarks/bench_detection.py CORPUS.jsonl [--pairs PAIRS.jsonl] [--batch 500]
        [--redis-url redis://...] [NEARDUP_* settings as --name value, e.g. --k 5 --tf-cap 4]

Unlike ``neardup eval`` (offline detectors over all pairs), this feeds the corpus, in corpus
order, through ``DedupEngine`` built exactly as ``dedup-worker`` builds it from the same
settings (planner design, search radius, features, sketch; the in-process backends, or Redis
with ``--redis-url``), one batch at a time, and scores the final decisions (corrections
folded) against the reference: a page is a duplicate iff an earlier page has Jaccard >= 0.9
of word 4-shingles. It prints

- page precision / recall, overall and per source (the corpus' ``source`` field);
- the short-page goal: one-edit variants (ids ending in ``#word``, ``#stamp``, ``#restamp``)
  that resemble an earlier page at J >= 0.9, and how many are found; unique pages of those
  families (no earlier J >= 0.9 partner) that were suppressed;
- candidates the index proposed per page and the share the sketch rejected (false
  candidates), and the engine's pages/s in this process.

Asserts nothing; the quality floors live in ``tests/unit/neardup/evaluation``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dedup_worker.contract.messages import Decision, Page
from dedup_worker.core.engine import DedupEngine
from dedup_worker.core.records import SUPPRESSED
from dedup_worker.worker.config import WorkerConfig, from_namespace
from dedup_worker.worker.config_options import OPTIONS
from dedup_worker.worker.main import build_engine
from dedup_worker.worker.metrics import WorkerMetrics
from neardup.evaluation import quality

ONE_EDIT = ("#word", "#stamp", "#restamp")
BASE_TIME = 1_700_000_000.0


def main() -> None:
    args, config = parse()
    rows = [json.loads(line) for line in args.corpus.open(encoding="utf-8") if line.strip()]
    pages = [as_page(i, row) for i, row in enumerate(rows)]
    engine = build_engine(config, WorkerMetrics())
    started = time.perf_counter()
    final, candidates, rejected = decide(engine, pages, args.batch)
    seconds = time.perf_counter() - started
    predicted = np.array([final[(p.url, p.fetched_at)].verdict in SUPPRESSED for p in pages])
    labels = reference(rows)
    print(f"{len(pages):,} pages, {int(labels.sum()):,} duplicates of an earlier page "
          f"(J >= 0.9); settings: {config.describe()}")  # fmt: skip
    print(f"page precision {precision(predicted, labels):.3f}, "
          f"recall {recall(predicted, labels):.3f}")  # fmt: skip
    for source in sorted({row.get("source", "") for row in rows}):
        mine = np.array([row.get("source", "") == source for row in rows])
        print(f"  {source or '-':<16} {int(mine.sum()):>6} pages, {int(labels[mine].sum()):>5} "
              f"duplicates: precision {precision(predicted[mine], labels[mine]):.3f}, "
              f"recall {recall(predicted[mine], labels[mine]):.3f}")  # fmt: skip
    short_pages(rows, predicted, labels)
    print(f"candidates examined: {candidates / len(pages):.2f} per page, "
          f"{rejected / max(candidates, 1):.1%} of them false (rejected by the sketch); "
          f"engine {len(pages) / seconds:,.0f} pages/s in this process")  # fmt: skip


def parse() -> tuple[argparse.Namespace, WorkerConfig]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="JSONL of {id, text[, title, source]}")
    parser.add_argument("--batch", type=int, default=500, help="pages per engine batch")
    for option in OPTIONS:
        if option.field in ("k", "tables_k", "shingle", "tf_cap", "verify_threshold",
                            "sketch_bins", "sketch_bits", "expected_pages", "redis_url",
                            "index_namespace"):  # fmt: skip
            parser.add_argument(option.flag, dest=option.field, help=option.help)
    args = parser.parse_args()
    env = {"NEARDUP_INDEX_NAMESPACE": f"bench{int(time.time())}"}
    config = from_namespace(args, env)
    return args, config


def as_page(position: int, row: dict[str, Any]) -> Page:
    """Corpus order is fetch order; the id's source names the host (mirrors cross hosts)."""
    ident = str(row["id"])
    host = (ident.split(":", 1)[0].replace("/", "-") or "corpus") + ".example"
    return Page(
        url=f"https://{host}/{position}/{ident.replace(' ', '_')}",
        host=host,
        fetched_at=BASE_TIME + position,
        text=str(row["text"]),
        title=str(row.get("title") or ""),
        depth=1,
    )


def decide(
    engine: DedupEngine, pages: list[Page], batch: int
) -> tuple[dict[tuple[str, float], Decision], int, int]:
    """Final decision per page (a correction is final), candidates and sketch rejections."""
    final: dict[tuple[str, float], Decision] = {}
    candidates = rejected = 0
    for chunk in chunks(pages, batch):
        for decision in engine.process(chunk):
            key = (decision.url, decision.fetched_at)
            if decision.corrects or key not in final:
                final[key] = decision
            if not decision.corrects:
                candidates += int(decision.evidence.get("candidates", 0))
                rejected += int(decision.evidence.get("rejected_by_sketch", 0))
    return final, candidates, rejected


def chunks(pages: list[Page], size: int) -> Iterator[list[Page]]:
    for start in range(0, len(pages), size):
        yield pages[start : start + size]


def reference(rows: list[dict[str, Any]]) -> np.ndarray:
    sets = quality.shingle_sets([str(row["text"]) for row in rows])
    labels = quality.make_labels(len(rows), quality.similar_pairs(sets))
    return np.asarray(labels.positive_pages)


def short_pages(rows: list[dict[str, Any]], predicted: np.ndarray, labels: np.ndarray) -> None:
    ids = [str(row["id"]) for row in rows]
    edits = np.array([ident.endswith(ONE_EDIT) for ident in ids])
    family = np.array([ident.startswith("short:") for ident in ids])
    if not family.any():
        return
    variants = edits & labels
    kinds = Counter(ident.rsplit("#", 1)[1] for ident, v in zip(ids, variants, strict=True) if v)
    found = int((variants & predicted).sum())
    unique_suppressed = int((family & ~labels & predicted).sum())
    print(f"short pages: {found}/{int(variants.sum())} one-edit variants with an earlier "
          f"J >= 0.9 partner found ({found / max(int(variants.sum()), 1):.3f}; {dict(kinds)}); "
          f"{unique_suppressed} of {int((family & ~labels).sum())} unique short pages "
          f"suppressed")  # fmt: skip


def precision(predicted: np.ndarray, labels: np.ndarray) -> float:
    return float((predicted & labels).sum() / max(int(predicted.sum()), 1))


def recall(predicted: np.ndarray, labels: np.ndarray) -> float:
    return float((predicted & labels).sum() / max(int(labels.sum()), 1))


if __name__ == "__main__":
    main()
