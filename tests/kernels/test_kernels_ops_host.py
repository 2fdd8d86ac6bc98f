"""Every operator on the host backend equals the numpy reference; bad arguments are refused."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xputune.kernels import (
    KernelArgumentError,
    transfer_kv_all_layer,
    transfer_kv_all_layer_direct_lf_pf,
    transfer_kv_all_layer_mla,
    transfer_kv_per_layer,
    transfer_kv_per_layer_direct_pf_lf,
    transfer_kv_per_layer_mla,
)
from xputune.kernels.cases import OPERATORS, Placement, directions_for, run_case

CASES = [(op, d) for op in OPERATORS for d in directions_for(op)]


@pytest.mark.parametrize(("op", "direction"), CASES)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_operator_equals_reference(op: str, direction: str, seed: int) -> None:
    result = run_case(op, direction, np.random.default_rng(seed), Placement(name="host"))
    assert result.ok, result.detail


def test_large_layer_uses_threads_and_stays_exact() -> None:
    """Above the threading threshold the byte split must still cover every segment once."""
    n, item = 9000, 1152  # ~10 MB in 1 MiB chunks shared by three workers
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, (n, item), dtype=np.uint8)
    dst = np.zeros_like(src)
    si = np.concatenate([np.arange(0, 4000), rng.permutation(np.arange(4000, n))]).astype(np.int64)
    di = np.arange(n, dtype=np.int64)
    from xputune.kernels.backends.host import HostBackend

    transfer_kv_per_layer_mla(src, dst, si, di, item, backend=HostBackend(threads=3))
    assert np.array_equal(dst, src[si])


def _layer(slots: int = 8, dim: int = 4, dtype: type = np.float32) -> np.ndarray:
    return np.zeros((slots, 1, dim), dtype=dtype)


IDX = np.arange(4, dtype=np.int64)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"src_indices": np.arange(3, dtype=np.int64)}, "differ in length"),
        ({"dst_indices": np.array([0, 1, 2, 8])}, "out of range"),
        ({"src_indices": np.array([0, -1, 2, 3])}, "negative"),
        ({"src_indices": np.arange(4, dtype=np.int32)}, "int64"),
        ({"dst_indices": np.arange(4, dtype=np.float64)}, "int64"),
        ({"item_size": 12}, "does not divide a row"),
        ({"item_size": 6}, "whole number of 4-byte elements"),
        ({"item_size": 0}, "positive"),
        ({"src": [1, 2, 3]}, "numpy array or torch tensor"),
        ({"src": np.zeros((8, 1, 8), np.float32)[:, :, ::2]}, "contiguous"),
    ],
)
def test_per_layer_rejects(kwargs: dict, message: str) -> None:
    args = {"src": _layer(), "dst": _layer(), "src_indices": IDX, "dst_indices": IDX,
            "item_size": 16, **kwargs}  # fmt: skip
    with pytest.raises(KernelArgumentError, match=message):
        transfer_kv_per_layer_mla(**args)


def test_read_only_destination_is_refused() -> None:
    dst = _layer()
    dst.setflags(write=False)
    with pytest.raises(KernelArgumentError, match="read-only"):
        transfer_kv_per_layer_mla(_layer(), dst, IDX, IDX, 16)


def test_mha_k_and_v_are_both_copied_and_checked() -> None:
    src_k, src_v = _layer() + 1, _layer() + 2
    dst_k, dst_v = _layer(), _layer()
    transfer_kv_per_layer(src_k, dst_k, src_v, dst_v, IDX, IDX[::-1].copy(), 16)
    assert (dst_k[:4] == 1).all() and (dst_v[:4] == 2).all() and not dst_k[4:].any()
    with pytest.raises(KernelArgumentError, match="does not divide"):
        transfer_kv_per_layer(src_k, dst_k, _layer(dim=3), dst_v, IDX, IDX, 16)


def test_all_layer_tables_are_checked() -> None:
    layers = [_layer() for _ in range(2)]
    table = np.array([a.ctypes.data for a in layers], dtype=np.int64)
    with pytest.raises(KernelArgumentError, match="num_layers=3"):
        transfer_kv_all_layer_mla(table, table, IDX, IDX, 16, 3)
    with pytest.raises(KernelArgumentError, match="int64/uint64"):
        transfer_kv_all_layer_mla(table.astype(np.float64), table, IDX, IDX, 16, 2)
    with pytest.raises(KernelArgumentError, match="null"):
        transfer_kv_all_layer_mla(np.zeros(2, np.int64), table, IDX, IDX, 16, 2)
    with pytest.raises(KernelArgumentError, match="out of range"):
        transfer_kv_all_layer_mla(table, table, IDX, IDX + 6, 16, 2, dst_slots=8)
    with pytest.raises(KernelArgumentError, match="has 1 layers"):
        transfer_kv_all_layer_mla(layers[:1], layers, IDX, IDX, 16, 2)
    with pytest.raises(KernelArgumentError, match="num_layers must be"):
        transfer_kv_all_layer(layers, layers, layers, layers, IDX, IDX, 16, 0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        transfer_kv_all_layer_mla(layers, layers, IDX, IDX, 16, 2, colour="red")


def _pool(pages: int = 4, layers: int = 3, page: int = 4, dim: int = 4) -> np.ndarray:
    return np.zeros((pages, layers, page, 1, dim), dtype=np.float32)


@pytest.mark.parametrize(
    ("si", "di", "message"),
    [
        (np.arange(6), np.arange(6), "whole number of 4-token pages"),
        (np.array([0, 1, 3, 2]), np.arange(4), "not consecutive"),
        (np.arange(2, 6), np.arange(4), "multiples of page_size"),
        (np.arange(4), np.arange(4) + 6, "out of range"),
    ],
)
def test_direct_page_copies_reject_broken_pages(si, di, message) -> None:  # type: ignore[no-untyped-def]
    si, di = si.astype(np.int64), di.astype(np.int64)
    with pytest.raises(KernelArgumentError, match=message):
        transfer_kv_per_layer_direct_pf_lf([_pool()], [_layer()], si, di, 0, 4)


def test_direct_page_copies_check_shapes_and_layers() -> None:
    idx = np.arange(4, dtype=np.int64)
    with pytest.raises(KernelArgumentError, match="page_size=8"):
        transfer_kv_per_layer_direct_pf_lf([_pool()], [_layer()], idx, idx, 0, 8)
    with pytest.raises(KernelArgumentError, match="out of range for 3 layers"):
        transfer_kv_per_layer_direct_pf_lf([_pool()], [_layer()], idx, idx, 3, 4)
    with pytest.raises(KernelArgumentError, match="do not fit"):
        transfer_kv_all_layer_direct_lf_pf([_layer()] * 4, [_pool()], idx, idx, 4)
    with pytest.raises(KernelArgumentError, match="1 \\(MLA\\) or 2"):
        transfer_kv_all_layer_direct_lf_pf([_layer()], [_pool()] * 3, idx, idx, 4)
    with pytest.raises(KernelArgumentError, match="K and V"):
        transfer_kv_all_layer_direct_lf_pf([_layer()] * 2, [_pool(), _pool(dim=2)], idx, idx, 4)
    with pytest.raises(KernelArgumentError, match="page_size must be"):
        transfer_kv_all_layer_direct_lf_pf([_layer()], [_pool()], idx, idx, 0)


def test_host_backend_refuses_device_directions() -> None:
    with pytest.raises(KernelArgumentError, match="cannot reach device memory"):
        transfer_kv_per_layer_mla(_layer(), _layer(), IDX, IDX, 16, backend="host",
                                  direction="h2d")  # fmt: skip


def test_package_import_is_light() -> None:
    code = (
        "import sys, xputune.kernels as k; from xputune.kernels import transfer_kv_per_layer_mla;"
        "print('numpy' in sys.modules, 'torch' in sys.modules, 'ctypes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]


def test_numpy_use_never_imports_torch() -> None:
    code = (
        "import sys, numpy as np; from xputune.kernels import transfer_kv_per_layer_mla as t;"
        "a = np.ones((4, 8), np.uint8); b = np.zeros_like(a); i = np.arange(4);"
        "t(a, b, i, i, 8); print(bool(b.all()), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), layers=st.integers(1, 4))
def test_host_fast_path_cuts_the_planners_segments(seed: int, layers: int) -> None:
    """The C fast path for per-layer buffers must submit exactly the planner's segments."""
    from xputune.kernels.backends import get
    from xputune.kernels.cases import random_indices
    from xputune.kernels.planner import Endpoint, plan

    rng = np.random.default_rng(seed)
    slots, item = 64, 8
    n = int(rng.integers(1, slots + 1))
    si, di = random_indices(rng, slots, n), random_indices(rng, slots, n)
    src = [rng.integers(0, 256, (slots, item), dtype=np.uint8) for _ in range(layers)]
    dst = [np.zeros((slots, item), np.uint8) for _ in range(layers)]
    bases = [np.array([a.ctypes.data for a in arrs], np.uint64) for arrs in (src, dst)]
    count = get("host").copy_items(*bases, si, di, item_size=item, src_slots=slots, dst_slots=slots)
    ep = Endpoint("layers", slots=slots)
    assert count == plan(si, di, src=ep, dst=ep, item_size=item, num_layers=layers).count
    assert all(np.array_equal(d[di], s[si]) for s, d in zip(src, dst, strict=True))


