"""The PCI tree: every function under /sys/bus/pci/devices with its place in the hierarchy.

The hierarchy comes from the symlink structure (/sys/bus/pci/devices/BDF points into
/sys/devices/pciDDDD:BB/<root port>/<switch up>/<switch down>/<endpoint>), the same way the
kernel exposes it; the port type comes from the PCIe capability when config space is readable,
else from the bridge's position in that chain.
"""

from __future__ import annotations

import re

from xputune.errors import HostDataError
from xputune.host import HostView, pciconfig
from xputune.topology.ids import PciNames, id_table
from xputune.topology.model import Link, Ordering, PciFunction
from xputune.topology.values import (
    parse_hex,
    parse_link_speed,
    parse_link_width,
    parse_numa_node,
    read_cpulist,
)

PCI_DEVICES = "/sys/bus/pci/devices"
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")

_PORT_KINDS = {
    "root port": "root port",
    "switch upstream": "switch upstream",
    "switch downstream": "switch downstream",
}


def pci_chain(real_path: str) -> tuple[str, list[str]]:
    """(host bridge, [bdf, ...]) of a resolved sysfs device path; ("", []) when not PCI."""
    host_bridge = ""
    chain: list[str] = []
    for part in real_path.split("/"):
        if HOST_BRIDGE.match(part):
            host_bridge = part
            chain = []
        elif BDF.match(part) and host_bridge:
            chain.append(part)
    return host_bridge, chain


def _ordering(view: HostView, base: str) -> tuple[Ordering, str | None]:
    path = f"{base}/config"
    try:
        data = view.read_bytes(path)
    except FileNotFoundError:
        return Ordering(reason="no config space file"), None
    config = pciconfig.decode(data, path)
    if not config.visible:
        return Ordering(reason="needs root"), None
    if config.pcie is None:
        return Ordering(reason="not a PCI Express function"), None
    cap = config.pcie
    return (
        Ordering(cap.ido_request, cap.ido_completion, cap.relaxed_ordering),
        cap.port_type_name,
    )


def _link(view: HostView, base: str) -> Link:
    def attr(name: str, parse):
        text = view.read_optional(f"{base}/{name}")
        return None if text is None else parse(text, f"{base}/{name}")

    return Link(
        current_speed=attr("current_link_speed", parse_link_speed),
        current_width=attr("current_link_width", parse_link_width),
        max_speed=attr("max_link_speed", parse_link_speed),
        max_width=attr("max_link_width", parse_link_width),
    )


def _kind(class_code: int, port_type: str | None, parent: PciFunction | None) -> str:
    if port_type in _PORT_KINDS:
        return _PORT_KINDS[port_type]
    if class_code >> 8 != 0x0604:
        return "endpoint"
    # Config space unreadable: infer from the position in the chain.
    if parent is None:
        return "root port"
    if parent.kind == "switch upstream":
        return "switch downstream"
    if parent.kind in ("root port", "switch downstream"):
        return "switch upstream"
    return "bridge"


def discover_pci(view: HostView) -> dict[str, PciFunction]:
    """All PCI functions keyed by bus id, parents before children."""
    names = PciNames(view)
    table = id_table()
    located: list[tuple[str, str, str, list[str]]] = []
    for bdf in view.listdir(PCI_DEVICES):
        if not BDF.match(bdf):
            raise HostDataError(f"{PCI_DEVICES}/{bdf}", bdf, "expected a bus id like 0000:13:00.0")
        real = view.realpath(f"{PCI_DEVICES}/{bdf}")
        host_bridge, chain = pci_chain(real)
        if not chain or chain[-1] != bdf:
            raise HostDataError(
                f"{PCI_DEVICES}/{bdf}", real, "expected a link into /sys/devices/pci*"
            )
        located.append((bdf, real, host_bridge, chain))
    # Parents first, so a child can see its parent's kind.
    located.sort(key=lambda item: len(item[3]))
    functions: dict[str, PciFunction] = {}
    for bdf, real, host_bridge, chain in located:
        base = f"{PCI_DEVICES}/{bdf}"
        vendor_id = parse_hex(view.read_text(f"{base}/vendor"), f"{base}/vendor")
        device_id = parse_hex(view.read_text(f"{base}/device"), f"{base}/device")
        class_code = parse_hex(view.read_text(f"{base}/class"), f"{base}/class", bits=24)
        sub_vendor = view.read_optional(f"{base}/subsystem_vendor")
        sub_device = view.read_optional(f"{base}/subsystem_device")
        numa_text = view.read_optional(f"{base}/numa_node")
        ordering, port_type = _ordering(view, base)
        parent_bdf = chain[-2] if len(chain) > 1 else None
        parent = functions.get(parent_bdf) if parent_bdf else None
        group = view.link_name(f"{base}/iommu_group")
        functions[bdf] = PciFunction(
            bdf=bdf,
            sysfs_path=real,
            parent=parent_bdf,
            host_bridge=host_bridge,
            vendor_id=vendor_id,
            device_id=device_id,
            class_code=class_code,
            subsystem_vendor_id=None
            if sub_vendor is None
            else parse_hex(sub_vendor, f"{base}/subsystem_vendor"),
            subsystem_device_id=None
            if sub_device is None
            else parse_hex(sub_device, f"{base}/subsystem_device"),
            vendor_name=names.vendor(vendor_id),
            device_name=names.device(vendor_id, device_id),
            kind=_kind(class_code, port_type, parent),
            port_type=port_type,
            numa_node=None
            if numa_text is None
            else parse_numa_node(numa_text, f"{base}/numa_node"),
            local_cpus=read_cpulist(view, f"{base}/local_cpulist") or (),
            link=_link(view, base),
            driver=view.link_name(f"{base}/driver"),
            iommu_group=int(group) if group and group.isdigit() else None,
            ordering=ordering,
            is_virtual_function=view.exists(f"{base}/physfn")
            or (vendor_id, device_id) in table.virtual_functions,
        )
    return dict(sorted(functions.items()))


def path_to_root(functions: dict[str, PciFunction], bdf: str) -> tuple[str, ...]:
    """Bus ids from the root port down to `bdf` itself."""
    chain = [bdf]
    parent = functions[bdf].parent
    while parent is not None and parent in functions:
        chain.append(parent)
        parent = functions[parent].parent
    return tuple(reversed(chain))
