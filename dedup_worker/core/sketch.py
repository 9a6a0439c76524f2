"""Resemblance sketches of word 4-shingles: the verifier beside the simhash.

* ``Sketcher`` computes a compact one-permutation-hashing (OPH) sketch per page, alone or fused
  with the simhash (``fingerprint_and_sketch``: the words are hashed once). A sketch is
  ``SketchConfig.nbytes`` bytes: a 4-byte header (version, format, shingle count) and m bins of
  b bits. ``verify(a, b)`` estimates the resemblance (Jaccard of word 4-shingles) of two pages
  from their sketches and accepts the pair when it reaches the threshold.
* ``shingle_hashes`` gives the word 4-shingle hashes themselves, those every sketch samples:
  the exact reference resemblance and Broder's MinHash (``neardup.evaluation``) start from them.

Deterministic throughout (fmix64 of the version-1 word hashes; never Python's ``hash()``); the
golden sketches in ``tests/unit/dedup_worker/core/test_sketch.py`` pin sketch version 1.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt

from dedup_worker.core import _densify_kernel as dk
from dedup_worker.core import _sketch_kernel as sk
from dedup_worker.core._simhash_kernel import pack
from dedup_worker.core.simhash import (
    Document,
    FeatureConfig,
    Fingerprinter,
    I32Array,
    margins_for,
    no_margins,
    weighted_parts,
)
from dedup_worker.core.text import packable
from dedup_worker.errors import ConfigError

logger = logging.getLogger(__name__)

SKETCH_VERSION = sk.SKETCH_VERSION
HEADER = sk.HEADER

U8Array = npt.NDArray[np.uint8]
U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]
F64Array = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class SketchConfig:
    """Sketch format and the verification rule.

    ``threshold`` is the estimated resemblance a pair needs. Pages with fewer than
    ``short_shingles`` 4-shingles have noisy sketches (few distinct bins) and a changed word is a
    large share of them, so they need ``short_threshold`` instead.
    """

    # The default is 1024 two-bit bins (260 bytes with the header): the smallest shape whose
    # error at the threshold separates 0.85 from 0.9 (``check_precision``) at the speed of
    # the 36-byte sketch it replaced (README, "Detection quality", has the measurements).
    log2_bins: int = 10
    bits: int = 2
    # The estimator is unbiased, so the reference's own threshold balances precision and recall.
    threshold: float = 0.9
    # Off by default: a stricter rule for short pages traded recall for precision one for one.
    short_shingles: int = 0
    short_threshold: float = 1.0

    def __post_init__(self) -> None:
        if not 4 <= self.log2_bins <= 12:
            raise ConfigError(f"log2_bins must be 4..12, got {self.log2_bins}")
        if self.bits not in (1, 2, 4, 8, 16):
            raise ConfigError(f"bits must be 1, 2, 4, 8 or 16, got {self.bits}")
        for name in ("threshold", "short_threshold"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    @property
    def bins(self) -> int:
        return 1 << self.log2_bins

    @property
    def nbytes(self) -> int:
        """Bytes per stored sketch, header included."""
        return HEADER + self.bins * self.bits // 8

    @property
    def format_byte(self) -> int:
        return (self.log2_bins << 4) | (self.bits.bit_length() - 1)

    @property
    def version_tag(self) -> str:
        """Names the stored sketch format (version and shape), e.g. ``s1b10x2``."""
        return f"s{SKETCH_VERSION}b{self.log2_bins}x{self.bits}"

    def standard_error(self, resemblance: float) -> float:
        """One standard error of the estimate for pages of this resemblance, with all bins
        sampled (pages of at least ``bins`` shingles; shorter pages sample fewer)."""
        chance = 2.0**-self.bits
        same = resemblance + (1.0 - resemblance) * chance  # P(a bin's b-bit values agree)
        return float(np.sqrt(same * (1.0 - same) / self.bins) / (1.0 - chance))

    def check_precision(self) -> None:
        """Refuse a sketch that cannot tell the threshold t from t - (1 - t) / 2 (0.85 from
        0.9): its standard error there must stay under a third of that gap, so that pairs that
        far below the threshold pass verification only ~0.1% of the time."""
        gap = (1.0 - self.threshold) / 2
        error = self.standard_error(self.threshold - gap)
        if gap > 0 and error > gap / 3:
            passing = [
                other
                for log2 in range(4, 13)
                for bits in (1, 2, 4, 8, 16)
                if (other := SketchConfig(log2, bits, self.threshold)).standard_error(
                    self.threshold - gap
                )
                <= gap / 3
            ]
            smallest = min(passing, key=lambda c: (c.nbytes, -c.bins), default=None)
            wanted = (
                f"{smallest.bins} bins of {smallest.bits} bit(s) ({smallest.nbytes} bytes)"
                if smallest
                else "a lower threshold"
            )
            raise ConfigError(
                f"a sketch of {self.bins} bins of {self.bits} bit(s) is too small for the "
                f"threshold {self.threshold:g}: at resemblance {self.threshold - gap:.3g} its "
                f"estimate errs by +-{error:.3f} (one standard error), more than a third of the "
                f"{gap:.3g} to the threshold; use at least {wanted}"
            )


DEFAULT_SKETCH = SketchConfig()
#: Candidate generation for the hybrid detector: single words, body only (the reference
#: compares body text), each word voting its term frequency capped at 4, within this Hamming
#: distance; then ``verify``. Single words keep renderings, releases and one-edit short pages
#: within a few bits (word pairs put them 4-12 bits apart); the cap keeps the frequent words
#: of a language from outvoting the rest, which made uncapped single-word fingerprints crowd
#: together (hundreds of candidates per page on a same-language corpus).
RECOMMENDED_FEATURES = FeatureConfig(shingle=1, title_weight=0, tf_cap=4)
#: Search radius, the distance up to which the tables find every candidate, how many orders
#: of the bits the tables are repeated over, and how many of a page's weakest key bits per
#: table its probe also tries flipped (README, "Detection quality": the flip reaches the
#: renderer mirrors 7-8 bits apart, which agree on no table's key exactly).
RECOMMENDED_K = 8
RECOMMENDED_TABLES_K = 3
RECOMMENDED_REPLICAS = 2
RECOMMENDED_FLIPS = 1


class Sketcher:
    """OPH sketches of pages' body text, alone or together with their simhash."""

    def __init__(
        self, config: SketchConfig | None = None, features: FeatureConfig | None = None
    ) -> None:
        self.config = config or DEFAULT_SKETCH
        self.fingerprinter = Fingerprinter(features)
        # Built once: each sketch call rebuilt its probe table (~8 us, paid by every page of a
        # crawler, which sketches one page a call).
        self._probes = dk.probe_table(self.config.log2_bins)
        self._chains = dk.probe_chains(self.config.log2_bins)

    def sketch_texts(self, texts: Sequence[str]) -> U8Array:
        """One sketch row per text (uint8 array of shape (len(texts), nbytes))."""
        words, starts, ends = pack([packable(t) for t in texts])
        rows: U8Array = sk.oph_sketch_segments(
            words, starts, ends, self.config.log2_bins, self.config.bits, self._probes,
            self._chains,
        )  # fmt: skip
        return rows

    def sketch_many(self, documents: Sequence[Document]) -> list[bytes]:
        """The sketch of each document's body text, as bytes (what the engine stores)."""
        return [row.tobytes() for row in self.sketch_texts([d.text for d in documents])]

    def fingerprint_and_sketch(self, documents: Sequence[Document]) -> tuple[U64Array, U8Array]:
        """Simhashes (identical to ``Fingerprinter.fingerprint_many``) and sketch rows."""
        return self._fused(documents, no_margins())

    def fingerprint_sketch_margins(
        self, documents: Sequence[Document]
    ) -> tuple[U64Array, U8Array, I32Array]:
        """``fingerprint_and_sketch``, and each bit's margin as ``fingerprint_margins`` gives."""
        margins = margins_for(len(documents))
        fps, rows = self._fused(documents, margins)
        return fps, rows, margins

    def _fused(self, documents: Sequence[Document], margins: I32Array) -> tuple[U64Array, U8Array]:
        features = self.fingerprinter.config
        parts, weights, owners = weighted_parts(documents, features)
        words, starts, ends = pack(parts)
        fps, rows = sk.fingerprint_sketch_segments(
            words,
            starts,
            ends,
            weights,
            owners,
            len(documents),
            features.shingle,
            self.fingerprinter._stop_table,
            self.config.log2_bins,
            self.config.bits,
            features.tf_cap,
            self._probes,
            self._chains,
            margins,
        )
        return fps, rows


