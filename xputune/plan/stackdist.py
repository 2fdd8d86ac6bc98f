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
        i64, vp = ctypes.c_int64, ctypes.c_void_p
        lib.xpt_sd_new.restype = vp
        lib.xpt_sd_new.argtypes = [i64]
        lib.xpt_sd_free.restype = None
        lib.xpt_sd_free.argtypes = [vp]
        lib.xpt_sd_feed.restype = i64
        lib.xpt_sd_feed.argtypes = [vp, _U64P, _I64P, i64, _I64P, i64]
        lib.xpt_sd_info.restype = None
        lib.xpt_sd_info.argtypes = [vp, _I64P]
        lib.xpt_sd_hist.restype = None
        lib.xpt_sd_hist.argtypes = [vp, _I64P, i64]
        lib.xpt_parse_id_arrays.restype = i64
        lib.xpt_parse_id_arrays.argtypes = [ctypes.c_char_p, i64, i64, _U64P, i64, _I64P]
        lib.xpt_line_keys.restype = i64
        lib.xpt_line_keys.argtypes = [
            ctypes.c_char_p,
            i64,
            ctypes.c_char_p,
            i64,
            i64,
            _I64P,
            _U64P,
            ctypes.POINTER(ctypes.c_int8),
        ]
        lib.xpt_chain_ids.restype = None
        lib.xpt_chain_ids.argtypes = [_U64P, _I64P, i64, ctypes.POINTER(ctypes.c_int8)]
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


class StackStream:
    """The same pass fed batch by batch (xpt_sd_*): memory grows with distinct blocks only.

    Every block weighs `weight` (1 = exact; w for a sample of whole prefix trees at rate 1/w).
    result() gives the hit tokens per stack position (times the weight), the distinct blocks,
    the chain violations (exact only) and the accesses fed.
    """

    def __init__(self, weight: int = 1) -> None:
        self._lib = _kernel()
        self._state = self._lib.xpt_sd_new(int(weight))
        if not self._state:
            raise XputuneError("not enough memory for a stack pass")

    def feed(self, ids: np.ndarray, counts: np.ndarray, last_tokens: np.ndarray, block: int):
        import numpy as np

        ids = np.ascontiguousarray(ids, dtype=np.uint64)
        counts = np.ascontiguousarray(counts, dtype=np.int64)
        last = np.ascontiguousarray(last_tokens, dtype=np.int64)
        if int(counts.sum()) != len(ids) or len(last) != len(counts):
            raise ValueError("counts and last tokens must describe the ids")
        rc = self._lib.xpt_sd_feed(
            self._state,
            ids.ctypes.data_as(_U64P),
            counts.ctypes.data_as(_I64P),
            len(counts),
            last.ctypes.data_as(_I64P),
            int(block),
        )
        if rc < 0:
            raise XputuneError("not enough memory for the stack pass over this trace")

    def result(self) -> tuple[np.ndarray, int, int, int]:
        """(hit tokens per position 0..largest, distinct blocks, violations, accesses)."""
        import numpy as np

        info = np.zeros(4, dtype=np.int64)
        self._lib.xpt_sd_info(self._state, info.ctypes.data_as(_I64P))
        hist = np.zeros(int(info[1]) + 1, dtype=np.int64)
        self._lib.xpt_sd_hist(self._state, hist.ctypes.data_as(_I64P), len(hist))
        return hist, int(info[0]), int(info[2]), int(info[3])

    def close(self) -> None:
        if self._state:
            self._lib.xpt_sd_free(self._state)
            self._state = None

    def __del__(self) -> None:
        self.close()


def parse_id_arrays(raw: bytes, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """n JSON arrays of integers back to back -> (uint64 ids, counts); None unless all of them
    are plain lists of integers in 0..2**64-1 (the caller then reads those lines one by one)."""
    import numpy as np

    cap = raw.count(b",") + n + 1  # at most one id more than commas per array
    ids = np.empty(cap, dtype=np.uint64)
    counts = np.empty(n, dtype=np.int64)
    total = _kernel().xpt_parse_id_arrays(
        raw, len(raw), n, ids.ctypes.data_as(_U64P), cap, counts.ctypes.data_as(_I64P)
    )
    if total < 0:
        return None
    return ids[:total], counts


def line_keys(buf: bytes, field: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per line of buf: (starts with one past the end, first id of `field`, status 0 blank,
    1 key read, 2 cannot tell without decoding)."""
    import numpy as np

    most = buf.count(b"\n") + 1
    starts = np.empty(most + 1, dtype=np.int64)
    keys = np.empty(most, dtype=np.uint64)
    status = np.empty(most, dtype=np.int8)
    n = _kernel().xpt_line_keys(
        buf,
        len(buf),
        field,
        len(field),
        most,
        starts.ctypes.data_as(_I64P),
        keys.ctypes.data_as(_U64P),
        status.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
    )
    return starts[: n + 1], keys[:n], status[:n]


def chain_ids(ids: np.ndarray, counts: np.ndarray, chained: np.ndarray) -> None:
    """traces.chain over each request whose chained flag is 0, in place."""
    import numpy as np

    assert ids.dtype == np.uint64 and ids.flags.c_contiguous
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    flags = np.ascontiguousarray(chained, dtype=np.int8)
    _kernel().xpt_chain_ids(
        ids.ctypes.data_as(_U64P),
        counts.ctypes.data_as(_I64P),
        len(counts),
        flags.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
    )
