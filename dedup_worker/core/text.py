"""Text normalisation shared by the fingerprint and the exact checksum (pure functions).

``prepare`` turns text into the byte stream the simhash kernel tokenises. ASCII text takes a
fast path (it is already NFKC-normal; the kernel lowercases it and treats every non-alphanumeric
byte as a separator). Other text is NFKC-normalised and case-folded (in one compiled pass with a
table of what each character becomes, ``_CharacterFolds``, where NFKC treats every character of
the text alike wherever it stands; else in Python), and every non-ASCII character that is not a
word character becomes spaces (``_unicode_kernel``), so the kernel can treat all bytes >= 0x80
as word bytes; text in a script written without spaces also gets a space around each such
character (one token per character). All paths give the words of ``normalize``; property tests
pin that.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import unicodedata
from collections.abc import Sequence

import numpy as np

from dedup_worker.core._text_kernel import collapse_ascii_whitespace, irregular_ascii
from dedup_worker.core._unicode_kernel import (
    NEEDS_NFKC,
    character_fold,
    fold_known,
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
    folded = _FOLDS.fold(raw)
    if folded is not None:
        return folded
    if _non_ascii_count(raw) * 128 > len(raw):  # dense: fold it all at once
        whole = unicodedata.normalize("NFKC", text).casefold().encode("utf-8")
    else:
        whole = _fold_non_ascii_tokens(text, raw)
    # ASCII punctuation stays: the kernel splits on it as _NON_WORD would.
    return separate_words(np.frombuffer(whole, dtype=np.uint8), word_table()).tobytes()


def _non_ascii_count(raw: bytes) -> int:
    """How many non-ASCII characters the UTF-8 ``raw`` holds (the bytes that start one)."""
    return int(np.count_nonzero(np.frombuffer(raw, dtype=np.uint8) >= 0xC0))


class _CharacterFolds:
    """What each non-ASCII character becomes in ``prepare``'s output, learnt per process as
    pages bring the characters, so a page whose characters all fold alike wherever they stand
    takes one compiled pass (``fold_known``): a plain punctuation character (``plain_punctuation``)
    becomes a space, another its NFKC image case-folded (``character_fold``), with
    ``separate_words`` applied. One pass replaces them all at once: that every such image is
    also the character's image beside any other is pinned by a test over every code point.
    Characters that compose with their neighbours (``NEEDS_NFKC``), and every character after
    the first ``_LEARNT_AT_MOST`` (a page of every code point must not grow memory without end),
    send the page to the general path."""

    _LEARNT_AT_MOST = 1 << 16

    def __init__(self) -> None:
        self.fold_at = np.zeros(0x110000, dtype=np.int32)
        self.images = np.zeros(0, dtype=np.uint8)
        self.expansion = 1
        self.learnt = 0
        self._lock = threading.Lock()

    def fold(self, raw: bytes) -> bytes | None:
        """``raw`` (UTF-8, not all ASCII) as ``prepare`` makes it, or ``None`` when a character
        needs NFKC of the whole text."""
        data = np.frombuffer(raw, dtype=np.uint8)
        for _ in range(3):  # another thread's learning may need one more pass
            out, unknown, needs_nfkc = fold_known(data, self.fold_at, self.images, self.expansion)
            if needs_nfkc:
                return None
            if not unknown.size:
                return out.tobytes()
            self._learn(set(unknown.tolist()))
        return None

    def _learn(self, codepoints: set[int]) -> None:
        with self._lock:
            entries = bytearray(self.images.tobytes())
            placed: dict[int, int] = {}
            for codepoint in sorted(cp for cp in codepoints if not self.fold_at[cp]):
                image = self._becomes(codepoint)
                if image is None or self.learnt >= self._LEARNT_AT_MOST:
                    self.fold_at[codepoint] = NEEDS_NFKC
                    continue
                placed[codepoint] = len(entries) + 1
                entries += bytes([len(image)]) + image
                width = len(chr(codepoint).encode("utf-8"))
                self.expansion = max(self.expansion, -(-len(image) // width))
                self.learnt += 1
            # The new images first, then the entries that point into them: a pass that began
            # before sees the entries beyond its images as not learnt yet.
            self.images = np.frombuffer(bytes(entries), dtype=np.uint8)
            for codepoint, where in placed.items():
                self.fold_at[codepoint] = where

    @staticmethod
    def _becomes(codepoint: int) -> bytes | None:
        if plain_punctuation(codepoint):
            return b" "
        fold = character_fold(codepoint)
        if fold is None:
            return None
        image = np.frombuffer(fold[1], dtype=np.uint8)
        return bytes(separate_words(image, word_table()))


_FOLDS = _CharacterFolds()


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
