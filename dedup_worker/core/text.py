"""Text normalisation shared by the fingerprint and the exact checksum (pure functions).

``prepare`` turns text into the byte stream the simhash kernel tokenises. ASCII text takes a
fast path (it is already NFKC-normal; the kernel lowercases it and treats every non-alphanumeric
byte as a separator). Other text is NFKC-normalised and case-folded in Python, and every
character that is not a word character becomes a space, so the kernel can treat all bytes
>= 0x80 as word bytes. Both paths give the same bytes-to-words split for ASCII input; a
property test pins that.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import Sequence

from dedup_worker.core._text_kernel import collapse_ascii_whitespace

logger = logging.getLogger(__name__)

_NON_WORD = re.compile(r"[\W_]+")
# Scripts written without spaces: one token per character, so shingles become character n-grams.
_UNSPACED = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])")


def normalize(text: str) -> str:
    """NFKC, case folding, punctuation to spaces, whitespace collapsed: the comparable words."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    spaced = _UNSPACED.sub(r" \1 ", _NON_WORD.sub(" ", folded))
    return " ".join(spaced.split())


def prepare(text: str) -> bytes:
    """The bytes the simhash kernel reads for ``text`` (see the module docstring)."""
    if text.isascii():
        return text.encode("ascii")
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _UNSPACED.sub(r" \1 ", _NON_WORD.sub(" ", folded)).encode("utf-8")


def words(text: str) -> list[str]:
    """The words the fingerprint sees, in order (for tests, evaluation and explanations)."""
    return normalize(text).split()


def content_checksum(text: str) -> str:
    """Exact-duplicate checksum: BLAKE2b-128 of the NFC text with whitespace collapsed.

    Case and punctuation are kept: two pages are exact duplicates only when a reader would see
    the same characters. Near-duplicates are the simhash's business.
    """
    return content_checksums([text])[0]


def content_checksums(texts: Sequence[str]) -> list[str]:
    """``content_checksum`` of each text. Text that is canonical already (ASCII, single spaces,
    at most newlines to replace: nearly all extracted text) costs a few substring searches;
    other ASCII text takes one compiled pass for the whole batch (split/join costs ~40 us
    for 5 KB), the rest the general path."""
    canonical: list[bytes | memoryview] = [b""] * len(texts)
    irregular: list[int] = []
    for i, text in enumerate(texts):
        if not text.isascii():
            canonical[i] = canonical_whitespace(text).encode("utf-8", "surrogatepass")
        elif (flat := _regular_ascii(text)) is not None:
            canonical[i] = flat.encode("ascii")
        else:
            irregular.append(i)
    collapsed = collapse_ascii_whitespace([texts[i].encode("ascii") for i in irregular])
    for i, view in zip(irregular, collapsed, strict=True):
        canonical[i] = view
    return [hashlib.blake2b(c, digest_size=16).hexdigest() for c in canonical]


def _regular_ascii(text: str) -> str | None:
    """ASCII text with its newlines made spaces, if that leaves it canonical; else None."""
    flat = text.replace("\n", " ")
    if (
        "  " in flat
        or flat[:1] == " "
        or flat[-1:] == " "
        or any(c in flat for c in "\t\r\x0b\x0c\x1c\x1d\x1e\x1f")
    ):
        return None
    return flat


def canonical_whitespace(text: str) -> str:
    """NFC text with every whitespace run replaced by one space, no leading/trailing space."""
    if text.isascii():
        flat = _regular_ascii(text)
        if flat is not None:
            return flat
        return bytes(collapse_ascii_whitespace([text.encode("ascii")])[0]).decode("ascii")
    return " ".join(unicodedata.normalize("NFC", text).split())
