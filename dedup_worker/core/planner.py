"""Choosing a table design (Manku et al., §3.1.2), and explaining the choice.

The paper's recursion X(f, k, d) gives the fewest tables that bring the expected number of
candidates per probe (2**(d - leading bits) for 2**d fingerprints) under 2**tau. Our planner
enumerates the same family of designs (one to three levels of blocks) and picks, among those
within the caller's bounds on candidates per probe and bytes per fingerprint, the one with the
lowest estimated probe time on this kind of machine: a table costs about one directory lookup
and one bucket read (two cache misses), a candidate costs about a nanosecond of popcount scan.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from math import comb, inf, log2

import numpy as np

from dedup_worker.core.design import Design, F, build_design, table_count
from dedup_worker.errors import ConfigError

logger = logging.getLogger(__name__)

#: Estimated nanoseconds for probing one table (directory + bucket cache misses, in-memory).
PROBE_NS = 45.0
#: Estimated nanoseconds to examine one candidate in a bucket (contiguous popcount scan).
CANDIDATE_NS = 0.6
#: Bytes per fingerprint and table: the permuted key and the id stored beside it.
ENTRY_BYTES = 16.0
#: Bucket directory bytes per fingerprint and table (one uint32 offset per ~8 entries).
DIRECTORY_BYTES = 0.5
MAX_TABLES = 256


@dataclass(frozen=True)
class Option:
    """One candidate design with its estimated costs for ``n`` fingerprints."""

    splits: tuple[int, ...]
    tables: int
    key_bits: tuple[int, int]
    candidates_per_probe: float
    bytes_per_fingerprint: float
    probe_ns: float
    replicas: int = 1

    def row(self, k: int) -> str:
        name = ">".join(f"{r}c{r - k}" for r in self.splits)
        name += f"x{self.replicas}" if self.replicas > 1 else ""
        low, high = self.key_bits
        bits = f"{low}" if low == high else f"{low}..{high}"
        return (
            f"{name:>14} {self.tables:>6} {bits:>8} {self.candidates_per_probe:>14.3g}"
            f" {self.bytes_per_fingerprint:>8.1f} {self.probe_ns:>9.0f}"
        )


@dataclass(frozen=True)
class Plan:
    """The chosen design, the alternatives considered, and why.

    ``k`` is the distance up to which the tables find every pair; ``radius`` (>= k) the search
    radius of the index built on them (see ``coverage``).
    """

    n: int
    k: int
    chosen: Option
    options: tuple[Option, ...]
    reason: str
    radius: int = -1

    def __post_init__(self) -> None:
        if self.radius < 0:
            object.__setattr__(self, "radius", self.k)

    def design(self) -> Design:
        return build_design(self.k, self.chosen.splits, self.chosen.replicas)

    def coverage(self) -> dict[int, float]:
        """Share of pairs found at each distance up to the radius (``coverage``)."""
        return coverage(self.design(), range(self.radius + 1))

    def explain(self, top: int = 8) -> str:
        header = (
            f"{'design':>14} {'tables':>6} {'key bits':>8} {'cand./probe':>14}"
            f" {'B/fp':>8} {'probe ns':>9}"
        )
        ranked = sorted(self.options, key=lambda o: o.probe_ns)[:top]
        lines = [
            f"plan for {self.n:,} fingerprints, k={self.k}: {self.reason}",
            header,
            *(("* " if o == self.chosen else "  ") + o.row(self.k) for o in ranked),
        ]
        if self.radius > self.k:
            shares = " ".join(f"{d}:{share:.3f}" for d, share in self.coverage().items())
            lines.append(
                f"search radius {self.radius}: share of pairs at each distance that agree on "
                f"some table's key bits, i.e. that the chosen tables find: {shares}"
            )
        return "\n".join(lines)


def evaluate(n: int, k: int, splits: tuple[int, ...], replicas: int = 1) -> Option:
    """Costs of one design for ``n`` fingerprints, computed from block sizes alone."""
    design = build_design(k, splits, replicas)
    key_bits = [table.key_bits for table in design.tables]
    candidates = sum(n / 2.0**bits for bits in key_bits)
    tables = len(key_bits)
    return Option(
        splits=splits,
        tables=tables,
        key_bits=(min(key_bits), max(key_bits)),
        candidates_per_probe=candidates,
        bytes_per_fingerprint=tables * (ENTRY_BYTES + DIRECTORY_BYTES),
        probe_ns=tables * PROBE_NS + candidates * CANDIDATE_NS,
        replicas=replicas,
    )


def enumerate_designs(k: int, max_levels: int = 3) -> list[tuple[int, ...]]:
    """Every split sequence of up to ``max_levels`` levels with at most MAX_TABLES tables."""
    found: list[tuple[int, ...]] = []

    def extend(prefix: tuple[int, ...], free_bits: int) -> None:
        for r in range(k + 1, min(free_bits, k + 12) + 1):
            splits = (*prefix, r)
            if table_count(k, splits) > MAX_TABLES:
                break
            found.append(splits)
            if len(splits) < max_levels and k > 0:
                extend(splits, _free_after(free_bits, r, k))

    extend((), F)
    return found


def _free_after(free_bits: int, r: int, k: int) -> int:
    """Bits left outside the leading blocks after one level: the k smallest blocks."""
    size, extra = divmod(free_bits, r)
    sizes = sorted([size + 1] * extra + [size] * (r - extra))
    return sum(sizes[:k])


def plan(
    n: int,
    k: int = 3,
    max_candidates: float | None = None,
    max_bytes: float | None = None,
    radius: int | None = None,
    replicas: int = 1,
) -> Plan:
    """Pick the fastest design complete for ``k`` for ``n`` fingerprints within the bounds,
    with its tables repeated over ``replicas`` orders of the bits (``design.build_design``).

    ``radius`` (default k) is only reported on: ``Plan.coverage`` says how much of each
    distance beyond k the chosen tables still find; more replicas find more of it.
    """
    if radius is not None and radius < k:
        raise ConfigError(f"search radius {radius} must be at least the tables' k ({k})")
    if n < 1:
        raise ConfigError(f"expected number of fingerprints must be >= 1, got {n}")
    options = tuple(evaluate(n, k, splits, replicas) for splits in enumerate_designs(k))
    allowed = [
        o
        for o in options
        if (max_candidates is None or o.candidates_per_probe <= max_candidates)
        and (max_bytes is None or o.bytes_per_fingerprint <= max_bytes)
    ]
    if not allowed:
        raise ConfigError(
            f"no design for n={n:,}, k={k} meets max_candidates={max_candidates} and "
            f"max_bytes={max_bytes}; relax one of them"
        )
    chosen = min(allowed, key=lambda o: (o.probe_ns, o.tables))
    reason = (
        f"{chosen.tables} tables, {chosen.candidates_per_probe:.3g} expected candidates per "
        f"probe, {chosen.bytes_per_fingerprint:.0f} bytes per fingerprint, "
        f"~{chosen.probe_ns:.0f} ns per probe (lowest estimate within bounds)"
    )
    logger.debug("planned %s for n=%d k=%d", chosen.splits, n, k)
    return Plan(
        n=n, k=k, chosen=chosen, options=options, reason=reason,
        radius=k if radius is None else radius,
    )  # fmt: skip


@cache
def paper_tables(f: float, k: int, d: float, tau: float) -> float:
    """The paper's X(f, k, d): fewest tables so that a probe expects < 2**tau candidates.

    X(f, k, d) = 1 if d < tau, else min over r > k of C(r, k) * X(f k / r, k, d - (r - k) f / r).
    Block sizes are fractional here, as in the paper; ``build_design`` rounds them.
    """
    if d < tau:
        return 1
    best = inf
    for r in range(k + 1, int(f) + 1):
        lead = (r - k) * f / r
        if lead < 1:
            break
        best = min(best, comb(r, k) * paper_tables(f * k / r, k, d - lead, tau))
    return best


def bits_for(n: int) -> float:
    """d in the paper: log2 of the number of fingerprints."""
    return log2(max(n, 1))


#: Random difference patterns drawn per distance by ``coverage`` (fixed seed: same answer
#: every run; standard error < 0.002).
COVERAGE_SAMPLES = 100_000


def coverage(design: Design, distances: range | list[int]) -> dict[int, float]:
    """For each distance d, the share of d-bit differences (positions uniformly at random) that
    leave some table's key bits untouched, i.e. that the design's tables find.

    1.0 up to ``design.k`` (the pigeonhole guarantee); estimated by sampling beyond.
    """
    rng = np.random.default_rng(20070508)  # the paper's WWW 2007 date: any fixed seed
    masks = design.key_masks
    out: dict[int, float] = {}
    for d in distances:
        if d <= design.k:
            out[d] = 1.0
            continue
        keys = rng.random((COVERAGE_SAMPLES, F)).argsort(axis=1)[:, :d].astype(np.uint64)
        diffs = np.bitwise_or.reduce(np.left_shift(np.uint64(1), keys), axis=1)
        found = ((diffs[:, None] & masks[None, :]) == 0).any(axis=1)
        out[d] = round(float(found.mean()), 4)
    return out
