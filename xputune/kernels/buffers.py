"""Duck-typed views of the buffers the copy operators accept: numpy arrays and torch tensors.

Why duck typing: torch is heavy and optional. A torch tensor is recognised by its methods
(data_ptr, element_size, is_contiguous), so torch is never imported here; whatever passed the
tensor has already imported it. Kunlunxin's torch poses as CUDA, so "on a device" means any
device type other than cpu.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING

from xputune.kernels.planner import KernelArgumentError

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Buffer:
    """Where a buffer lives and how big it is; `obj` keeps the memory alive while in use."""

    address: int
    nbytes: int
    element_size: int
    shape: tuple[int, ...]
    on_device: bool
    obj: object

    def row_bytes(self) -> int:
        """Bytes of one entry along the first axis (one token slot for SGLang's layer buffers)."""
        if len(self.shape) < 2:
            return self.nbytes
        return prod(self.shape[1:]) * self.element_size

    def slots(self, item_size: int, name: str) -> int:
        """Token slots of item_size bytes in this buffer; rejects an item that cuts a row."""
        check_item_size(self, item_size, name)
        return self.nbytes // item_size


def is_tensor(obj: object) -> bool:
    return hasattr(obj, "data_ptr") and hasattr(obj, "element_size") and hasattr(obj, "device")


def tensor_on_device(obj: object) -> bool:
    return is_tensor(obj) and getattr(obj.device, "type", "cpu") != "cpu"  # type: ignore[attr-defined]


def describe(obj: object, name: str, *, writable: bool = False) -> Buffer:
    """A Buffer for a contiguous numpy array or torch tensor, or a clear error."""
    import numpy as np

    if is_tensor(obj):
        if not obj.is_contiguous():  # type: ignore[attr-defined]
            raise KernelArgumentError(f"{name} must be contiguous")
        esize = int(obj.element_size())  # type: ignore[attr-defined]
        shape = tuple(int(d) for d in obj.shape)  # type: ignore[attr-defined]
        return Buffer(
            address=int(obj.data_ptr()),  # type: ignore[attr-defined]
            nbytes=prod(shape) * esize,
            element_size=esize,
            shape=shape,
            on_device=tensor_on_device(obj),
            obj=obj,
        )
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise KernelArgumentError(f"{name} must be C-contiguous")
        if writable and not obj.flags.writeable:
            raise KernelArgumentError(f"{name} is read-only")
        return Buffer(
            address=int(obj.__array_interface__["data"][0]),
            nbytes=int(obj.nbytes),
            element_size=int(obj.itemsize),
            shape=tuple(int(d) for d in obj.shape),
            on_device=False,
            obj=obj,
        )
    raise KernelArgumentError(
        f"{name} must be a numpy array or torch tensor, got {type(obj).__name__}"
    )


def check_item_size(buf: Buffer, item_size: int, name: str) -> None:
    if not isinstance(item_size, int) or isinstance(item_size, bool) or item_size <= 0:
        raise KernelArgumentError(f"item_size must be a positive int, got {item_size!r}")
    if item_size % buf.element_size:
        raise KernelArgumentError(
            f"item_size {item_size} is not a whole number of {buf.element_size}-byte elements "
            f"of {name}"
        )
    row = buf.row_bytes()
    if row % item_size or buf.nbytes % item_size:
        raise KernelArgumentError(
            f"item_size {item_size} does not divide a row of {name} ({row} bytes, shape "
            f"{buf.shape})"
        )


@dataclass(frozen=True)
class LayerTable:
    """Per-layer base addresses of one side, with what is known about them."""

    bases: np.ndarray  # uint64, one per layer
    slots: int | None  # None for a raw address table: bounds unknown
    on_device: bool | None  # None for a raw address table: memory kind unknown
    keep: tuple[object, ...]


def layer_table(
    obj: object, num_layers: int, item_size: int, name: str, slots: int | None = None
) -> LayerTable:
    """Accept SGLang's int64/uint64 address table, or a sequence of per-layer buffers."""
    import numpy as np

    if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        if len(obj) != num_layers:
            raise KernelArgumentError(f"{name} has {len(obj)} layers, num_layers is {num_layers}")
        bufs = [describe(b, f"{name}[{i}]") for i, b in enumerate(obj)]
        kinds = {b.on_device for b in bufs}
        if len(kinds) > 1:
            raise KernelArgumentError(f"{name} mixes host and device buffers")
        counts = [b.slots(item_size, f"{name}[{i}]") for i, b in enumerate(bufs)]
        bases = np.array([b.address for b in bufs], dtype=np.uint64)
        return LayerTable(
            bases, min(counts) if counts else 0, kinds.pop() if kinds else False, tuple(obj)
        )
    if is_tensor(obj):
        if str(obj.dtype) not in ("torch.int64", "torch.uint64"):  # type: ignore[attr-defined]
            raise KernelArgumentError(
                f"{name} must be an int64/uint64 address table, got {obj.dtype}"  # type: ignore[attr-defined]
            )
        arr = obj.detach().cpu().numpy()  # type: ignore[attr-defined]
    elif isinstance(obj, np.ndarray):
        arr = obj
    else:
        raise KernelArgumentError(
            f"{name} must be an address table or a list of per-layer buffers, "
            f"got {type(obj).__name__}"
        )
    if arr.dtype not in (np.int64, np.uint64):
        raise KernelArgumentError(f"{name} must be an int64/uint64 address table, got {arr.dtype}")
    if arr.ndim != 1 or arr.shape[0] != num_layers:
        raise KernelArgumentError(
            f"{name} must hold num_layers={num_layers} addresses, got shape {arr.shape}"
        )
    if (arr.astype(np.int64) == 0).any():
        raise KernelArgumentError(f"{name} holds a null layer address")
    return LayerTable(arr.astype(np.uint64), slots, None, (obj,))
