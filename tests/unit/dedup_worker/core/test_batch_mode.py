"""Batch mode (all pairs within k, clusters) against the brute-force oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup_worker.core.batch import all_pairs, clusters
from dedup_worker.core.design import build_design
from dedup_worker.core.planner import enumerate_designs
from tests.support.hamming_oracle import brute_pairs, fingerprint_sets


@pytest.mark.parametrize("k", range(9))
@settings(max_examples=25, deadline=None)
@given(fps=fingerprint_sets, choice=st.integers(0, 5))
def test_all_pairs_equals_oracle(k: int, fps: np.ndarray, choice: int) -> None:
    designs = enumerate_designs(k)
    design = build_design(k, designs[choice % len(designs)])
    i, j, d = all_pairs(fps, k, design)
    assert list(zip(i.tolist(), j.tolist(), d.tolist(), strict=True)) == brute_pairs(fps, k)


def test_planned_design_and_duplicates() -> None:
    fps = np.array([5, 5, 5, 7, 2**63], dtype=np.uint64)
    i, j, d = all_pairs(fps, 1)
    assert list(zip(i.tolist(), j.tolist(), d.tolist(), strict=True)) == [
        (0, 1, 0), (0, 2, 0), (0, 3, 1), (1, 2, 0), (1, 3, 1), (2, 3, 1)
    ]  # fmt: skip


def test_clusters_are_connected_components() -> None:
    labels = clusters(6, np.array([0, 3, 4]), np.array([2, 4, 5]))
    assert labels.tolist() == [0, 1, 0, 3, 3, 3]


def test_empty_input() -> None:
    i, j, d = all_pairs(np.zeros(0, dtype=np.uint64), 3)
    assert i.size == j.size == d.size == 0
