"""numba kernel behind ``text.canonical_whitespace`` for ASCII text (pure; no I/O)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

#: The ASCII characters ``str.split()`` splits on: \t \n \v \f \r, \x1c-\x1f and space.
_WHITESPACE = np.zeros(128, dtype=np.bool_)
_WHITESPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True


@njit(cache=True, nogil=True)
def _collapse(data: npt.NDArray[np.uint8], space: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint8]:
    out = np.empty(data.size, dtype=np.uint8)
    n = 0
    pending = False  # a whitespace run seen since the last word byte
    for byte in data:
        if space[byte]:
            pending = n > 0
        else:
            if pending:
                out[n] = 32
                n += 1
                pending = False
            out[n] = byte
            n += 1
    return out[:n]


def collapse_ascii_whitespace(data: bytes) -> bytes:
    """``" ".join(data.decode().split()).encode()`` for ASCII ``data``, in one pass."""
    return _collapse(np.frombuffer(data, dtype=np.uint8), _WHITESPACE).tobytes()
