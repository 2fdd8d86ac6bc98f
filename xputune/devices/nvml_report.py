"""`xputune smi` on an NVIDIA host: the cards as NVML (nvidia-ml-py) reports them.

The same SmiReport that parsing an `nvidia-smi -q -x` gives, built from NVML calls, so a live
host and a saved output render and serialise alike. One init/shutdown pair per call; a card
whose handle or PCI info fails is left out with a warning; a field NVML cannot give (not
supported, a function missing from an older driver) is None. Units follow nvidia-smi: MiB,
percent, degrees C, watts (NVML reports bytes and milliwatts).
"""

from __future__ import annotations

from typing import Any

from xputune.devices.busid import normalize_bus_id
from xputune.devices.nvml import OptionalCall, _text, session
from xputune.devices.xpusmi.identity import finish
from xputune.devices.xpusmi.model import SmiCard, SmiReport

MIB = 1 << 20


def read_report(path: str | None = None) -> SmiReport:
    """Every GPU NVML lists; NvmlError when the library cannot be loaded or initialised."""
    warnings: list[str] = []
    cards: list[SmiCard] = []
    with session(path) as (pynvml, optional):
        driver = optional(pynvml.nvmlSystemGetDriverVersion)
        count = optional(pynvml.nvmlDeviceGetCount) or 0
        for index in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                pci = pynvml.nvmlDeviceGetPciInfo(handle)
            except pynvml.NVMLError as exc:
                warnings.append(f"nvml: GPU {index}: {exc}; left out")
                continue
            cards.append(_card(pynvml, optional, handle, index, _text(pci.busId), warnings))
    return finish(
        SmiReport(
            form="nvml",
            cards=tuple(cards),
            driver_version=_text(driver) if driver else None,
            vendor="nvidia",
            warnings=tuple(warnings),
        )
    )


def _card(
    pynvml: Any,
    optional: OptionalCall,
    handle: Any,
    index: int,
    raw_bus: str,
    warnings: list[str],
) -> SmiCard:
    bus = normalize_bus_id(raw_bus)
    if bus is None:
        warnings.append(f"nvml: GPU {index}: bus id {raw_bus!r} is not a PCI bus id")
    memory = optional(pynvml.nvmlDeviceGetMemoryInfo, handle)
    util = optional(pynvml.nvmlDeviceGetUtilizationRates, handle)
    power = optional(pynvml.nvmlDeviceGetPowerUsage, handle)
    name, uuid, serial = (
        optional(getattr(pynvml, f"nvmlDeviceGet{what}"), handle)
        for what in ("Name", "UUID", "Serial")
    )
    return SmiCard(
        index=index,
        bus_id=bus,
        name=_text(name) if name else None,
        uuid=_text(uuid) if uuid else None,
        serial=_text(serial) if serial else None,
        minor=optional(pynvml.nvmlDeviceGetMinorNumber, handle),
        memory_total_mib=int(memory.total) // MIB if memory is not None else None,
        memory_used_mib=int(memory.used) // MIB if memory is not None else None,
        memory_free_mib=int(memory.free) // MIB if memory is not None else None,
        utilization_pct=util.gpu if util is not None else None,
        memory_utilization_pct=util.memory if util is not None else None,
        temperature_c=optional(pynvml.nvmlDeviceGetTemperature, handle, 0),
        power_w=power / 1000 if power is not None else None,
    )