def sketch_count(sketch: bytes) -> int:
    """The number of word 4-shingles of the page (saturating at 65535)."""
    return sketch[2] | (sketch[3] << 8)


def estimate(sketch_a: bytes, sketch_b: bytes) -> float:
    """Estimated resemblance of the two pages' word 4-shingle sets, in [0, 1]."""
    if len(sketch_a) != len(sketch_b) or sketch_a[:2] != sketch_b[:2]:
        raise ValueError("sketches of different versions or formats cannot be compared")
    if sketch_a[0] != SKETCH_VERSION:
        raise ValueError(f"unknown sketch version {sketch_a[0]}")
    bits = 1 << (sketch_a[1] & 15)
    bins = 1 << (sketch_a[1] >> 4)
    if sketch_count(sketch_a) == 0 or sketch_count(sketch_b) == 0:
        return 1.0 if sketch_count(sketch_a) == sketch_count(sketch_b) else 0.0
    diff = int.from_bytes(sketch_a[HEADER:], "little") ^ int.from_bytes(sketch_b[HEADER:], "little")
    differing = _differing_bins(diff, bits, len(sketch_a) - HEADER)
    return _corrected_one(bins - differing, bins, bits)


def _differing_bins(diff: int, bits: int, payload: int) -> int:
    """Bins with any differing bit: fold each b-bit lane onto its lowest bit, then count."""
    shift = 1
    while shift < bits:
        diff |= diff >> shift
        shift <<= 1
    return (diff & _lane_mask(bits, payload)).bit_count()


