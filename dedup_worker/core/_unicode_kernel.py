"""numba kernel behind ``text.prepare`` for non-ASCII text (pure; no I/O).

Most pages of the web are not pure ASCII: a copyright sign, a no-break space or typographic
quotes are enough. For those, ``prepare`` used to replace every run of non-word characters with
a space by regular expression, ~180 us for a 4.5 KB page (Python's ``re`` scans ~11 ns a
character), more than the whole fingerprint and sketch of that page. The simhash kernel already
treats every ASCII byte that is not a letter or a digit as a separator, so only the non-ASCII
characters that are not word characters need blanking: this kernel walks the UTF-8 bytes once
and overwrites those characters' bytes with spaces, in place (~1 ns a byte).
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np
import numpy.typing as npt
from numba import njit

_CODEPOINTS = 0x110000


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
def blank_non_word(data: npt.NDArray[np.uint8], words: npt.NDArray[np.uint8]) -> bool:
    """Overwrite with spaces the bytes of every non-ASCII character of the valid UTF-8
    ``data`` that is not a word character. Stops and returns True at the first character of
    a script written without spaces (the caller takes the general path), else False."""
    i = 0
    n = data.size
    while i < n:
        lead = int(data[i])
        if lead < 0x80:
            i += 1
            continue
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
        if _unspaced(cp):
            return True
        if words[cp] == 0:
            for k in range(width):
                data[i + k] = 32
        i += width
    return False
