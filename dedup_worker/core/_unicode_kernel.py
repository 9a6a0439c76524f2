"""numba kernel behind ``text.prepare`` for non-ASCII text (pure; no I/O).

Most pages of the web are not pure ASCII: a copyright sign, a no-break space or typographic
quotes are enough. They are NFKC-normalised and case-folded, then their non-word characters
become spaces. The simhash kernel already treats every ASCII byte that is not a letter or a
digit as a separator (Python's ``re`` would scan ~11 ns a character for them), so only the
non-ASCII characters that are not word characters need blanking, and characters of scripts written
without spaces need a space on each side: ``separate_words`` walks the UTF-8 bytes once
(~1 ns a byte) instead of two regular expressions (~180 us for a 4.5 KB page, and ~0.5 ms for
a page of Chinese or Japanese, where every character is a match).

Most non-ASCII pages carry few distinct characters outside ASCII (no-break spaces, dashes,
quotes, accented letters), and nearly all of them fold alike wherever they stand: a plain
punctuation character (``plain_punctuation``: no word character in its NFKC image, nothing
it composes with) becomes a space, another its NFKC image case-folded (``character_fold``).
``fold_known`` applies a per-process table of what each such character becomes in one pass
over the page's bytes, so those pages skip ``unicodedata.normalize`` and ``str.casefold``
(~50 us a page) and one ``bytes.replace`` per distinct character (on the corpus's non-ASCII
pages ~25 us a page before, ~15 us with the table, ~13 us since it skips ASCII eight bytes at
a time: encoding included).
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache, lru_cache

import numpy as np
import numpy.typing as npt
from numba import njit

from dedup_worker.core._bits import load_u64, trailing_zeros

_CODEPOINTS = 0x110000
#: The high bit of each byte of a word: a byte with it set starts or continues a non-ASCII
#: character.
_HIGH_BITS = np.uint64(0x8080808080808080)


@cache
def word_table() -> npt.NDArray[np.uint8]:
    """Code point -> 1 if ``re``'s ``[^\\W_]`` matches it (a word character), else 0.

    Built from the running interpreter's own regular expressions (~60 ms, once per process),
    so it agrees with them for every Unicode version.
    """
    everything = np.arange(_CODEPOINTS, dtype=np.uint32).tobytes()
    chars = everything.decode("utf-32-le", "surrogatepass")
    table = np.zeros(_CODEPOINTS, dtype=np.uint8)
    for run in re.finditer(r"[^\W_]+", chars):
        table[run.start() : run.end()] = 1
    return table


#: Per-character answers kept per process: the characters real pages use are a few thousand, and
#: a bound keeps a page of every code point from growing the caches without end.
_PER_CHARACTER = 1 << 16


@lru_cache(maxsize=_PER_CHARACTER)
def plain_punctuation(codepoint: int) -> bool:
    """True if the character is blanked by ``prepare`` in any context, so a text whose only
    non-ASCII characters are such may skip NFKC and case folding: not a word character, not a
    mark (composition needs one: a mark that follows makes the text take the general path),
    and its NFKC image holds no word character (unlike the trade mark sign, "TM")."""
    char = chr(codepoint)
    if word_table()[codepoint] or unicodedata.category(char).startswith("M"):
        return False
    return not any(word_table()[ord(c)] for c in unicodedata.normalize("NFKC", char))


@cache
def _second_elements() -> frozenset[int]:
    """The code points that compose with the character before them (the second character of
    a canonical pair decomposition, and the Hangul vowels and trailing consonants): ~70 ms
    over every code point, once per process."""
    hangul = {*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)}
    pairs = (unicodedata.decomposition(chr(cp)).split() for cp in range(0x80, _CODEPOINTS))
    return frozenset(hangul | {int(p[1], 16) for p in pairs if len(p) == 2 and p[0][0] != "<"})


@lru_cache(maxsize=_PER_CHARACTER)
def character_fold(codepoint: int) -> tuple[bytes, bytes] | None:
    """The UTF-8 of the character and of its NFKC image case-folded, when NFKC of a text does
    that to the character wherever it stands: it is a starter that composes with nothing
    before it, and so is the start of its image. ``None`` otherwise (a text holding it is
    normalised whole)."""
    char = chr(codepoint)
    image = unicodedata.normalize("NFKC", char)
    for c in (char, image[:1]):
        if c and (unicodedata.combining(c) or ord(c) in _second_elements()):
            return None
    return char.encode("utf-8"), image.casefold().encode("utf-8")


#: ``fold_known``'s table: ``fold_at[cp]`` is 0 for a character not learnt yet, ``NEEDS_NFKC``
#: for one that only NFKC of the whole text folds right, else 1 + the offset in ``images`` of
#: what the character becomes (a length byte, then those bytes).
NEEDS_NFKC = -1


@njit(cache=True, nogil=True)
def fold_known(
    data: npt.NDArray[np.uint8],
    fold_at: npt.NDArray[np.int32],
    images: npt.NDArray[np.uint8],
    expansion: int,
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], bool]:
    """The valid UTF-8 ``data`` with every non-ASCII character replaced by what the table says
    it becomes (``expansion``: no character's bytes grow by more than that factor), in one pass.
    Returns (the bytes, the code points not learnt yet, whether one needs NFKC of the whole
    text); the bytes are only complete when neither. ASCII bytes are copied."""
    n = data.size
    out = np.empty(n * expansion, dtype=np.uint8)
    unknown = np.empty(n // 2 + 1, dtype=np.int64)
    missing = 0
    at = 0
    i = 0
    while i < n:
        end = _ascii_run_end(data, i, n)
        if end > i:  # a run of ASCII: copied in one slice (what most of a page is)
            out[at : at + end - i] = data[i:end]
            at += end - i
            i = end
            if i == n:
                break
        cp, width = _decode(data, i, int(data[i]))
        i += width
        where = int(fold_at[cp])
        if where == NEEDS_NFKC:
            return out[:0], unknown[:0], True
        if where == 0 or where > images.size:  # beyond ``images``: learnt after this call began
            unknown[missing] = cp
            missing += 1
            continue
        length = int(images[where - 1])
        for k in range(length):
            out[at + k] = images[where + k]
        at += length
    return out[:at], unknown[:missing], False


@njit(cache=True, inline="always")
def _ascii_run_end(data: npt.NDArray[np.uint8], i: int, n: int) -> int:
    """Where the run of ASCII bytes starting at ``data[i]`` ends: eight bytes at a time (one
    load and a mask; ~0.2 ns a byte against ~1.5 for a byte at a time), the tail bytewise."""
    end = i
    while end + 8 <= n:
        high = load_u64(data, end) & _HIGH_BITS
        if high != 0:
            return end + int(trailing_zeros(high) >> np.uint64(3))
        end += 8
    while end < n and data[end] < 0x80:
        end += 1
    return end


@njit(cache=True, inline="always")
def _decode(data: npt.NDArray[np.uint8], i: int, lead: int) -> tuple[int, int]:
    """The code point starting at data[i] (its lead byte ``lead`` >= 0x80) and its width."""
    if lead >= 0xF0:
        width = 4
        cp = lead & 0x07
    elif lead >= 0xE0:
        width = 3
        cp = lead & 0x0F
    else:
        width = 2
        cp = lead & 0x1F
    for k in range(1, width):
        cp = (cp << 6) | (int(data[i + k]) & 0x3F)
    return cp, width


@njit(cache=True, inline="always")
def _unspaced(cp: int) -> bool:
    """The scripts written without spaces (``text._UNSPACED``'s ranges)."""
    return (
        0x3040 <= cp <= 0x30FF
        or 0x3400 <= cp <= 0x4DBF
        or 0x4E00 <= cp <= 0x9FFF
        or 0xAC00 <= cp <= 0xD7AF
        or 0xF900 <= cp <= 0xFAFF
    )


@njit(cache=True, nogil=True)
def separate_words(
    data: npt.NDArray[np.uint8], words: npt.NDArray[np.uint8]
) -> npt.NDArray[np.uint8]:
    """The valid UTF-8 ``data`` (NFKC, case-folded) with every non-ASCII character that is not
    a word character made spaces, and a space on each side of every character of a script
    written without spaces (one token per character), as ``text._NON_WORD`` and
    ``text._UNSPACED`` would make it. ASCII bytes are copied: the kernel splits on ASCII
    punctuation itself."""
    out = np.empty(data.size * 2, dtype=np.uint8)  # an unspaced character: 3 bytes -> 5
    at = 0
    i = 0
    n = data.size
    while i < n:
        lead = int(data[i])
        if lead < 0x80:
            out[at] = lead
            at += 1
            i += 1
            continue
        cp, width = _decode(data, i, lead)
        if words[cp] == 0:
            for k in range(width):
                out[at + k] = 32
            at += width
        elif _unspaced(cp):
            out[at] = 32
            for k in range(width):
                out[at + 1 + k] = data[i + k]
            out[at + 1 + width] = 32
            at += width + 2
        else:
            for k in range(width):
                out[at + k] = data[i + k]
            at += width
        i += width
    return out[:at]


@njit(cache=True, inline="always")
def _ascii_space(byte: int) -> bool:
    return byte == 32 or 9 <= byte <= 13


#: Spans of non-ASCII tokens closer than this (bytes) are folded as one: text in a script
#: other than Latin is then folded in a few pieces, not one call per word.
MERGE_GAP = 256


@njit(cache=True, nogil=True)
def non_ascii_tokens(data: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """The byte spans (start, end, start, end, ...) of the tokens of UTF-8 ``data`` between
    ASCII whitespace that hold a non-ASCII character, those less than ``MERGE_GAP`` apart
    merged. ASCII whitespace is a stable code point (it never composes with a neighbour), so
    NFKC and case folding of each span alone, the rest left as it is, give the words of the
    whole text folded (UAX #15, section 9)."""
    out = np.empty(2 * (data.size // 2 + 1), dtype=np.int64)
    count = 0
    i = 0
    n = data.size
    while i < n:
        if data[i] < 0x80:
            i += 1
            continue
        start = i
        while start > 0 and not _ascii_space(int(data[start - 1])):
            start -= 1
        end = i
        while end < n and not _ascii_space(int(data[end])):
            end += 1
        if count and start - out[count - 1] < MERGE_GAP:
            out[count - 1] = end
        else:
            out[count] = start
            out[count + 1] = end
            count += 2
        i = end
    return out[:count]
