"""The one-pass stack-distance kernel (kernels/stackdist.c), called through ctypes.

A pure-Python Fenwick pass over 10 million block accesses takes minutes; the C pass takes a
second or two, which is what makes an exact curve of a production trace practical. The library
is built on first use by xputune.kernels.build and cached per user.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from xputune.errors import XputuneError

if TYPE_CHECKING:
    import numpy as np

_I64P = ctypes.POINTER(ctypes.c_int64)
_I32P = ctypes.POINTER(ctypes.c_int32)
_U64P = ctypes.POINTER(ctypes.c_uint64)
_lib = None


def _kernel():
    global _lib
    if _lib is None:
        from xputune.kernels.build import load

        lib = load("stackdist", ["stackdist.c"])
        lib.xpt_stack_distances.restype = ctypes.c_int64
        lib.xpt_stack_distances.argtypes = [
            _I32P,
            ctypes.c_int64,
            _I64P,
            ctypes.c_int64,
            ctypes.c_int64,
            _I32P,
            _I64P,
        ]
        lib.xpt_dense_ids.restype = ctypes.c_int64
        lib.xpt_dense_ids.argtypes = [_U64P, ctypes.c_int64, _I32P]
        _lib = lib
    return _lib


def dense_ids(block_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Renumber 64-bit block ids 0, 1, 2... in first-seen order (a hash table, not a sort)."""
    import numpy as np

    ids = np.ascontiguousarray(block_ids, dtype=np.uint64)
    out = np.empty(len(ids), dtype=np.int32)
    if len(ids) == 0:
        return out, 0
    n = _kernel().xpt_dense_ids(ids.ctypes.data_as(_U64P), len(ids), out.ctypes.data_as(_I32P))
    if n < 0:
        raise XputuneError(f"not enough memory to index {len(ids)} block ids")
    return out, int(n)


def stack_distances(
    ids: np.ndarray, offsets: np.ndarray, n_ids: int, weights: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """Per access: the prefix-maxed LRU stack position before its request (0 = cold).

    `ids` are dense int32 block ids in 0..n_ids-1, root first within each request; request r
    owns ids[offsets[r]:offsets[r+1]]. `weights` (per dense id) make a position count each
    block as that many blocks, for sampled traces. Returns (positions, chain_violations).
    """
    import numpy as np

    ids = np.ascontiguousarray(ids, dtype=np.int32)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    out = np.empty(len(ids), dtype=np.int64)
    w = None if weights is None else np.ascontiguousarray(weights, dtype=np.int32)
    if w is not None and len(w) != n_ids:
        raise ValueError("one weight per distinct block is needed")
    n_req = len(offsets) - 1
    if len(ids) == 0:
        return out, 0
    violations = _kernel().xpt_stack_distances(
        ids.ctypes.data_as(_I32P),
        len(ids),
        offsets.ctypes.data_as(_I64P),
        n_req,
        int(n_ids),
        None if w is None else w.ctypes.data_as(_I32P),
        out.ctypes.data_as(_I64P),
    )
    if violations < 0:
        raise XputuneError(f"not enough memory for a stack pass over {n_ids} distinct blocks")
    return out, int(violations)
