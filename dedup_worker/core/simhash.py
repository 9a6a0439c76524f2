"""Weighted Charikar simhash (f = 64) over word shingles: the public fingerprinting API.

``Fingerprinter`` is built once from a ``FeatureConfig`` and fingerprints documents one at a
time or, much faster, in batches (one kernel call for the whole batch). Every stored key carries
``FeatureConfig.version_tag``, so fingerprints made with another tokeniser or another feature
configuration never mix with these.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dedup_worker.core import _simhash_kernel as kernel
from dedup_worker.core.stopwords import ENGLISH_STOP_WORDS
from dedup_worker.core.text import packable, prepare
from dedup_worker.errors import ConfigError

logger = logging.getLogger(__name__)

#: Bumped whenever tokenisation, hashing or voting changes the fingerprint of any text.
FINGERPRINT_VERSION = 1

U64Array = npt.NDArray[np.uint64]
I64Array = npt.NDArray[np.int64]
I32Array = npt.NDArray[np.int32]


def no_margins() -> I32Array:
    """The margins argument of the kernels when none are wanted (an array of no rows)."""
    return np.zeros((0, 64), dtype=np.int32)


def margins_for(n_docs: int) -> I32Array:
    """Room for the margins of ``n_docs`` documents (see ``Fingerprinter.fingerprint_margins``)."""
    return np.zeros((n_docs, 64), dtype=np.int32)


@dataclass(frozen=True, slots=True)
class FeatureConfig:
    """Which features vote, and how much.

    ``shingle`` words make one feature (1 = single words). Every occurrence votes, so the
    weight of a feature is its term frequency times the weight of the part it came from
    (body 1, ``title_weight`` for the title, ``heading_weight`` for headings). ``tf_cap`` > 0
    counts at most that many occurrences of a feature per part (0: no cap).
    """

    shingle: int = 1
    title_weight: int = 2
    heading_weight: int = 1
    drop_stop_words: bool = False
    tf_cap: int = 0
    stop_words: frozenset[str] = field(default=ENGLISH_STOP_WORDS, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.shingle <= 8:
            raise ConfigError(f"shingle must be 1..8 words, got {self.shingle}")
        for name in ("title_weight", "heading_weight", "tf_cap"):
            if not 0 <= getattr(self, name) <= 64:
                raise ConfigError(f"{name} must be 0..64, got {getattr(self, name)}")

    @property
    def version_tag(self) -> str:
        """A short stable tag naming the fingerprint version and this configuration."""
        stop = "s" if self.drop_stop_words else "k"
        cap = f"c{self.tf_cap}" if self.tf_cap else ""  # uncapped tags are those of before
        return (
            f"f{FINGERPRINT_VERSION}w{self.shingle}t{self.title_weight}h{self.heading_weight}"
            f"{stop}{cap}"
        )


@dataclass(slots=True)  # a value; not frozen for speed, one per page (see contract.messages.Page)
class Document:
    """The parts of a page that vote: body text, title and headings."""

    text: str
    title: str = ""
    headings: tuple[str, ...] = ()


class Fingerprinter:
    """Computes 64-bit simhashes under one ``FeatureConfig``; safe to share between threads."""

    def __init__(self, config: FeatureConfig | None = None) -> None:
        self.config = config or FeatureConfig()
        self._stop_table = _stop_table(self.config)

    def fingerprint(self, text: str, title: str = "", headings: Sequence[str] = ()) -> int:
        """The simhash of one document as a Python int in [0, 2**64)."""
        return int(self.fingerprint_many([Document(text, title, tuple(headings))])[0])

    def fingerprint_texts(self, texts: Sequence[str]) -> U64Array:
        """Simhashes of plain texts (no title or headings), one kernel call for all of them."""
        words, starts, ends = kernel.pack([packable(text) for text in texts])
        docs = np.arange(len(texts), dtype=np.int64)
        return self._run(words, starts, ends, np.ones_like(ends), docs)

    def fingerprint_many(self, documents: Sequence[Document]) -> U64Array:
        """Simhashes of documents with titles and headings weighted per the config."""
        parts, weights, owners = weighted_parts(documents, self.config)
        words, starts, ends = kernel.pack(parts)
        return self._run(words, starts, ends, weights, owners, n_docs=len(documents))

    def fingerprint_margins(self, documents: Sequence[Document]) -> tuple[U64Array, I32Array]:
        """``fingerprint_many`` and, per document and bit, the bit's margin: how far its vote
        was from a tie (|2 x weight voting 1 - total weight|; row i, column b is bit b of
        document i). The bits of smallest margin are those an edit flips first."""
        parts, weights, owners = weighted_parts(documents, self.config)
        words, starts, ends = kernel.pack(parts)
        margins = margins_for(len(documents))
        fps = self._run(words, starts, ends, weights, owners, len(documents), margins)
        return fps, margins

    def _run(
        self,
        words: npt.NDArray[np.uint64],
        starts: npt.NDArray[np.int64],
        ends: npt.NDArray[np.int64],
        weights: npt.NDArray[np.int64],
        owners: npt.NDArray[np.int64],
        n_docs: int | None = None,
        margins: I32Array | None = None,
    ) -> U64Array:
        result: U64Array = kernel.simhash_segments(
            words,
            starts,
            ends,
            weights,
            owners,
            len(starts) if n_docs is None else n_docs,
            self.config.shingle,
            self._stop_table,
            self.config.tf_cap,
            no_margins() if margins is None else margins,
        )
        return result


def weighted_parts(
    documents: Sequence[Document], config: FeatureConfig
) -> tuple[list[str | bytes], I64Array, I64Array]:
    """The parts of each document that vote, for ``pack``: (parts, their weights, the index of
    the document of each). A document's body comes first (a sketch covers it alone), then its
    title and headings as ``config`` weighs them."""
    parts: list[str | bytes] = []
    weights: list[int] = []
    owners: list[int] = []
    title_weight = config.title_weight
    heading_weight = config.heading_weight
    for index, doc in enumerate(documents):
        parts.append(packable(doc.text))
        weights.append(1)
        owners.append(index)
        if doc.title and title_weight:
            parts.append(packable(doc.title))
            weights.append(title_weight)
            owners.append(index)
        if heading_weight:
            for heading in doc.headings:
                parts.append(packable(heading))
                weights.append(heading_weight)
                owners.append(index)
    return parts, np.asarray(weights, dtype=np.int64), np.asarray(owners, dtype=np.int64)


def _stop_table(config: FeatureConfig) -> U64Array:
    """An open-addressing hash set of the stop words' token hashes (empty when not used)."""
    if not config.drop_stop_words:
        return np.zeros(0, dtype=np.uint64)
    joined = prepare(" ".join(sorted(config.stop_words)))
    hashes = np.unique(kernel.word_hashes(kernel.aligned(joined), len(joined)))
    size = 1 << int(np.ceil(np.log2(max(hashes.size, 1) * 4)))
    table = np.zeros(size, dtype=np.uint64)
    for value in hashes.tolist():
        slot = value & (size - 1)
        while table[slot]:
            slot = (slot + 1) & (size - 1)
        table[slot] = value
    return table


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints."""
    return (a ^ b).bit_count()


def to_hex(fingerprint: int) -> str:
    """16 lowercase hex digits: the wire and file form of a fingerprint."""
    # to_bytes().hex(): ~90 ns; the format spec "016x" took ~470 ns (one per decision).
    return fingerprint.to_bytes(8, "big").hex()


def from_hex(text: str) -> int:
    """Parse 16 hex digits (surrounding whitespace allowed) into a fingerprint."""
    stripped = text.strip()
    if len(stripped) != 16:
        raise ValueError(f"a fingerprint is 16 hex digits, got {stripped!r}")
    return int(stripped, 16)
