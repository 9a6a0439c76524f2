"""A direct comparison of two fetched pages, for rule checks the detector's index cannot settle.

A rule check asks whether a page holds its counterpart's content. The decisions answer it when
the detector put both pages in one family; when it did not, either the pages differ (the rule
failed) or the index missed the pair: it finds candidates within a few bits of the simhash,
and pairs at Jaccard >= 0.9 sometimes lie further apart. On the subtree test site the default
detector finds 191 of 197 copies, and the six it misses come in runs (two print views two items
apart, two adjacent mirror topics): enough to put 2 failures among a good rule's last 8 checks
and drop it for good (``tests/unit/crawler/rules/test_policy_on_sites.py`` measures it).

So the crawler keeps its own sketch of each page it publishes (the same 1024 x 2-bit
one-permutation MinHash of word 4-shingles the worker verifies with, computed from the page's
text: ~40 us a page), and :meth:`PageComparer.resembles` estimates the pair's resemblance from
the two sketches, accepting it as a check only clearly above the worker's threshold
(:data:`CHECK_SKETCH`). The sketches live in a
:class:`SketchStore` shared by the crawl's processes (in Redis: ``crawler.rules.redis_sketches``,
each kept ``NEARDUP_RULE_SKETCH_TTL`` seconds), not in the worker's page records: their layout
is the worker's own. A pair whose sketches are gone (expired, or fetched before this crawler
process kept any) has no direct comparison; the detector's word stands.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from dedup_worker.core.sketch import DEFAULT_SKETCH, HEADER, Sketcher, verify

#: The bar a rule check or a group's sample must clear. A check vouches for pages nobody will
#: fetch, so it must show a duplicate clearly, not by a hair: an estimate two standard errors
#: above the detector's threshold (0.922 for the default sketch), which a pair at J 0.9 reaches
#: ~2% of the time, one at 0.88 ~0.02%, one at 0.93 ~81%. At the detector's own threshold, the
#: pairs at J 0.88-0.90 its verification accepts counted as clean checks, and the rules and
#: groups they vouched for skipped siblings below 0.9: 2-29 unique pages in crawls of 19 real
#: documentation hosts (median 7 of 8 runs), 0-6 (median 3) with this bar, for 1.5% more
#: fetches (README, "Real sites").
#: The shape of the sketches the crawler keeps (the worker's own); its tag is in their keys.
PAGE_SKETCH = DEFAULT_SKETCH
_ERROR = PAGE_SKETCH.standard_error(PAGE_SKETCH.threshold)
CHECK_SKETCH = replace(PAGE_SKETCH, threshold=round(PAGE_SKETCH.threshold + 2 * _ERROR, 3))


class SketchStore(Protocol):
    """Page sketches by URL, shared by a crawl's processes (entries may expire)."""

    def put_many(self, sketches: Mapping[str, bytes]) -> None: ...
    def get_many(self, urls: Sequence[str]) -> list[bytes | None]: ...
    def close(self) -> None: ...


class MemorySketchStore:
    """One process's sketches, the oldest forgotten beyond ``limit``. Thread-safe."""

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._sketches: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def put_many(self, sketches: Mapping[str, bytes]) -> None:
        with self._lock:
            self._sketches.update(sketches)
            while len(self._sketches) > self.limit:
                self._sketches.popitem(last=False)

    def get_many(self, urls: Sequence[str]) -> list[bytes | None]:
        with self._lock:
            return [self._sketches.get(url) for url in urls]

    def close(self) -> None:
        pass


class PageComparer:
    """Sketches this process's pages into a store and compares any two pages from it."""

    def __init__(
        self, store: SketchStore, local_limit: int = 10_000, shingles_limit: int = 500_000
    ) -> None:
        self.store = store
        self._sketcher = Sketcher(PAGE_SKETCH)
        self._pending: dict[str, bytes] = {}
        self._local: OrderedDict[str, bytes] = OrderedDict()  # recent pages: no round trip
        self._local_limit = local_limit
        #: Pages' shingle counts, kept longer than their sketches (``shingle_count``).
        self._shingles: dict[str, int] = {}
        self._shingles_limit = shingles_limit
        self.compared = 0

    def sketch(self, text: str) -> bytes:
        return bytes(self._sketcher.sketch_texts([text])[0].tobytes())

    def remember(self, url: str, text: str) -> None:
        """Sketch a page this process publishes (stored with the next :meth:`flush`)."""
        sketch = self.sketch(text)
        self._pending[url] = sketch
        self._keep(url, sketch)

    def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, {}
            self.store.put_many(pending)

    def resembles(self, url: str, other: str) -> bool | None:
        """Whether the two pages' estimated resemblance clears :data:`CHECK_SKETCH`'s bar; None
        if either sketch is unknown."""
        self.flush()  # a page of this batch may be one of the two
        sketches = self._sketches([url, other])
        if sketches[0] is None or sketches[1] is None:
            return None
        self.compared += 1
        return verify(sketches[0], sketches[1], CHECK_SKETCH)[0]

    def shingle_count(self, url: str) -> int | None:
        """The word 4-shingles of a page this process sketched or compared (the sketch's
        header keeps the count; saturating at 65,535), without I/O; None if not known here."""
        return self._shingles.get(url)

    def _sketches(self, urls: list[str]) -> list[bytes | None]:
        found: list[bytes | None] = [self._local.get(url) for url in urls]
        missing = [url for url, sketch in zip(urls, found, strict=True) if sketch is None]
        if missing:
            fetched = dict(zip(missing, self.store.get_many(missing), strict=True))
            for url, sketch in fetched.items():
                if sketch is not None:  # kept here too: its length says how to judge it
                    self._keep(url, sketch)
            found = [fetched.get(url) if sketch is None else sketch for url, sketch in
                     zip(urls, found, strict=True)]  # fmt: skip
        return found

    def _keep(self, url: str, sketch: bytes) -> None:
        if len(self._shingles) >= self._shingles_limit:
            self._shingles.clear()  # forgotten lengths count as long: the rule's word stands
        if len(sketch) >= HEADER:
            self._shingles[url] = sketch[2] | sketch[3] << 8
        self._local[url] = sketch
        self._local.move_to_end(url)
        while len(self._local) > self._local_limit:
            self._local.popitem(last=False)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.store.close()
