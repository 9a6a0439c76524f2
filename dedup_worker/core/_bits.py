"""Machine operations numba does not expose, for the text kernels.

* ``load_u64``: 8 bytes at any byte offset as one unaligned load (x86 and ARMv8 do these at
  full speed) instead of two aligned loads and a funnel shift.
* ``trailing_zeros`` and ``popcount``: one instruction each, to walk the set bits of a mask.

Each is a numba intrinsic: callable from ``@njit`` code only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic


def _load_u64(typingctx: Any, buf: Any, offset: Any) -> Any:
    if not (isinstance(buf, types.Array) and buf.dtype == types.uint8):
        return None
    if not isinstance(offset, types.Integer):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        array = context.make_array(sig.args[0])(context, builder, args[0])
        offset64 = context.cast(builder, args[1], sig.args[1], types.intp)
        address = builder.gep(array.data, [offset64])
        pointer = builder.bitcast(address, ir.IntType(64).as_pointer())
        return builder.load(pointer, align=1)

    return types.uint64(buf, offset), codegen


def _trailing_zeros(typingctx: Any, value: Any) -> Any:
    if value != types.uint64:
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return types.uint64(value), codegen


def _popcount(typingctx: Any, value: Any) -> Any:
    if value != types.uint64:
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.ctpop(args[0])

    return types.uint64(value), codegen


#: The 8 bytes at byte ``offset`` of a uint8 array, as a little-endian uint64. No bounds
#: check: the caller guarantees ``offset + 8 <= buf.size``.
load_u64 = cast(Callable[[np.ndarray, int], np.uint64], intrinsic(_load_u64))
#: The number of trailing zero bits of a uint64 (64 for zero).
trailing_zeros = cast(Callable[[np.uint64], np.uint64], intrinsic(_trailing_zeros))
#: The number of set bits of a uint64.
popcount = cast(Callable[[np.uint64], np.uint64], intrinsic(_popcount))
