"""One contract for every ``HammingIndex`` backend, checked against a brute-force oracle.

Backends: the in-memory reference, ``RedisIndex`` on a real redis-server, and ``RedisIndex`` on
a real 3-node Redis Cluster. Data is random plus planted families (a base and variants 0..k+2
bits away, including exact copies under other ids), in several batches, sometimes replayed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup_worker.core.design import build_design
from dedup_worker.core.index_api import TOMBSTONE
from dedup_worker.core.memory_index import InMemoryIndex
from dedup_worker.errors import ConfigError, IndexError_
from tests.support.index_helpers import (
    BACKENDS,
    REDIS_BACKENDS,
    IndexFactory,
    Oracle,
    planted,
    rows,
    split,
    without_self,
)

U64 = np.uint64

#: (k, splits): several designs per k, one- and two-level.
MEMORY_DESIGNS = [
    (0, (1,)),
    (0, (2,)),
    (1, (2,)),
    (1, (3, 2)),
    (2, (3,)),
    (2, (4,)),
    (3, (4,)),
    (3, (6,)),
    (3, (4, 4)),
    (4, (5,)),
    (4, (6,)),
    (5, (6,)),
    (5, (7,)),
    (6, (7,)),
    (6, (8,)),
    (7, (8,)),
    (8, (9,)),
    (8, (10,)),
]
REDIS_DESIGNS = [(0, (2,)), (1, (3, 2)), (3, (4,)), (3, (6,)), (5, (7,)), (8, (9,))]
#: Redis layouts: expected_n (sets bucket bits; 1 = one bucket per table) and shard bits.
LAYOUTS = st.sampled_from([(1, 0), (64, 2), (4096, 4), (2**40, 3)])


def _settings(backend: str) -> Any:
    return settings(
        max_examples=60 if backend == "memory" else 40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )


def _cases(backends: list[Any], redis_designs: list[Any], memory_designs: list[Any]) -> list[Any]:
    cases = []
    for backend in backends:
        name = backend if isinstance(backend, str) else backend.values[0]
        marks = () if isinstance(backend, str) else backend.marks
        designs = memory_designs if name == "memory" else redis_designs
        cases += [pytest.param(name, k, s, marks=marks, id=f"{name}-k{k}-{s}") for k, s in designs]
    return cases


def _options(backend: str, layout: tuple[int, int]) -> dict[str, int]:
    if backend == "memory":
        return {}
    return {"expected_n": layout[0], "shard_bits": layout[1]}


@pytest.mark.parametrize(
    ("backend", "k", "splits"), _cases(BACKENDS, REDIS_DESIGNS, MEMORY_DESIGNS)
)
def test_probe_insert_matches_oracle(
    backend: str, k: int, splits: tuple[int, ...], make_index: IndexFactory
) -> None:
    @_settings(backend)
    @given(
        seed=st.integers(0, 2**32 - 1),
        shape=st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 40)),
        cuts=st.lists(st.integers(0, 200), max_size=3),
        replay=st.booleans(),
        layout=LAYOUTS,
    )
    def check(
        seed: int, shape: tuple[int, int, int], cuts: list[int], replay: bool, layout: Any
    ) -> None:
        rng = np.random.default_rng(seed)
        fps, ids = planted(rng, *shape, k=k)
        index = make_index(build_design(k, splits), **_options(backend, layout))
        oracle = Oracle(k)
        batches = split(fps, ids, cuts)
        if replay:
            batches.append(batches[0])
        for batch_fps, batch_ids in batches:
            assert rows(index.probe_insert(batch_fps, batch_ids)) == oracle.probe_insert(
                batch_fps, batch_ids
            )
            assert len(index) == len(oracle.entries)
        assert rows(index.query(fps)) == oracle.query(fps)

    check()


#: (design k, splits, replicas, search radius, flips): radii beyond the design's k, without
#: and with probes that also read their flipped slack bits' buckets (first replica's tables).
RULE_DESIGNS = [
    (1, (2,), 1, 3, 0),
    (3, (4,), 1, 5, 0),
    (3, (4,), 1, 8, 0),
    (4, (6,), 1, 6, 0),
    (2, (3, 3), 1, 4, 0),
    (1, (2,), 1, 4, 1),
    (3, (4,), 2, 8, 1),
    (3, (4,), 1, 8, 2),
    (2, (3, 3), 1, 6, 1),
    (2, (4,), 3, 7, 3),
]


def _per_backend(designs: list[tuple[Any, ...]]) -> list[Any]:
    """Parameters: every backend (with its marks) with every design tuple."""
    return [
        pytest.param(
            b if isinstance(b, str) else b.values[0], *d,
            marks=() if isinstance(b, str) else b.marks,
            id="-".join([b if isinstance(b, str) else b.values[0], *map(str, d)]),
        )
        for b in BACKENDS
        for d in designs
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("backend", "k", "splits", "replicas", "radius", "flips"), _per_backend(RULE_DESIGNS)
)
def test_radius_and_flips_match_oracle(
    backend: str,
    k: int,
    splits: tuple[int, ...],
    replicas: int,
    radius: int,
    flips: int,
    make_index: IndexFactory,
) -> None:
    """Same matches on every backend and layout: within the radius and agreeing on a key, less
    the query's slack bits when probes try its weakest key bits flipped."""

    @_settings(backend)
    @given(
        seed=st.integers(0, 2**32 - 1),
        shape=st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 40)),
        cuts=st.lists(st.integers(0, 200), max_size=3),
        layout=LAYOUTS,
    )
    def check(seed: int, shape: tuple[int, int, int], cuts: list[int], layout: Any) -> None:
        rng = np.random.default_rng(seed)
        fps, ids = planted(rng, *shape, k=radius)
        # Small margins, so that ties (broken by the table's order) are common.
        margins = rng.integers(0, 6, size=(fps.size, 64)).astype(np.int32)
        design = build_design(k, splits, replicas)
        index = make_index(design, radius=radius, flips=flips, **_options(backend, layout))
        assert index.k == radius
        oracle = Oracle(
            radius,
            key_masks=tuple(int(m) for m in design.key_masks),
            key_orders=tuple(tuple(t.order[: t.key_bits]) for t in design.tables),
            flips=flips,
            flip_tables=len(design.tables) // replicas,
        )
        start = 0
        for batch_fps, batch_ids in split(fps, ids, cuts):
            batch_margins = margins[start : start + batch_fps.size]
            start += batch_fps.size
            assert rows(
                index.probe_insert(batch_fps, batch_ids, batch_margins)
            ) == oracle.probe_insert(batch_fps, batch_ids, batch_margins)
        assert rows(index.query(fps, margins)) == oracle.query(fps, margins)
        assert rows(index.query(fps)) == oracle.query(fps)  # no margins: no flips

    check()


