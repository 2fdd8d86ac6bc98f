"""One SmiCard out of a card's key tree, shared by the -q text and -q -x XML forms of both tools.

Both forms carry the same facts under slightly different names ("Product Name" in text,
product_name in XML; "Utilization/XPU" vs utilization/xpu_util). Keys are compared after
dropping case, spaces, underscores and dashes, and each fact has a short list of spellings
(xpu-smi's, then nvidia-smi's, which it mirrors).
"""

from __future__ import annotations

import re
from typing import Union

from xputune.devices.xpusmi.model import SmiCard
from xputune.devices.xpusmi.values import Notes, bus_id, integer, mib, number, percent, text_value

Tree = dict[str, Union[str, "Tree"]]

_SEPARATORS = re.compile(r"[\s_\-]+")


def key(name: str) -> str:
    """The comparison form of a key: "Product Name", product_name -> productname."""
    return _SEPARATORS.sub("", name).lower()


def lookup(tree: Tree, *paths: str) -> str | None:
    """The first of `paths` ("section/field", compared by key()) that holds a value."""
    for path in paths:
        node: str | Tree | None = tree
        for part in path.split("/"):
            node = node.get(key(part)) if isinstance(node, dict) else None
        if isinstance(node, str):
            return node
    return None


def card_from_tree(
    tree: Tree, form: str, index: int, header_bus_id: str | None, notes: Notes
) -> SmiCard:
    """The card described by `tree`; a garbled value becomes None and a warning in `notes`."""
    label = header_bus_id or f"card {index}"
    soft = notes.soft

    def get(*paths: str) -> str | None:
        return lookup(tree, *paths)

    def what(field: str) -> str:
        return f"{label}: {field}"

    memory = ("memoryusage", "fbmemoryusage", "hbmmemoryusage")
    own_bus = soft(bus_id, get("pci/busid", "pci/pcibusid"), form, what("PCI bus id"))
    return SmiCard(
        index=index,
        bus_id=header_bus_id or own_bus,
        name=text_value(get("productname", "name")),
        uuid=text_value(get("xpuuuid", "gpuuuid", "uuid")),
        serial=text_value(get("serialnumber", "serial")),
        minor=soft(integer, get("minornumber"), (), form, what("minor number")),
        firmware=text_value(
            get("firmwareversion/allversion", "firmwareversion", "firmware", "vbiosversion")
        ),
        memory_total_mib=soft(
            mib, get(*(f"{m}/total" for m in memory)), form, what("memory total")
        ),
        memory_used_mib=soft(mib, get(*(f"{m}/used" for m in memory)), form, what("memory used")),
        memory_free_mib=soft(mib, get(*(f"{m}/free" for m in memory)), form, what("memory free")),
        utilization_pct=soft(
            percent,
            get("utilization/xpu", "utilization/xpuutil", "utilization/gpu", "utilization/gpuutil"),
            form,
            what("utilization"),
        ),
        memory_utilization_pct=soft(
            percent, get("utilization/memory", "utilization/memoryutil"), form, what("memory util")
        ),
        temperature_c=soft(
            integer,
            get(
                "temperature/xpucurrenttemp",
                "temperature/xputemp",
                "temperature/gpucurrenttemp",
                "temperature/gputemp",
            ),
            ("c",),
            form,
            what("temperature"),
        ),
        power_w=soft(
            number,
            get(
                "powerreadings/powerdraw",
                "powerreadings/averagepowerdraw",
                "powerreadings/instantaneouspowerdraw",
                "xpupowerreadings/powerdraw",
                "gpupowerreadings/powerdraw",
            ),
            ("w",),
            form,
            what("power draw"),
        ),
    )
