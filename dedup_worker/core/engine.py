"""The decision engine: pages in, crawl-priority decisions out (pure: no Kafka, Redis, Scrapy).

Order of one batch, chosen so that any interleaving of workers ends in the earliest-wins answer:

1. ``prepare``: fingerprint every page; its id is its place in the total order (fetch time,
   URL hash). Pure CPU, no store: a worker prepares the next batch while this one waits;
2. ``docs.claim_latest`` finds earlier fetches of the same URLs (revisits), then writes every
   page's record as *pending* before the index sees the page, so any index entry another
   worker finds has a record (one store step: the two share the records' buckets);
3. ``index.probe_insert`` in page order (a page sees the earlier pages of its own batch);
4. decide each page: exact duplicate (same checksum, distance 0) or near duplicate of the
   *earliest earlier* page within k; else unique, or changed/unchanged for a revisit (an
   unchanged revisit keeps its previous fetch's standing: see ``standing.unchanged``);
5. later pages within k that were published as not suppressed get an atomic ``docs.correct``
   and a correcting decision (their own worker lost the race);
6. ``docs.finalize`` turns pending into the verdict unless a correction got there first, in
   which case the stored (corrected) verdict is the one published.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dedup_worker.contract.messages import Decision, Page, Verdict
from dedup_worker.core.index_api import HammingIndex, Matches
from dedup_worker.core.record_cache import RecordCache
from dedup_worker.core.records import PENDING, DocRecord, DocStore, page_id
from dedup_worker.core.simhash import (
    Document,
    FeatureConfig,
    Fingerprinter,
    I32Array,
    hamming,
    to_hex,
)
from dedup_worker.core.sketch import (
    DEFAULT_SKETCH,
    RECOMMENDED_FEATURES,
    RECOMMENDED_K,
    SketchConfig,
    Sketcher,
    verify,
    verify_many,
)
from dedup_worker.core.standing import Outcome, Priorities, follows, unchanged
from dedup_worker.core.text import content_checksums

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineSettings:
    """The decision rule's knobs (validated by the worker's config).

    The defaults are the measured winner of ``neardup eval`` (README, "Detection quality"):
    simhash candidates within ``k`` (the index's search radius), verified by a one-permutation
    MinHash sketch of word 4-shingles that accepts a pair when the estimated resemblance
    reaches the threshold. ``sketch=None`` turns verification off (fingerprint-only rule).
    """

    k: int = RECOMMENDED_K
    features: FeatureConfig = RECOMMENDED_FEATURES
    sketch: SketchConfig | None = DEFAULT_SKETCH
    #: Weight of novelty against depth in the priority of pages worth crawling further.
    novelty_weight: float = 0.7
    #: Depth at which the depth factor of the priority halves.
    depth_halflife: float = 4.0

    @property
    def version_tag(self) -> str:
        """Names everything stored per page that this rule compares: the fingerprint's
        configuration and, when verifying, the sketch format. Stored keys carry it, so data of
        another configuration is never compared with this one's."""
        tag = self.features.version_tag
        return f"{tag}-{self.sketch.version_tag}" if self.sketch is not None else tag


@dataclass(frozen=True)
class Prepared:
    """A batch after ``DedupEngine.prepare``: its pages and, per page, the fingerprint, sketch,
    content checksum and page id (its place in the total order)."""

    pages: tuple[Page, ...]
    fingerprints: list[int]
    sketches: list[bytes]
    checksums: list[str]
    ids: list[int]
    #: Each page's pending record, built here rather than on the thread that waits on the
    #: stores (a frozen dataclass costs ~2 us a page to build).
    records: list[DocRecord] = field(default_factory=list)
    #: Each page's bit margins (row i: page i; ``Fingerprinter.fingerprint_margins``): which
    #: key bits the index's probes try flipped. None: probes read their own keys only.
    margins: I32Array | None = None


@dataclass
class _Item:
    """One page on its way through the batch."""

    page: Page
    id: int
    fingerprint: int
    checksum: str
    sketch: bytes = b""
    previous: DocRecord | None = None
    unchanged: bool = False
    matches: list[tuple[int, int]] = field(default_factory=list)  # (id, distance), others only
    record: DocRecord | None = None
    row: int = 0  # the page's place in its batch (its row of the margins)


def _checksums(pages: Sequence[Page]) -> list[str]:
    """Each page's checksum: the one it came with, else computed (all in one pass)."""
    missing = [i for i, p in enumerate(pages) if not p.checksum]
    computed = dict(zip(missing, content_checksums([pages[i].text for i in missing]), strict=True))
    return [p.checksum or computed[i] for i, p in enumerate(pages)]


# The members the per-page path names, bound once: on Python 3.11 ``Verdict.X`` goes through
# ``EnumType.__getattr__``'s slow lookup (~0.1 us each, several a page). A member is its own
# value (``StrEnum``), so it is passed where a verdict string is wanted, without ``.value``
# (a Python-level property, ~0.2 us).
_UNIQUE, _CHANGED = Verdict.UNIQUE, Verdict.CHANGED
_NEAR, _EXACT = Verdict.NEAR_DUPLICATE, Verdict.EXACT_DUPLICATE


class DedupEngine:
    """Decides one batch of pages at a time against a shared index and record store."""

    def __init__(
        self,
        index: HammingIndex,
        docs: DocStore,
        settings: EngineSettings | None = None,
        clock: Callable[[], float] = time.time,
        record_cache: int = 0,
    ) -> None:
        """``record_cache``: how many candidate records to keep in process
        (:mod:`~dedup_worker.core.record_cache`; 0 reads every one from ``docs``)."""
        self.index = index
        self.docs = docs
        self.records = RecordCache(record_cache)
        self.settings = settings or EngineSettings()
        self.fingerprinter = Fingerprinter(self.settings.features)
        sketch = self.settings.sketch
        self.sketcher = Sketcher(sketch, self.settings.features) if sketch else None
        self._version_tag = self.settings.version_tag  # a property; asked per page
        settings = self.settings
        self.priorities = Priorities(settings.k, settings.novelty_weight, settings.depth_halflife)
        self.clock = clock

    def process(self, pages: Sequence[Page]) -> list[Decision]:
        """One decision per page (input order), then corrections of earlier-published pages."""
        return self.decide(self.prepare(pages))

    def prepare(self, pages: Sequence[Page]) -> Prepared:
        """The CPU part of a batch (fingerprints, sketches, checksums, ids), without the stores.

        Thread-safe: a worker prepares its next batch while this one waits on Redis.
        """
        documents = [Document(p.text, p.title) for p in pages]
        fps, sketches, margins = self._fingerprints(documents)
        checksums = _checksums(pages)
        ids = [page_id(p.url, p.fetched_at) for p in pages]
        records = [
            DocRecord(i, p.url, p.host, p.fetched_at, fp, checksum, PENDING, sketch=sketch)
            for p, i, fp, checksum, sketch in zip(pages, ids, fps, checksums, sketches, strict=True)
        ]
        return Prepared(tuple(pages), fps, sketches, checksums, ids, records, margins)

    def decide(self, prepared: Prepared) -> list[Decision]:
        """``process`` after ``prepare``: every store step; safe to call again after a failure."""
        if not prepared.pages:
            return []
        pending: list[DocRecord | None] = [*prepared.records] or [None] * len(prepared.pages)
        items = [
            _Item(page, ident, fp, checksum, sketch, record=record, row=row)
            for row, (page, fp, sketch, checksum, ident, record) in enumerate(zip(
                prepared.pages, prepared.fingerprints, prepared.sketches,
                prepared.checksums, prepared.ids, pending, strict=True,
            ))
        ]  # fmt: skip
        records = self._claim_revisits(items)
        self._probe(items, prepared.margins)
        known = self.records.get_many({m for item in items for m, _ in item.matches}, self.docs.get)
        known.update(records)
        checks = self._check_all(items, known)
        outcomes: dict[int, Outcome] = {}
        for item in sorted(items, key=lambda i: i.id):  # a revisit after its previous fetch
            outcomes[item.id] = self._decide(item, known, outcomes, checks)
        corrections = self._corrections(items, known, checks)
        settled = self.docs.finalize({i: (o.verdict, o.original) for i, o in outcomes.items()})
        decisions = [
            self._decision(item, outcomes[item.id], settled.get(item.id)) for item in items
        ]
        return decisions + corrections

    # ---- steps ---------------------------------------------------------------------------

    def _claim_revisits(self, items: list[_Item]) -> dict[int, DocRecord]:
        """Claim every page's pending record and find its previous fetch (see ``_revisits``):
        one store step. Returns each page's stored record by id (its own, or a replay's)."""
        records = [self._record(i) for i in items]
        existing, latest = self.docs.claim_latest(records)
        self._revisits(items, latest)
        return {r.id: existing.get(r.id, r) for r in records}

    def _revisits(self, items: list[_Item], latest: dict[str, DocRecord]) -> None:
        """Each page's previous fetch of its URL (stored before the batch, or earlier in it)."""
        if not latest and len({item.page.url for item in items}) == len(items):
            return  # most batches: every URL new, and once (~1.5 us a page less)
        in_batch: dict[str, DocRecord] = {}
        for item in sorted(items, key=lambda i: i.id):
            stored = latest.get(item.page.url)
            candidates = [r for r in (stored, in_batch.get(item.page.url)) if r is not None]
            earlier = [r for r in candidates if r.id < item.id]
            if earlier:
                previous = max(earlier, key=lambda r: r.id)
                item.previous = previous
                item.unchanged = previous.checksum == item.checksum or self._similar(
                    item.fingerprint, item.sketch, previous
                )
            in_batch[item.page.url] = self._record(item)

    @staticmethod
    def _record(item: _Item) -> DocRecord:
        """The page's pending record (built once: the revisit check and the claim share it)."""
        if item.record is None:
            item.record = DocRecord(
                item.id, item.page.url, item.page.host, item.page.fetched_at, item.fingerprint,
                item.checksum, PENDING, sketch=item.sketch,
            )  # fmt: skip
        return item.record

    def _fingerprints(self, documents: list[Document]) -> tuple[list[int], list[bytes], I32Array]:
        if self.sketcher is None:
            fps, margins = self.fingerprinter.fingerprint_margins(documents)
            return fps.tolist(), [b""] * len(documents), margins
        fps, rows, margins = self.sketcher.fingerprint_sketch_margins(documents)
        return fps.tolist(), [row.tobytes() for row in rows], margins

    def _similar(self, fingerprint: int, sketch: bytes, other: DocRecord) -> bool:
        """Within k, and (when both pages have sketches) verified by their resemblance."""
        if hamming(fingerprint, other.fingerprint) > self.settings.k:
            return False
        return self._verified(sketch, other.sketch)[0]

    def _verified(self, a: bytes, b: bytes) -> tuple[bool, float | None]:
        if self.settings.sketch is None or not a or not b or len(a) != len(b):
            return True, None  # records without a sketch fall back to the fingerprint rule
        return verify(a, b, self.settings.sketch)

    def _probe(self, items: list[_Item], margins: I32Array | None) -> None:
        """probe_insert in page order; unchanged revisits are not indexed again."""
        probing = sorted((i for i in items if not i.unchanged), key=lambda i: i.id)
        if not probing:
            return
        fps = np.array([i.fingerprint for i in probing], dtype=np.uint64)
        ids = np.array([i.id for i in probing], dtype=np.uint64)
        rows = None if margins is None else margins[[i.row for i in probing]]
        found: Matches = self.index.probe_insert(fps, ids, rows)
        for q, ident, dist in zip(
            found.query.tolist(), found.id.tolist(), found.distance.tolist(), strict=True
        ):
            if ident != probing[q].id:
                probing[q].matches.append((ident, dist))

    def _decide(
        self,
        item: _Item,
        known: dict[int, DocRecord],
        decided: dict[int, Outcome],
        checks: dict[tuple[int, int], tuple[bool, float | None]],
    ) -> Outcome:
        if item.unchanged and item.previous is not None:
            distance = hamming(item.previous.fingerprint, item.fingerprint)
            return unchanged(distance, item.previous, decided.get(item.previous.id))
        if not item.matches:  # most pages: nothing within the radius (same result, less work)
            evidence = self._evidence(item, [], [])
            evidence["rejected_by_sketch"] = 0
            return self._new_content(item, evidence)
        others = [
            (ident, dist)
            for ident, dist in item.matches
            if ident in known and known[ident].url != item.page.url
        ]
        verified = {ident: checks[item.id, ident] for ident, _ in others}
        others = [(i, d) for i, d in others if verified[i][0]]
        earlier = sorted((ident, dist) for ident, dist in others if ident < item.id)
        evidence = self._evidence(item, others, earlier)
        resemblance = [r for i, _ in earlier if (r := verified[i][1]) is not None]
        if resemblance:
            evidence["resemblance"] = round(max(resemblance), 4)
        evidence["rejected_by_sketch"] = len(verified) - len(others)
        exact = [(i, d) for i, d in earlier if d == 0 and known[i].checksum == item.checksum]
        if exact or earlier:
            verdict = _EXACT if exact else _NEAR
            ident, dist = (exact or earlier)[0]
            return Outcome(verdict, (known[ident].url, ident), dist, evidence)
        return self._new_content(item, evidence)

    @staticmethod
    def _new_content(item: _Item, evidence: dict[str, Any]) -> Outcome:
        """No earlier near-duplicate: a changed revisit of its URL, or a unique page."""
        if item.previous is not None:
            distance = hamming(item.previous.fingerprint, item.fingerprint)
            return Outcome(_CHANGED, None, distance, evidence)
        return Outcome(_UNIQUE, None, None, evidence)

    def _check_all(
        self, items: list[_Item], known: dict[int, DocRecord]
    ) -> dict[tuple[int, int], tuple[bool, float | None]]:
        """(page id, candidate id) -> (duplicate?, resemblance) for every candidate of another
        URL in the batch: the checksums agree, or the sketches verify (all in one call)."""
        out: dict[tuple[int, int], tuple[bool, float | None]] = {}
        keys: list[tuple[int, int]] = []
        pairs: list[tuple[bytes, bytes]] = []
        sketch = self.settings.sketch
        for item in items:
            for ident, _ in item.matches:
                other = known.get(ident)
                if other is None or other.url == item.page.url:
                    continue
                if other.checksum == item.checksum:
                    out[item.id, ident] = (True, 1.0)
                elif sketch is None or not item.sketch or len(item.sketch) != len(other.sketch):
                    out[item.id, ident] = (True, None)  # no sketch: the fingerprint rule
                else:
                    keys.append((item.id, ident))
                    pairs.append((item.sketch, other.sketch))
        if sketch is not None:
            out.update(zip(keys, verify_many(pairs, sketch), strict=True))
        return out

    def _corrections(
        self,
        items: list[_Item],
        known: dict[int, DocRecord],
        checks: dict[tuple[int, int], tuple[bool, float | None]],
    ) -> list[Decision]:
        """Later pages within k that did not see this one: mark them, re-decide them. Only
        pairs that match from either side (``HammingIndex.mutual``): a pair found through this
        page's flipped key bits alone might not have been found by the later page's probe, so
        a correction would make the verdict depend on which worker came first."""
        wanted: dict[int, tuple[str, tuple[str, int]]] = {}
        for item in items:
            for ident, dist in item.matches:
                later = known.get(ident)
                if later is None or ident < item.id or later.url == item.page.url:
                    continue
                if not checks[item.id, ident][0]:
                    continue
                if not self.index.mutual(item.fingerprint ^ later.fingerprint):
                    continue
                original = self._earliest_original(item, later, known)
                exact = dist == 0 and later.checksum == item.checksum
                verdict = Verdict.EXACT_DUPLICATE if exact else Verdict.NEAR_DUPLICATE
                if ident not in wanted or original[1] < wanted[ident][1][1]:
                    wanted[ident] = (verdict.value, original)
        if not wanted:
            return []
        published = self.docs.correct(wanted)
        return [self._correction(known[i], *wanted[i]) for i in sorted(published)]

    def _earliest_original(
        self, item: _Item, later: DocRecord, known: dict[int, DocRecord]
    ) -> tuple[str, int]:
        """The earliest page we know within k of ``later``: this one or one of its originals."""
        best = (item.page.url, item.id)
        for ident, _ in item.matches:
            record = known.get(ident)
            if record is None or ident >= best[1] or record.url == later.url:
                continue
            if record.checksum == later.checksum or self._similar(
                later.fingerprint, later.sketch, record
            ):
                best = (record.url, ident)
        return best

    # ---- output --------------------------------------------------------------------------

    def _decision(self, item: _Item, outcome: Outcome, stored: DocRecord | None) -> Decision:
        if stored is not None and stored.verdict not in (PENDING, outcome.verdict):
            # Corrected by another worker (or decided before a crash): publish the stored state.
            original = (
                (stored.duplicate_of, stored.duplicate_of_id or 0) if stored.duplicate_of else None
            )
            outcome = Outcome(
                Verdict(stored.verdict), original, outcome.distance, {**outcome.evidence,
                "settled": "stored verdict published (corrected or replayed)"},
            )  # fmt: skip
        follow = follows(outcome)
        if not follow:
            outcome.evidence["suppressed_outlinks"] = len(item.page.outlinks)
        return Decision(
            url=item.page.url,
            host=item.page.host,
            verdict=outcome.verdict,
            simhash=to_hex(item.fingerprint),
            priority=self.priorities.of(item.page.depth, outcome),
            follow_outlinks=follow,
            fetched_at=item.page.fetched_at,
            decided_at=self.clock(),
            duplicate_of=outcome.original[0] if outcome.original else None,
            distance=outcome.distance,
            outlinks=item.page.outlinks if follow else (),
            corrects=False,
            evidence=outcome.evidence,
        )

    def _correction(self, record: DocRecord, verdict: str, original: tuple[str, int]) -> Decision:
        return Decision(
            url=record.url,
            host=record.host,
            verdict=Verdict(verdict),
            simhash=to_hex(record.fingerprint),
            priority=0.0,
            follow_outlinks=False,
            fetched_at=record.fetched_at,
            decided_at=self.clock(),
            duplicate_of=original[0],
            distance=None,
            outlinks=(),
            corrects=True,
            evidence={
                "rule": "an earlier page within k was indexed after this one was decided",
                "original_id": original[1],
            },
        )

    def _evidence(
        self, item: _Item, others: list[tuple[int, int]], earlier: list[tuple[int, int]]
    ) -> dict[str, Any]:
        return {
            "rule": "near-duplicate of the earliest earlier page within k",
            "k": self.settings.k,
            "fingerprint_version": self._version_tag,
            "page_id": item.id,
            "candidates": len(item.matches),
            "earlier_matches": len(earlier),
            "later_matches": len(others) - len(earlier),
            "nearest": min([d for _, d in others]) if others else None,
        }
