"""NVIDIA cards as VendorInfo records, read through NVML (nvidia-ml-py, module pynvml).

NVML supplies only what sysfs cannot: product name, memory size, driver version, serial, and
the NVLinks between GPUs (`read`, for the probe's relation matrix). NUMA and PCIe placement
come from sysfs (nvmlDeviceGetNumaNodeId fails on ordinary x86 PCIe boxes),
and the records join topology cards by bus id ("00000000:18:00.0" normalised to sysfs's form).

pynvml loads "libnvidia-ml.so.1" by name on its first nvmlInit. To load a given file instead,
its module-level handle (`nvmlLib`) is set under its own lock and its function-pointer cache is
cleared; should a future pynvml drop those names, the file is preloaded with RTLD_GLOBAL so
that pynvml's dlopen by soname finds it already mapped. pynvml is imported only here, and only
when a caller has found a library, because importing it costs about 20 ms of start-up.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TypeVar

from xputune.devices.busid import normalize_bus_id
from xputune.devices.info import VendorInfo
from xputune.errors import XputuneError

T = TypeVar("T")
Links = dict[str, dict[str, str]]  # bus id -> bus id -> "NV18"


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


OptionalCall = Callable[..., Any]


@contextmanager
def session(path: str | None = None) -> Iterator[tuple[Any, OptionalCall]]:
    """(pynvml, optional) between one nvmlInit and its nvmlShutdown.

    `path` names the libnvidia-ml to use; None lets pynvml find its own. optional(fn, *args)
    calls an NVML function and gives None for any NVML error (not supported, a function an
    older driver lacks), as nvitop does. NvmlError when the library cannot be initialised.
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
        yield pynvml, optional
    finally:
        optional(pynvml.nvmlShutdown)


def read_cards(path: str | None = None) -> dict[str, VendorInfo]:
    """VendorInfo per canonical bus id of every GPU NVML lists.

    `path` names the libnvidia-ml to use; None lets pynvml find its own. Raises NvmlError when
    the library cannot be loaded or initialised.
    """
    return read(path)[0]


def read(path: str | None = None) -> tuple[dict[str, VendorInfo], Links]:
    """VendorInfo per bus id, and the NVLink relations between the GPUs, in one NVML session.

    The links are {bus id: {bus id: "NV<count>"}} for every pair joined by active NVLinks (see
    nvlinks); {} on GPUs without NVLink or drivers without the calls.
    """
    with session(path) as (pynvml, optional):
        driver = optional(pynvml.nvmlSystemGetDriverVersion)
        count = optional(pynvml.nvmlDeviceGetCount) or 0
        cards: dict[str, VendorInfo] = {}
        handles: dict[str, Any] = {}
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                pci = pynvml.nvmlDeviceGetPciInfo(handle)
            except pynvml.NVMLError:
                continue
            bus_id = normalize_bus_id(_text(pci.busId))
            if bus_id is None:
                continue
            handles[bus_id] = handle
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
        return cards, nvlinks(pynvml, handles)


def _active_links(pynvml: Any, handle: Any) -> list[tuple[str | None, int | None]]:
    """(remote bus id, remote device type) of each active NVLink of one GPU.

    Every link number up to NVML_NVLINK_MAX_LINKS is asked, as NVIDIA's own samples do: a link
    that is absent or not trained answers an error or "inactive" and is skipped. A GPU without
    NVLink answers NOT_SUPPORTED for link 0, which ends the loop early.
    """
    found: list[tuple[str | None, int | None]] = []
    if not hasattr(pynvml, "nvmlDeviceGetNvLinkRemotePciInfo"):
        return found  # an nvidia-ml-py too old to ask; the vendor details still count
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError as exc:
            if link == 0 and _code(pynvml, exc) in _NO_NVLINK:
                break
            continue
        if not active:
            continue
        try:
            remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
            bus = normalize_bus_id(_text(remote.busId))
        except pynvml.NVMLError:
            bus = None
        try:
            kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except (pynvml.NVMLError, AttributeError):
            kind = None
        found.append((bus, kind))
    return found


_NO_NVLINK = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")
DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
DEVICE_TYPE_GPU = 0


def _code(pynvml: Any, exc: Exception) -> str | None:
    value = getattr(exc, "value", None)
    return next(
        (n for n in _NO_NVLINK if getattr(pynvml, n, object()) == value),
        None,
    )


def nvlinks(pynvml: Any, handles: dict[str, Any]) -> Links:
    """NV<count> between GPUs (bus ids), from each active link's remote end.

    A link whose remote end is another listed GPU joins that pair directly (NV4 bridges,
    DGX-1's cube mesh). On NVSwitch systems (HGX) the remote end is a switch, not the peer:
    every GPU reaching the same switches (one fabric, grouped transitively) reaches every other
    one, and nvidia-smi shows the smaller of the two GPUs' switch link counts (18 on H100: NV18
    between every pair). A remote end that is neither a listed GPU nor readable counts as a
    switch when NVML says so, else it is skipped.
    """
    direct: dict[tuple[str, str], int] = {}
    to_switch: dict[str, dict[str, int]] = {}
    for bus, handle in handles.items():
        for remote, kind in _active_links(pynvml, handle):
            if remote in handles and remote != bus and kind in (None, DEVICE_TYPE_GPU):
                direct[(bus, remote)] = direct.get((bus, remote), 0) + 1
            elif kind == DEVICE_TYPE_SWITCH or (remote is not None and remote not in handles):
                switch = remote or "switch"
                counts = to_switch.setdefault(bus, {})
                counts[switch] = counts.get(switch, 0) + 1
    fabric = _fabrics(to_switch)
    links: dict[str, dict[str, str]] = {}
    for a in handles:
        for b in handles:
            if a == b:
                continue
            count = direct.get((a, b), 0)
            if a in fabric and fabric.get(b) == fabric[a]:
                count += min(sum(to_switch[a].values()), sum(to_switch[b].values()))
            if count:
                links.setdefault(a, {})[b] = f"NV{count}"
    return links


def _fabrics(to_switch: dict[str, dict[str, int]]) -> dict[str, int]:
    """GPU bus id -> fabric number; GPUs sharing a switch (transitively) share a fabric."""
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for gpu, switches in to_switch.items():
        for switch in switches:
            parent[root("gpu:" + gpu)] = root("sw:" + switch)
    numbers: dict[str, int] = {}
    return {gpu: numbers.setdefault(root("gpu:" + gpu), len(numbers)) for gpu in sorted(to_switch)}
