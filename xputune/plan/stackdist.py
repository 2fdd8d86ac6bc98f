"""The one-pass stack-distance kernel (kernels/stackdist.c), called through ctypes.

A pure-Python Fenwick pass over 10 million block accesses takes minutes; the C pass takes a
second or two, which is what makes an exact curve of a production trace practical. The library
comes built with the wheel (xputune/kernels/native.py's table); a checkout builds it on first
use into the per-user cache (xputune.kernels.build.load_native).
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
        from xputune.kernels.build import load_native

        lib = load_native("stackdist")
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
        i64, vp, u64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_uint64
        lib.xpt_sd_new.restype = vp
        lib.xpt_sd_new.argtypes = []
        lib.xpt_sd_new_sampled.restype = vp
        lib.xpt_sd_new_sampled.argtypes = [i64, u64, u64, _U64P, i64]
        lib.xpt_sd_free.restype = None
        lib.xpt_sd_free.argtypes = [vp]
        lib.xpt_sd_drop_index.restype = None
        lib.xpt_sd_drop_index.argtypes = [vp]
        lib.xpt_sd_feed.restype = i64
        lib.xpt_sd_feed.argtypes = [vp, _U64P, _I64P, i64, _I64P, i64]
        lib.xpt_sd_info.restype = None
        lib.xpt_sd_info.argtypes = [vp, _I64P]
        lib.xpt_sd_cumulative.restype = None
        lib.xpt_sd_cumulative.argtypes = [vp, ctypes.POINTER(ctypes.c_double), i64]
        lib.xpt_cnt_new.restype = vp
        lib.xpt_cnt_new.argtypes = []
        lib.xpt_cnt_free.restype = None
        lib.xpt_cnt_free.argtypes = [vp]
        lib.xpt_cnt_add.restype = i64
        lib.xpt_cnt_add.argtypes = [vp, _U64P, i64]
        lib.xpt_cnt_info.restype = None
        lib.xpt_cnt_info.argtypes = [vp, _I64P]
        lib.xpt_cnt_rank.restype = i64
        lib.xpt_cnt_rank.argtypes = [vp, i64]
        lib.xpt_cnt_at_least.restype = i64
        lib.xpt_cnt_at_least.argtypes = [vp, i64, _U64P, i64]
        lib.xpt_parse_id_arrays.restype = i64
        lib.xpt_parse_id_arrays.argtypes = [ctypes.c_char_p, i64, i64, _U64P, i64, _I64P]
        lib.xpt_scan_ids.restype = i64
        lib.xpt_scan_ids.argtypes = [ctypes.c_char_p, i64, ctypes.c_char_p, i64, _U64P, i64]
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


def sample_salt(seed: int) -> int:
    """What hitrate._spatial_hash adds to an id before mixing it, for this seed."""
    return (0x9E3779B97F4A7C15 * (seed + 1)) % 2**64


class StackStream:
    """The same pass fed batch by batch (xpt_sd_*): memory grows with distinct blocks only.

    Exact (scale 1): every block weighs 1. Sampled (scale > 1): the pass of
    hitrate.sampled_curve: the `hot` ids weigh 1, every other block whose spatial hash
    (hitrate._spatial_hash with `seed`) falls under 2**64 // scale weighs `scale`, and the rest
    are left out; memory then grows with the hot and the sampled blocks only.
    result() gives the curve (cumulative hit tokens per capacity in blocks), the blocks
    mapped, the chain violations (exact only), the accesses fed, those kept, and their ids
    summed modulo 2**64.
    """

    _state = None  # until __init__ has one: close() (and __del__) after a failed build

    def __init__(self, scale: int = 1, hot: np.ndarray | None = None, seed: int = 0) -> None:
        import numpy as np

        self._lib = _kernel()
        if scale > 1:
            keys = np.ascontiguousarray(
                np.zeros(0, np.uint64) if hot is None else hot, dtype=np.uint64
            )
            self._state = self._lib.xpt_sd_new_sampled(
                int(scale),
                sample_salt(seed),
                2**64 // int(scale),
                keys.ctypes.data_as(_U64P),
                len(keys),
            )
        else:
            self._state = self._lib.xpt_sd_new()
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

    def result(self) -> tuple[np.ndarray, int, int, int, int, int]:
        """(cumulative hit tokens per capacity in blocks, float64 from 0; blocks mapped,
        violations, accesses, accesses kept, ids summed). Ends the pass: the index is freed
        before the curve is made, so the two are not held together."""
        import numpy as np

        info = np.zeros(6, dtype=np.int64)
        self._lib.xpt_sd_info(self._state, info.ctypes.data_as(_I64P))
        self._lib.xpt_sd_drop_index(self._state)
        curve = np.empty(int(info[1]) + 1, dtype=np.float64)
        self._lib.xpt_sd_cumulative(
            self._state, curve.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), len(curve)
        )
        self.close()
        idsum = int(info[5]) % 2**64
        return curve, int(info[0]), int(info[2]), int(info[3]), int(info[4]), idsum

    def close(self) -> None:
        if self._state:
            self._lib.xpt_sd_free(self._state)
            self._state = None

    def __del__(self) -> None:
        self.close()


class IdCounter:
    """Accesses per distinct 64-bit id (xpt_cnt_*: 12 bytes a slot, grown by 1.5x): the
    counting pass of the streamed sampled curve."""

    _state = None  # until __init__ has one: close() (and __del__) after a failed build

    def __init__(self) -> None:
        self._lib = _kernel()
        self._state = self._lib.xpt_cnt_new()
        if not self._state:
            raise XputuneError("not enough memory to count block ids")

    def add(self, ids: np.ndarray) -> None:
        import numpy as np

        ids = np.ascontiguousarray(ids, dtype=np.uint64)
        if self._lib.xpt_cnt_add(self._state, ids.ctypes.data_as(_U64P), len(ids)) < 0:
            raise XputuneError("not enough memory to count the block ids of this trace")

    def info(self) -> tuple[int, int, int]:
        """(distinct ids, accesses, ids summed modulo 2**64)."""
        import numpy as np

        info = np.zeros(3, dtype=np.int64)
        self._lib.xpt_cnt_info(self._state, info.ctypes.data_as(_I64P))
        return int(info[0]), int(info[1]), int(info[2]) % 2**64

    def rank(self, rank: int) -> int:
        """The rank-th largest count (1: the largest), counting repeats."""
        value = self._lib.xpt_cnt_rank(self._state, int(rank))
        if value < 0:
            raise XputuneError("not enough memory to rank the block counts")
        return int(value)

    def at_least(self, least: int):
        """The ids counted at least `least` (>= 1) times, in no particular order."""
        import numpy as np

        n = self._lib.xpt_cnt_at_least(self._state, int(least), None, 0)
        out = np.empty(n, dtype=np.uint64)
        self._lib.xpt_cnt_at_least(self._state, int(least), out.ctypes.data_as(_U64P), n)
        return out

    def close(self) -> None:
        if self._state:
            self._lib.xpt_cnt_free(self._state)
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


def scan_ids(buf: bytes, field: bytes) -> np.ndarray | None:
    """The ids of the `field` array of every line, without decoding the lines; None unless
    every non-blank line is plain enough (xpt_scan_ids), so that the decoder reads the same."""
    import numpy as np

    cap = len(buf) // 2 + 1  # an id takes a digit and a ',' or ']' at least
    ids = np.empty(cap, dtype=np.uint64)
    n = _kernel().xpt_scan_ids(buf, len(buf), field, len(field), ids.ctypes.data_as(_U64P), cap)
    return None if n < 0 else ids[:n]


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