def test_flips_find_what_exact_keys_miss() -> None:
    """A pair that differs on one key bit of every table is found only with that bit's bucket
    read too (its margin the smallest), and the rule reaches no farther than the slack."""
    design = build_design(1, (2,))  # two tables, each keyed on 32 bits
    base = 0x0123456789ABCDEF
    near = base ^ (1 << 63) ^ (1 << 5)  # one bit in each table's key: no exact key agrees
    margins = np.full((1, 64), 9, dtype=np.int32)
    margins[0, 63] = margins[0, 5] = 0
    for flips, found in ((0, False), (1, True)):
        index = InMemoryIndex(design, radius=4, flips=flips)
        index.insert(np.array([base], dtype=U64), np.array([1], dtype=U64))
        hits = index.query(np.array([near], dtype=U64), margins)
        assert (len(hits) == 1) is found
    index = InMemoryIndex(design, radius=4, flips=1)
    index.insert(np.array([base], dtype=U64), np.array([1], dtype=U64))
    other = np.full((1, 64), 9, dtype=np.int32)  # the weakest bits are elsewhere
    other[0, 40] = other[0, 2] = 0
    assert len(index.query(np.array([near], dtype=U64), other)) == 0


def test_bad_flips_and_margins_are_errors() -> None:
    with pytest.raises(ConfigError, match="probe flips"):
        InMemoryIndex(build_design(3, (4,)), radius=6, flips=4)
    index = InMemoryIndex(build_design(3, (4,)), radius=6, flips=1)
    with pytest.raises(IndexError_, match="margins"):
        index.query(np.zeros(2, dtype=U64), np.zeros((3, 64), dtype=np.int32))


