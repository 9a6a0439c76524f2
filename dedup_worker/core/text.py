"""Text normalisation shared by the fingerprint and the exact checksum (pure functions).

``prepare`` turns text into the byte stream the simhash kernel tokenises. ASCII text takes a
fast path (it is already NFKC-normal; the kernel lowercases it and treats every non-alphanumeric
byte as a separator). Other text is NFKC-normalised and case-folded in Python (one distinct
character at a time where NFKC treats the character alike wherever it stands), and every
non-ASCII character that is not a word character becomes spaces (``_unicode_kernel``), so the
kernel can treat all bytes >= 0x80 as word bytes; text in a script written without spaces also
gets a space around each such character (one token per character). All paths give the words of
``normalize``; property tests pin that.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np

from dedup_worker.core._text_kernel import collapse_ascii_whitespace, irregular_ascii
from dedup_worker.core._unicode_kernel import (
    blank_non_ascii,
    character_fold,
    non_ascii_tokens,
    plain_punctuation,
    separate_words,
    word_table,
)

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
    raw = text.encode("utf-8")
    data = np.frombuffer(bytearray(raw), dtype=np.uint8)
    found = blank_non_ascii(data)
    # Distinct code points first: a page in another script has thousands of non-ASCII
    # characters but few distinct ones (np.unique sorts in C; a set of them all took ~100 us).
    distinct = np.unique(found).tolist() if found.size > 256 else set(found.tolist())
    if all(map(plain_punctuation, distinct)):
        return data.tobytes()  # NFKC and case folding would change no word: skip them
    folded = _fold_by_character(raw, distinct)
    if folded is None and found.size * 128 > len(raw):  # dense: fold it all at once
        folded = unicodedata.normalize("NFKC", text).casefold().encode("utf-8")
    elif folded is None:
        folded = _fold_non_ascii_tokens(text, raw)
    # ASCII punctuation stays: the kernel splits on it as _NON_WORD would.
    return separate_words(np.frombuffer(folded, dtype=np.uint8), word_table()).tobytes()


def _fold_by_character(raw: bytes, codepoints: Iterable[int]) -> bytes | None:
    """NFKC and case folding of UTF-8 ``raw`` whose distinct non-ASCII characters are
    ``codepoints``, one distinct character at a time (``bytes.replace``: UTF-8 only matches
    at character boundaries), when NFKC changes each of them alike wherever it stands
    (``character_fold``) and no image holds a character replaced after it. ASCII is left as
    it is (the kernel lowercases it). The common case on real pages, a few accented capitals,
    no-break spaces or ligatures among text in Latin script, takes ~30 us instead of ~120 us
    for NFKC of the whole text, which holds the interpreter lock (``None``: fold otherwise)."""
    changes: list[tuple[bytes, bytes]] = []
    for codepoint in codepoints:
        fold = character_fold(codepoint)
        if fold is None:
            return None
        if fold[0] != fold[1]:
            changes.append(fold)
    images = b"".join(image for _, image in changes)
    if any(char in images for char, _ in changes):
        return None
    for char, image in changes:
        raw = raw.replace(char, image)
    return raw


def _fold_non_ascii_tokens(text: str, raw: bytes) -> bytes:
    """NFKC and case folding of the tokens of ``text`` (UTF-8: ``raw``) that hold a non-ASCII
    character, the rest as it is (the kernel lowercases ASCII itself): the same words as
    folding the whole text, in a fraction of the time on real pages, whose non-ASCII
    characters are few (whole-text NFKC and case folding took ~140 us for a 9k-character
    page, most of the non-ASCII path). Text mostly in non-ASCII tokens is folded whole."""
    spans = non_ascii_tokens(np.frombuffer(raw, dtype=np.uint8)).tolist()
    if sum(spans[1::2]) - sum(spans[0::2]) > len(raw) // 2:  # mostly non-ASCII: fold it all
        return unicodedata.normalize("NFKC", text).casefold().encode("utf-8")
    pieces: list[bytes] = []
    at = 0
    for start, end in zip(spans[0::2], spans[1::2], strict=True):
        token = raw[start:end].decode("utf-8")
        pieces += (raw[at:start], unicodedata.normalize("NFKC", token).casefold().encode("utf-8"))
        at = end
    pieces.append(raw[at:])
    return b"".join(pieces)


def packable(text: str) -> str | bytes:
    """``prepare(text)``, or ``text`` itself when it is ASCII (``prepare`` would only encode
    it): the kernels' ``pack`` encodes ASCII text straight into its buffer."""
    return text if text.isascii() else prepare(text)


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
    """``content_checksum`` of each text. ASCII text (nearly all) is checked in one compiled
    pass without the GIL; canonical text (newlines aside: nearly all extracted text) is then
    hashed as it is, the rest collapsed in a second compiled pass (split/join costs ~40 us
    for 5 KB). Other text takes the general path."""
    canonical: list[bytes | memoryview] = [b""] * len(texts)
    ascii_at = [i for i, text in enumerate(texts) if text.isascii()]
    encoded = [texts[i].encode("ascii") for i in ascii_at]
    irregular: list[int] = []
    for i, raw, bad in zip(ascii_at, encoded, irregular_ascii(encoded), strict=True):
        if bad:
            irregular.append(i)
        else:
            canonical[i] = raw.replace(b"\n", b" ")
    collapsed = collapse_ascii_whitespace([texts[i].encode("ascii") for i in irregular])
    for i, view in zip(irregular, collapsed, strict=True):
        canonical[i] = view
    for i, text in enumerate(texts):
        if not text.isascii():
            canonical[i] = canonical_whitespace(text).encode("utf-8", "surrogatepass")
    return [hashlib.blake2b(c, digest_size=16).hexdigest() for c in canonical]


def canonical_whitespace(text: str) -> str:
    """NFC text with every whitespace run replaced by one space, no leading/trailing space."""
    if text.isascii():
        if not irregular_ascii([text.encode("ascii")])[0]:
            return text.replace("\n", " ")
        return bytes(collapse_ascii_whitespace([text.encode("ascii")])[0]).decode("ascii")
    return " ".join(unicodedata.normalize("NFC", text).split())
