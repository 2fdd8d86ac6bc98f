"""torch tensors (CPU here; a device where one is visible) go through the same operators."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from xputune.kernels import (  # noqa: E402
    KernelArgumentError,
    transfer_kv_all_layer,
    transfer_kv_per_layer_mla,
)
from xputune.kernels.cases import OPERATORS, directions_for, run_case  # noqa: E402
from xputune.kernels.selftest import torch_placements  # noqa: E402

PLACES = list(torch_placements())


@pytest.mark.parametrize("place", PLACES, ids=[p.name for p in PLACES])
@pytest.mark.parametrize("op", OPERATORS)
def test_operator_with_tensors_equals_reference(place, op: str) -> None:  # type: ignore[no-untyped-def]
    for direction in directions_for(op):
        for seed in range(4):
            result = run_case(op, direction, np.random.default_rng(seed), place)
            assert result.ok, result.detail


def test_tensor_dtypes_are_checked() -> None:
    src = torch.zeros(8, 1, 4, dtype=torch.bfloat16)
    dst = torch.zeros(8, 1, 4, dtype=torch.bfloat16)
    idx = torch.arange(4)
    transfer_kv_per_layer_mla(src + 1, dst, idx, idx, 8)
    assert (dst[:4] == 1).all() and not dst[4:].any()
    with pytest.raises(KernelArgumentError, match="int64"):
        transfer_kv_per_layer_mla(src, dst, idx.to(torch.int32), idx, 8)
    with pytest.raises(KernelArgumentError, match="contiguous"):
        transfer_kv_per_layer_mla(src.transpose(0, 2), dst, idx, idx, 8)
    with pytest.raises(KernelArgumentError, match="does not divide"):
        transfer_kv_per_layer_mla(src, dst, idx, idx, 6)
    table = torch.tensor([src.data_ptr()], dtype=torch.float64)
    with pytest.raises(KernelArgumentError, match="int64/uint64"):
        transfer_kv_all_layer(table, table, table, table, idx, idx, 8, 1)


def test_uint64_address_tables_as_sglang_builds_them() -> None:
    layers = [torch.arange(32, dtype=torch.float32).reshape(8, 1, 4) + i for i in range(3)]
    out = [torch.zeros(8, 1, 4) for _ in range(3)]
    src_tbl = torch.tensor([t.data_ptr() for t in layers], dtype=torch.uint64)
    dst_tbl = torch.tensor([t.data_ptr() for t in out], dtype=torch.uint64)
    idx = torch.tensor([5, 6, 7, 0])
    from xputune.kernels import transfer_kv_all_layer_mla

    transfer_kv_all_layer_mla(src_tbl, dst_tbl, idx, idx, 16, 3)
    for s, d in zip(layers, out, strict=True):
        assert torch.equal(d[idx], s[idx])
