"""The page record, deterministic sampling and the crawler's view of an HTML page."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Doc:
    """One corpus page: ``id`` names source, release/renderer and path; ``source`` its family
    group (``rust``, ``man``... or ``site:npm``, ``short:pydoc``...)."""

    id: str
    title: str
    text: str
    source: str


class MissingTool(RuntimeError):
    """A renderer or archive the corpus needs is not installed; the message says what to do."""


def stable_fraction(key: str) -> float:
    """A deterministic pseudo-random number in [0, 1) for ``key`` (sampling, ordering)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def stable_int(key: str, low: int, high: int) -> int:
    """A deterministic integer in [low, high] for ``key``."""
    return low + int(stable_fraction(key) * (high - low + 1))


def sampled(key: str, rate: float) -> bool:
    return stable_fraction("sample:" + key) < rate


MAX_HTML_BYTES = 400_000


def page_doc(body: bytes, url: str, doc_id: str, source: str) -> Doc | None:
    """What the crawler sees of an HTML page (title and visible text, its own extractor), or
    None for a page a crawler would not index (too large, a redirect stub, empty)."""
    from crawler.extract import extract

    if len(body) > MAX_HTML_BYTES:
        return None
    page = extract(body, url)
    if page.text.startswith("Redirecting to") or not page.text.strip():
        return None
    return Doc(doc_id, page.title, page.text, source)
