"""Which PCI functions are accelerators ("cards"), by the rules of docs/platform.md, 1.

Kunlunxin cards are recognized by vendor, by the bound driver or by a /sys/class/xpu entry,
because which vendor ID their config space carries is unverified. Virtual functions and switch
management endpoints are never cards.
"""

from __future__ import annotations

from xputune.host.reader import Reader
from xputune.topology.ids import id_table
from xputune.topology.model import PciFunction
from xputune.topology.pci import pci_ancestor

XPU_CLASS = "/sys/class/xpu"
NVIDIA = 0x10DE
PREFIX = {"kunlunxin": "xpu", "nvidia": "gpu", "other": "acc"}


def xpu_class_devices(reader: Reader) -> dict[str, str]:
    """bdf -> xpuN from /sys/class/xpu (the Kunlunxin driver's class directory)."""
    found: dict[str, str] = {}
    for entry in reader.view.listdir(XPU_CLASS):
        bdf = pci_ancestor(reader, f"{XPU_CLASS}/{entry}")
        if bdf:
            found.setdefault(bdf, entry)
    return found


def classify(fn: PciFunction, xpu_bdfs: dict[str, str]) -> tuple[str, str] | None:
    """(family, model) when `fn` is a card, else None."""
    table = id_table()
    key = (fn.vendor_id, fn.device_id)
    if fn.is_virtual_function or fn.is_bridge or key in table.not_cards:
        return None
    known = table.accelerators.get(key)
    if known:
        return known
    if (
        fn.vendor_id in table.kunlunxin_vendors
        or fn.driver in table.kunlunxin_drivers
        or fn.bdf in xpu_bdfs
    ):
        return "kunlunxin", fn.device_name
    if fn.class_code is None:
        return None
    base_class, subclass = fn.class_code >> 16, (fn.class_code >> 8) & 0xFF
    if fn.vendor_id == NVIDIA and base_class == 0x03 and subclass in (0x00, 0x02):
        return "nvidia", fn.device_name
    if base_class == 0x12 or (base_class, subclass) in ((0x0B, 0x40), (0x03, 0x02)):
        return "other", fn.device_name
    return None
