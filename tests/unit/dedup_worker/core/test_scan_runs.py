"""``scan_runs``: the Redis index's bucket scan, against a plain-numpy statement of the rule."""

from __future__ import annotations

import numpy as np
import pytest

from dedup_worker.core import _hamming_kernel as hk
from dedup_worker.core.index_api import agrees_on_a_key


def _reference(
    queries: np.ndarray, positions: np.ndarray, starts: np.ndarray, lens: np.ndarray,
    fps: np.ndarray, k: int, masks: np.ndarray,
) -> list[tuple[int, int, int]]:  # fmt: skip
    found = []
    for p, first, n in zip(positions, starts, lens, strict=True):
        for r in range(first, first + n):
            diff = np.uint64(queries[p] ^ fps[r])
            dist = int(np.bitwise_count(diff))
            if dist <= k and (masks.size == 0 or agrees_on_a_key(np.array([diff]), masks[p])[0]):
                found.append((int(p), r, dist))
    return found


@pytest.mark.parametrize("byte_order", ["<u8", ">u8"])
@pytest.mark.parametrize("with_masks", [False, True])
def test_scan_runs_matches_the_rule_in_any_byte_order(byte_order: str, with_masks: bool) -> None:
    rng = np.random.default_rng(7)
    queries = rng.integers(0, 2**64, size=50, dtype=np.uint64)
    # Stored entries: near copies of the queries (0-8 bits flipped) and random ones.
    near = queries[rng.integers(0, 50, size=400)]
    for i in range(near.size):
        for bit in rng.choice(64, size=rng.integers(0, 9), replace=False):
            near[i] ^= np.uint64(1) << np.uint64(bit)
    fps = np.concatenate([near, rng.integers(0, 2**64, size=400, dtype=np.uint64)])
    rng.shuffle(fps)
    positions = rng.integers(0, 50, size=120).astype(np.int64)
    lens = rng.integers(0, 40, size=120).astype(np.int64)
    starts = np.array([rng.integers(0, fps.size - n + 1) for n in lens], dtype=np.int64)
    tables = np.array([0xFFFF << 48, 0xFFFF << 16, 0xFF00FF], dtype=np.uint64)
    # One row of masks per query: the tables' keys, less a random slack bit of each (as
    # ``index_api.rule_masks`` gives for probes with flips).
    slack = np.left_shift(np.uint64(1), rng.integers(0, 64, size=(50, 3)).astype(np.uint64))
    masks = tables[None, :] & ~slack if with_masks else np.zeros((0, 3), dtype=np.uint64)
    k = 6

    def words(values: np.ndarray) -> np.ndarray:  # the values' bytes in this order, read natively
        return values.astype(byte_order).view(np.uint64)

    records = np.stack([words(fps), np.arange(fps.size, dtype=np.uint64)], axis=1).ravel()
    q, r, d = hk.scan_runs(words(queries), positions, starts, lens, records, k, words(masks))
    got = list(zip(q.tolist(), r.tolist(), d.tolist(), strict=True))
    expected = _reference(queries, positions, starts, lens, fps, k, masks)
    assert got == expected
    assert len(expected) >= 5  # the planted near copies are found, so the check has teeth
