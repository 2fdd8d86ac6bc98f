"""Kunlunxin cards as VendorInfo records, read through the xpuml binding.

One init/shutdown pair per call. A card whose handle or PCI info fails (device lost) is left
out, so it keeps its topology without vendor details; a field the library cannot give (not
supported, missing function) is None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from xputune.devices import xpuml
from xputune.devices.busid import normalize_bus_id
from xputune.devices.info import VendorInfo

T = TypeVar("T")


def _optional(fn: Callable[..., T], *args: object) -> T | None:
    try:
        return fn(*args)
    except xpuml.XPUMLError:
        return None


def read_cards(path: str | None = None) -> dict[str, VendorInfo]:
    """VendorInfo per canonical bus id of every card the library lists.

    Raises XPUMLError when the library cannot be loaded or initialised.
    """
    xpuml.load_library(path)
    xpuml.xpumlInit()
    try:
        driver = _optional(xpuml.xpumlSystemGetDriverVersion) or None
        cards: dict[str, VendorInfo] = {}
        for index in range(xpuml.xpumlDeviceGetCount()):
            try:
                handle = xpuml.xpumlDeviceGetHandleByIndex(index)
                pci = xpuml.xpumlDeviceGetPciInfo(handle)
            except xpuml.XPUMLError:
                continue
            bus_id = normalize_bus_id(pci.busId.decode("ascii", "replace"))
            if bus_id is None:
                continue
            memory = _optional(xpuml.xpumlDeviceGetMemoryInfo, handle)
            cards[bus_id] = VendorInfo(
                provider="xpuml",
                product_name=_optional(xpuml.xpumlDeviceGetName, handle) or None,
                memory_total_bytes=memory.total if memory is not None else None,
                driver_version=driver,
                serial=_optional(xpuml.xpumlDeviceGetSerial, handle) or None,
            )
        return cards
    finally:
        _optional(xpuml.xpumlShutdown)