def test_radius_below_design_k_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="search radius"):
        InMemoryIndex(build_design(3, (4,)), radius=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_query_inserts_nothing(make_index: IndexFactory) -> None:
    index = make_index(build_design(3, (4,)))
    fps = np.array([1, 3, 0xF << 60], dtype=U64)
    assert len(index.query(fps)) == 0
    assert len(index) == 0
    index.insert(fps, np.arange(3, dtype=U64))
    assert rows(index.query(np.array([0], dtype=U64))) == {(0, 0, 1, 1), (0, 1, 3, 2)}
    assert len(index) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_sees_its_earlier_entries_only(make_index: IndexFactory) -> None:
    index = make_index(build_design(3, (4,)))
    base = 0x0123456789ABCDEF
    fps = np.array([base, base ^ 0b111, base ^ 0b1, base ^ (0b1111 << 40)], dtype=U64)
    found = rows(index.probe_insert(fps, np.array([10, 11, 12, 13], dtype=U64)))
    assert found == {(1, 10, base, 3), (2, 10, base, 1), (2, 11, base ^ 0b111, 2)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_replay_adds_nothing_and_reports_self(make_index: IndexFactory) -> None:
    rng = np.random.default_rng(5)
    fps, ids = planted(rng, families=8, members=4, singles=20, k=3)
    index = make_index(build_design(3, (4,)))
    first = rows(index.probe_insert(fps, ids))
    again = rows(index.probe_insert(fps, ids))
    assert len(index) == fps.size
    assert first < again
    # The replay meets every batch entry near it, each query itself included, and nothing else.
    assert again == Oracle(3, list(zip(fps.tolist(), ids.tolist(), strict=True))).query(fps)
    assert {(q, int(ids[q]), int(fps[q]), 0) for q in range(fps.size)} <= again
    assert without_self(again, ids) >= first


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_fingerprint_distinct_ids_both_reported(make_index: IndexFactory) -> None:
    index = make_index(build_design(3, (4,)))
    fp = np.array([0xDEADBEEF], dtype=U64)
    index.probe_insert(fp, np.array([1], dtype=U64))
    assert rows(index.probe_insert(fp, np.array([2], dtype=U64))) == {(0, 1, 0xDEADBEEF, 0)}
    assert rows(index.query(fp)) == {(0, 1, 0xDEADBEEF, 0), (0, 2, 0xDEADBEEF, 0)}
    assert len(index) == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_delete(make_index: IndexFactory) -> None:
    rng = np.random.default_rng(9)
    fps, ids = planted(rng, families=5, members=3, singles=10, k=3)
    index = make_index(build_design(3, (4,)))
    oracle = Oracle(3)
    index.probe_insert(fps, ids)
    oracle.probe_insert(fps, ids)
    gone = slice(0, fps.size, 3)
    assert index.delete(fps[gone], ids[gone]) == oracle.delete(fps[gone], ids[gone]) > 0
    assert index.delete(fps[gone], ids[gone]) == 0
    wrong_id = ids[1:2] + U64(10_000)
    assert index.delete(fps[1:2], wrong_id) == 0
    assert len(index) == len(oracle.entries)
    assert rows(index.query(fps)) == oracle.query(fps)
    # A deleted entry can be inserted again.
    assert rows(index.probe_insert(fps[gone], ids[gone])) == oracle.probe_insert(
        fps[gone], ids[gone]
    )
    assert len(index) == fps.size


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_input_rejected(make_index: IndexFactory) -> None:
    index = make_index(build_design(3, (4,)))
    with pytest.raises(IndexError_):
        index.probe_insert(np.zeros(2, dtype=U64), np.zeros(3, dtype=U64))
    with pytest.raises(IndexError_):
        index.insert(np.zeros(1, dtype=U64), np.array([TOMBSTONE], dtype=U64))
    assert len(index.probe_insert(np.zeros(0, dtype=U64), np.zeros(0, dtype=U64))) == 0


@pytest.mark.parametrize("backend", REDIS_BACKENDS)
def test_large_batch_matches_reference(make_index: IndexFactory) -> None:
    """Batches beyond one Lua call's limit are chunked and behave like one batch."""
    rng = np.random.default_rng(3)
    fps, ids = planted(rng, families=900, members=9, singles=0, k=3)
    design = build_design(3, (4,))
    index = make_index(design, expected_n=4096, shard_bits=2)
    oracle = Oracle(3)
    head = slice(0, 300)
    assert rows(index.probe_insert(fps[head], ids[head])) == oracle.probe_insert(
        fps[head], ids[head]
    )
    # The oracle is quadratic: compare the big batch with the in-memory reference instead.

    reference = InMemoryIndex(design)
    reference.insert(fps[head], ids[head])
    assert rows(index.probe_insert(fps, ids)) == rows(reference.probe_insert(fps, ids))
    assert len(index) == len(reference) == fps.size