def _pf_pool(slots: int = 8, layers: int = 3, dim: int = 4) -> np.ndarray:
    """A page_first pool as SGLang shapes it for MLA: (slots, layers, 1, dim)."""
    return np.zeros((slots, layers, 1, dim), dtype=np.float32)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"src_layout_dim": 40}, "not a whole number of item_size=16 layers"),
        ({"src_layout_dim": 32}, "not a page_first buffer of src_layout_dim=32-byte slots"),
        ({"src_layout_dim": 0}, "src_layout_dim must be a positive int"),
        ({"src": np.zeros((3, 8, 1, 4), np.float32)}, "not a page_first buffer"),  # layer_first
        ({"src": _pool(pages=2, layers=3, page=4)}, "not a page_first buffer"),  # pf_direct
        ({"layer_id": 3}, "layer_id 3 out of range for a page_first buffer of 3 layers"),
        ({"layer_id": -1}, "layer_id -1 out of range"),
        ({"item_size": 12}, "does not divide a row"),
        ({"src_indices": np.array([0, 1, 2, 8])}, "src_indices holds slot 8, out of range"),
    ],
)
def test_page_first_load_rejects(kwargs: dict, message: str) -> None:
    from xputune.kernels import transfer_kv_per_layer_mla_pf_lf

    args = {"src": _pf_pool(), "dst": _layer(), "src_indices": IDX, "dst_indices": IDX,
            "layer_id": 1, "item_size": 16, "src_layout_dim": 48, **kwargs}  # fmt: skip
    with pytest.raises(KernelArgumentError, match=message):
        transfer_kv_per_layer_mla_pf_lf(**args)