@cache
def _lane_mask(bits: int, payload: int) -> int:
    """The lowest bit of every b-bit lane of a payload of ``payload`` bytes."""
    pattern = {1: b"\xff", 2: b"\x55", 4: b"\x11", 8: b"\x01", 16: b"\x01\x00"}[bits]
    return int.from_bytes(pattern * (payload // len(pattern)), "little")


def _corrected_one(same: int, bins: int, bits: int) -> float:
    """``_corrected`` for one pair in Python floats (the same IEEE doubles and operations):
    numpy's per-call overhead on a scalar was most of the worker's verification time."""
    chance = 2.0**-bits
    return min(max((same / bins - chance) / (1.0 - chance), 0.0), 1.0)


def _corrected(same: npt.ArrayLike, bins: int, bits: int) -> F64Array:
    """Unbiased resemblance from the share of equal bins: b-bit values also collide by chance."""
    chance = 2.0**-bits
    share = np.asarray(same, dtype=np.float64) / bins
    return np.clip((share - chance) / (1.0 - chance), 0.0, 1.0)


def verify(
    sketch_a: bytes, sketch_b: bytes, config: SketchConfig = DEFAULT_SKETCH
) -> tuple[bool, float]:
    """(whether the pair is a near-duplicate, estimated resemblance) from two stored sketches."""
    similarity = float(estimate(sketch_a, sketch_b))
    return accepts(similarity, min(sketch_count(sketch_a), sketch_count(sketch_b)), config), (
        similarity
    )


def verify_many(
    pairs: Sequence[tuple[bytes, bytes]], config: SketchConfig = DEFAULT_SKETCH
) -> list[tuple[bool, float]]:
    """``verify`` of many pairs in one compiled pass (the worker checks every candidate of a
    batch at once: one call a candidate cost ~4 us, and radius 8 brings ~2 a page). Pairs not
    all of one sketch format go one at a time, as ``verify`` (which refuses mixed formats)."""
    if not pairs:
        return []
    width = len(pairs[0][0])
    if any(len(a) != width or len(b) != width for a, b in pairs) or width <= HEADER:
        return [verify(a, b, config) for a, b in pairs]
    rows = np.frombuffer(b"".join(a + b for a, b in pairs), dtype=np.uint8).reshape(-1, width)
    if rows[0, 0] != SKETCH_VERSION or (rows[:, :2] != rows[0, :2]).any():
        return [verify(a, b, config) for a, b in pairs]
    left = np.arange(0, rows.shape[0], 2, dtype=np.int64)
    right = left + 1
    similarity = estimate_rows(rows, left, right)
    counts = row_counts(rows)
    accepted = accepts_many(similarity, np.minimum(counts[left], counts[right]), config)
    return list(zip(accepted.tolist(), similarity.tolist(), strict=True))


def accepts(similarity: float, shorter: int, config: SketchConfig = DEFAULT_SKETCH) -> bool:
    """The verification rule, given the estimate and the shorter page's shingle count."""
    needed = config.short_threshold if shorter < config.short_shingles else config.threshold
    return similarity >= needed


def accepts_many(
    similarity: F64Array, shorter: I64Array, config: SketchConfig = DEFAULT_SKETCH
) -> npt.NDArray[np.bool_]:
    """``accepts`` for arrays of estimates and shorter-page shingle counts."""
    needed = np.where(shorter < config.short_shingles, config.short_threshold, config.threshold)
    return np.asarray(similarity >= needed)


def estimate_rows(rows: U8Array, left: I64Array, right: I64Array) -> F64Array:
    """``estimate`` for many pairs of sketch rows at once (evaluation and batch jobs)."""
    bits = 1 << (int(rows[0, 1]) & 15) if rows.shape[0] else 8
    bins = (rows.shape[1] - HEADER) * 8 // bits
    result = _corrected(sk.bin_matches(rows, left, right, bits), bins, bits)
    counts = row_counts(rows)
    empty = (counts[left] == 0) | (counts[right] == 0)
    result[empty] = (counts[left] == counts[right])[empty]
    return result


def row_counts(rows: U8Array) -> I64Array:
    """The shingle count in each sketch row's header."""
    return rows[:, 2].astype(np.int64) | (rows[:, 3].astype(np.int64) << 8)


def shingle_hashes(texts: Sequence[str]) -> tuple[U64Array, I64Array]:
    """Every word 4-shingle hash of each text, in text order, repeats kept: text d's are
    ``hashes[offsets[d]:offsets[d + 1]]`` (the tokens of fingerprint version 1)."""
    words, starts, ends = pack([packable(t) for t in texts])
    hashes: U64Array
    offsets: I64Array
    hashes, offsets = sk.shingle_hashes(words, starts, ends)
    return hashes, offsets
