"""The in-memory index: exactness through tail, runs and merges; replay; delete; snapshots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup_worker.core import memory_index
from dedup_worker.core.design import build_design
from dedup_worker.core.memory_index import InMemoryIndex
from dedup_worker.core.snapshot import decode, encode, load, save
from dedup_worker.errors import IndexError_
from tests.support.hamming_oracle import brute_matches, fingerprint_sets


def _as_set(matches: object) -> list[tuple[int, int, int]]:
    m = matches
    return sorted(zip(m.query.tolist(), m.id.tolist(), m.distance.tolist(), strict=True))  # type: ignore[attr-defined]


@pytest.mark.parametrize("k", range(9))
@settings(max_examples=20, deadline=None)
@given(fps=fingerprint_sets, batch=st.integers(1, 40))
def test_query_after_inserts_equals_oracle(k: int, fps: np.ndarray, batch: int) -> None:
    index = InMemoryIndex(build_design(k, (k + 2,)))
    ids = np.arange(fps.size, dtype=np.uint64)
    for start in range(0, fps.size, batch):
        index.insert(fps[start : start + batch], ids[start : start + batch])
    assert _as_set(index.query(fps)) == brute_matches(fps, fps, k)


@settings(max_examples=30, deadline=None)
@given(fps=fingerprint_sets)
def test_probe_insert_sees_only_earlier_entries(fps: np.ndarray) -> None:
    index = InMemoryIndex(build_design(3, (5,)))
    ids = np.arange(fps.size, dtype=np.uint64) + 100
    matches = index.probe_insert(fps, ids)
    expected = [(q, s + 100, d) for q, s, d in brute_matches(fps, fps, 3) if s < q]
    assert _as_set(matches) == expected
    assert len(index) == fps.size


def test_runs_merge_and_stay_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_index, "TAIL_MAX", 8)
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2**64, size=400, dtype=np.uint64)
    fps = np.concatenate([base, base ^ np.uint64(0b1011)])
    index = InMemoryIndex(build_design(3, (4,)))
    for start in range(0, fps.size, 7):
        chunk = fps[start : start + 7]
        index.probe_insert(chunk, np.arange(start, start + chunk.size, dtype=np.uint64))
    assert index.stats()["runs"] < 12
    assert _as_set(index.query(fps)) == brute_matches(fps, fps, 3)


def test_replayed_batch_adds_nothing_and_reports_itself() -> None:
    index = InMemoryIndex(build_design(3, (5,)))
    fps = np.array([1, 2**40, 2**40 + 1], dtype=np.uint64)
    ids = np.array([10, 11, 12], dtype=np.uint64)
    first = index.probe_insert(fps, ids)
    again = index.probe_insert(fps, ids)
    assert len(index) == 3
    assert set(_as_set(again)) >= {(0, 10, 0), (1, 11, 0), (2, 12, 0)}
    # A replay sees every stored entry, itself included, once each.
    assert _as_set(again) == [(0, 10, 0), (0, 11, 2), (0, 12, 1), (1, 10, 2), (1, 11, 0),
                              (1, 12, 1), (2, 10, 1), (2, 11, 1), (2, 12, 0)]  # fmt: skip
    assert len(first) == 3


def test_same_fingerprint_distinct_ids_all_reported() -> None:
    index = InMemoryIndex(build_design(2, (4,)))
    index.insert(np.full(300, 42, dtype=np.uint64), np.arange(300, dtype=np.uint64))
    found = index.query(np.array([43], dtype=np.uint64))
    assert sorted(found.id.tolist()) == list(range(300))
    assert set(found.distance.tolist()) == {1}


def test_delete_then_compact() -> None:
    rng = np.random.default_rng(4)
    fps = rng.integers(0, 2**64, size=1000, dtype=np.uint64)
    ids = np.arange(1000, dtype=np.uint64)
    index = InMemoryIndex(build_design(3, (5,)))
    index.insert(fps, ids)
    assert index.delete(fps[:10], ids[:10]) == 10
    assert index.delete(fps[:10], ids[:10]) == 0
    assert len(index.query(fps[:10])) == 0
    assert len(index.query(fps[10:20])) == 10
    index.delete(fps[:400], ids[:400])
    assert index.stats()["runs"] == 1  # a quarter tombstoned triggers compaction
    assert len(index) == 600
    assert _as_set(index.query(fps)) == [(q, q, 0) for q in range(400, 1000)]


def test_reserved_id_and_shape_errors() -> None:
    index = InMemoryIndex(build_design(3, (4,)))
    with pytest.raises(IndexError_, match="reserved"):
        index.insert(np.array([1], np.uint64), np.array([2**64 - 1], np.uint64))
    with pytest.raises(IndexError_, match="equal"):
        index.insert(np.array([1, 2], np.uint64), np.array([1], np.uint64))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=200))
def test_elias_fano_round_trip(values: list[int]) -> None:
    sorted_values = np.array(sorted(values), dtype=np.uint64)
    width, low, upper = encode(sorted_values)
    assert decode(sorted_values.size, width, low, upper).tolist() == sorted(values)


def test_snapshot_round_trip_is_compact(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64, size=50_000, dtype=np.uint64)
    ids = np.arange(50_000, dtype=np.uint64)
    index = InMemoryIndex(build_design(3, (5,)))
    index.insert(fps, ids)
    size = save(index, tmp_path / "a.idx", "f1w1")
    assert size < 50_000 * (6.5 + 8) + 1024  # ~49 bits per fingerprint + raw ids at worst
    restored = load(tmp_path / "a.idx", "f1w1")
    assert all((x == y).all() for x, y in zip(index.entries(), restored.entries(), strict=True))
    assert _as_set(restored.query(fps[:50])) == _as_set(index.query(fps[:50]))
    with pytest.raises(IndexError_, match="mix fingerprint versions"):
        load(tmp_path / "a.idx", "f2w1")
    (tmp_path / "junk").write_bytes(b"hello\n")
    with pytest.raises(IndexError_, match="not a neardup"):
        load(tmp_path / "junk")