def test_page_first_store_checks_layers_and_both_members() -> None:
    from xputune.kernels import transfer_kv_all_layer_lf_pf, transfer_kv_all_layer_mla_lf_pf

    layers = [_layer() + i for i in range(4)]
    pool = _pf_pool()
    with pytest.raises(KernelArgumentError, match=r"holds 3 layers; layers 0\.\.3 requested"):
        transfer_kv_all_layer_mla_lf_pf(layers, pool, IDX, IDX, 16, 48, 4)
    assert not pool.any()  # nothing half done
    with pytest.raises(KernelArgumentError, match="dst_v is not a page_first buffer"):
        transfer_kv_all_layer_lf_pf(layers[:3], pool, layers[:3], _pf_pool(dim=8), IDX, IDX, 16,
                                    48, 3)  # fmt: skip
    with pytest.raises(TypeError, match="unexpected keyword"):
        transfer_kv_all_layer_mla_lf_pf(layers[:3], pool, IDX, IDX, 16, 48, 3, dst_slots=8)
    read_only = _pf_pool()
    read_only.setflags(write=False)
    with pytest.raises(KernelArgumentError, match="read-only"):
        transfer_kv_all_layer_mla_lf_pf(layers[:3], read_only, IDX, IDX, 16, 48, 3)
    transfer_kv_all_layer_mla_lf_pf(layers[:3], pool, IDX, IDX[::-1].copy(), 16, 48, 3)
    assert [pool[3 - i, layer, 0, 0] for i in range(4) for layer in range(3)] == [
        float(layer) for _ in range(4) for layer in range(3)
    ]


