"""NVIDIA cards as VendorInfo records, read through NVML (nvidia-ml-py, module pynvml).

NVML supplies only what sysfs cannot: product name, memory size, driver version, serial. NUMA
and PCIe placement come from sysfs (nvmlDeviceGetNumaNodeId fails on ordinary x86 PCIe boxes),
and the records join topology cards by bus id ("00000000:18:00.0" normalised to sysfs's form).

pynvml loads "libnvidia-ml.so.1" by name on its first nvmlInit. To load a given file instead,
its module-level handle (`nvmlLib`) is set under its own lock and its function-pointer cache is
cleared; should a future pynvml drop those names, the file is preloaded with RTLD_GLOBAL so
that pynvml's dlopen by soname finds it already mapped. pynvml is imported only here, and only
when a caller has found a library, because importing it costs about 20 ms of start-up.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from xputune.devices.busid import normalize_bus_id
from xputune.devices.info import VendorInfo
from xputune.errors import XputuneError

T = TypeVar("T")


class NvmlError(XputuneError):
    """NVML could not be loaded or initialised, or nvidia-ml-py is missing."""


def _pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError:
        raise NvmlError(
            "nvml: nvidia-ml-py is not installed (pip install 'xputune[nvidia]')"
        ) from None
    return pynvml


def use_library(path: str) -> None:
    """Make pynvml use the libnvidia-ml at `path` from its next call on."""
    pynvml = _pynvml()
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise NvmlError(f"nvml: cannot load {path}: {exc}") from None
    lock = getattr(pynvml, "libLoadLock", None)
    cache = getattr(pynvml, "_nvmlGetFunctionPointer_cache", None)
    if lock is None or not hasattr(pynvml, "nvmlLib") or not isinstance(cache, dict):
        return  # preloaded with RTLD_GLOBAL: pynvml's dlopen("libnvidia-ml.so.1") finds it
    with lock:
        pynvml.nvmlLib = lib
        cache.clear()


def forget_library() -> None:
    """Make pynvml forget its library, so the next nvmlInit loads afresh (tests, reloads)."""
    try:
        import pynvml
    except ImportError:
        return
    lock = getattr(pynvml, "libLoadLock", None)
    if lock is None:
        return
    with lock:
        pynvml.nvmlLib = None
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlLib_refcount = 0


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def read_cards(path: str | None = None) -> dict[str, VendorInfo]:
    """VendorInfo per canonical bus id of every GPU NVML lists.

    `path` names the libnvidia-ml to use; None lets pynvml find its own. Raises NvmlError when
    the library cannot be loaded or initialised.
    """
    pynvml = _pynvml()
    if path is not None:
        use_library(path)

    def optional(fn: Callable[..., T], *args: object) -> T | None:
        try:
            return fn(*args)
        except pynvml.NVMLError:
            return None

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlError(f"nvml: {exc}") from None
    try:
        driver = optional(pynvml.nvmlSystemGetDriverVersion)
        count = optional(pynvml.nvmlDeviceGetCount) or 0
        cards: dict[str, VendorInfo] = {}
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                pci = pynvml.nvmlDeviceGetPciInfo(handle)
            except pynvml.NVMLError:
                continue
            bus_id = normalize_bus_id(_text(pci.busId))
            if bus_id is None:
                continue
            memory = optional(pynvml.nvmlDeviceGetMemoryInfo, handle)
            name = optional(pynvml.nvmlDeviceGetName, handle)
            serial = optional(pynvml.nvmlDeviceGetSerial, handle)
            cards[bus_id] = VendorInfo(
                provider="nvml",
                product_name=_text(name) if name else None,
                memory_total_bytes=int(memory.total) if memory is not None else None,
                driver_version=_text(driver) if driver else None,
                serial=_text(serial) if serial else None,
            )
        return cards
    finally:
        optional(pynvml.nvmlShutdown)