def test_transfer_kv_direct_moves_each_pair_in_its_own_rows() -> None:
    """K and V rows of different sizes (an asymmetric MHA model) in one call."""
    from xputune.kernels import transfer_kv_direct

    rng = np.random.default_rng(5)
    src = [rng.random((8, 1, 4)).astype(np.float32) for _ in range(2)] + [
        rng.random((8, 2, 3)).astype(np.float32) for _ in range(2)
    ]
    dst = [np.zeros_like(a) for a in src]
    si, di = np.array([4, 5, 6, 7], np.int64), np.array([0, 1, 6, 7], np.int64)
    transfer_kv_direct(src, dst, si, di, 2)
    for s, d in zip(src, dst, strict=True):
        assert np.array_equal(d[di], s[si]) and not d[2:6].any()
    flat_src, flat_dst = np.arange(8, dtype=np.int64), np.zeros(8, np.int64)  # 1-D: one element
    transfer_kv_direct([flat_src], [flat_dst], si, di, 2)
    assert flat_dst.tolist() == [4, 5, 0, 0, 0, 0, 6, 7]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dst_layers": [_layer()]}, "differ in length \\(2 vs 1\\)"),
        ({"src_layers": []}, "non-empty list"),
        ({"src_indices": np.arange(3, dtype=np.int64)}, "differ in length"),
        ({"page_size": 3}, "4 indices are not a whole number of 3-token pages"),
        ({"page_size": 0}, "page_size must be a positive int"),
        ({"dst_layers": [_layer(), _layer(dim=2)]}, "dst_layers\\[1\\] rows 8"),
        ({"dst_indices": np.array([0, 1, 2, 8])}, "dst_indices holds slot 8, out of range"),
    ],
)
def test_transfer_kv_direct_rejects(kwargs: dict, message: str) -> None:
    from xputune.kernels import transfer_kv_direct

    args = {"src_layers": [_layer(), _layer()], "dst_layers": [_layer(), _layer()],
            "src_indices": IDX, "dst_indices": IDX, "page_size": 2, **kwargs}  # fmt: skip
    with pytest.raises(KernelArgumentError, match=message):
        transfer_kv_direct(**args)


def test_transfer_kv_direct_checks_every_pair_before_moving_any() -> None:
    """Pairs of two row sizes are two plans; a bad slot for the second moves nothing."""
    from xputune.kernels import transfer_kv_direct

    src = [_layer() + 1, np.ones((4, 1, 2), np.float32)]
    dst = [_layer(), np.zeros((4, 1, 2), np.float32)]
    with pytest.raises(KernelArgumentError, match="dst_indices holds slot 5, out of range for a "
                       "buffer of 4 slots"):  # fmt: skip
        transfer_kv_direct(src, dst, IDX, np.array([2, 3, 4, 5], np.int64), 2)
    assert not dst[0].any() and not dst[1].any()


class _CudaStandIn:
    """Records which mode the operators ask a CUDA backend for (no GPU needed)."""

    name = "cuda"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def copy(self, *args: object, **kwargs: object) -> int:
        self.calls.append("segment table")
        return 0

    def copy_items(self, *args: object, **kwargs: object) -> int:
        self.calls.append("item kernel")
        return 1


def test_page_first_operators_default_to_the_item_kernel_on_cuda() -> None:
    """page_first segments are one token of one layer each: SGLang runs those operators as an
    item kernel, and so do ours on CUDA; layer_first and direct ones submit segments."""
    from xputune.kernels import transfer_kv_direct, transfer_kv_per_layer_mla_pf_lf

    cuda = _CudaStandIn()
    transfer_kv_per_layer_mla_pf_lf(_pf_pool(), _layer(), IDX, IDX, 1, 16, 48, backend=cuda)
    transfer_kv_per_layer_mla(_layer(), _layer(), IDX, IDX, 16, backend=cuda)
    transfer_kv_direct([_layer()], [_layer()], IDX, IDX, 2, backend=cuda)
    transfer_kv_per_layer_mla_pf_lf(_pf_pool(), _layer(), IDX, IDX, 1, 16, 48, backend=cuda,
                                    mode="direct")  # fmt: skip
    assert cuda.calls == ["item kernel", "segment table", "segment table", "segment table"]


def test_kernel_mode_checks_like_the_planner_without_building_its_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The item kernel needs no segment table (a page_first backup's would be a segment per
    token per layer); the planner's checks still run before the kernel is asked for."""
    from xputune.kernels import ops, transfer_kv_all_layer_mla_lf_pf

    def no_table(*args: object, **kwargs: object) -> None:
        raise AssertionError("kernel mode planned a segment table")

    monkeypatch.setattr(ops, "plan", no_table)
    cuda = _CudaStandIn()
    layers = [_layer() for _ in range(3)]
    transfer_kv_all_layer_mla_lf_pf(layers, _pf_pool(), IDX, IDX, 16, 48, 3, backend=cuda)
    assert cuda.calls == ["item kernel"]
    with pytest.raises(KernelArgumentError, match="dst_indices holds slot 8, out of range"):
        transfer_kv_all_layer_mla_lf_pf(layers, _pf_pool(), IDX, IDX + 5, 16, 48, 3, backend=cuda)
    with pytest.raises(KernelArgumentError, match="holds 3 layers"):
        transfer_kv_all_layer_mla_lf_pf([*layers, _layer()], _pf_pool(), IDX, IDX, 16, 48, 4,
                                        backend=cuda)  # fmt: skip
    assert cuda.calls == ["item kernel"]
