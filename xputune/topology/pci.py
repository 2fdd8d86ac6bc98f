"""The PCI tree: every function under /sys/bus/pci/devices with its place in the hierarchy.

The hierarchy comes from the symlink structure (/sys/bus/pci/devices/BDF points into
/sys/devices/pciDDDD:BB/<root port>/<switch up>/<switch down>/<endpoint>), the same way the
kernel exposes it. Some recording tools copy those entries as plain directories; then the
bridges' secondary bus numbers in config space place each function, as hwloc does. The port
type comes from the PCIe capability when config space is readable, else from the bridge's
position in the chain.
"""

from __future__ import annotations

import re

from xputune.host import pciconfig
from xputune.host.reader import Reader
from xputune.host.values import (
    parse_cpulist,
    parse_cpumask,
    parse_hex,
    parse_link_speed,
    parse_link_width,
    parse_numa_node,
)
from xputune.topology.ids import PciNames, id_table
from xputune.topology.model import Link, Ordering, PciFunction
from xputune.tuples import NamedTuple

PCI_DEVICES = "/sys/bus/pci/devices"
# Domains are 16 bits on most machines but wider behind Intel VMD (10000:e0:00.0) and on
# some PA-RISC and POWER boxes.
BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
CLASS_BRIDGE_PCI = 0x0604

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


def pci_ancestor(reader: Reader, class_path: str) -> str | None:
    """Nearest PCI function above a class device (/sys/class/net/eth0, /sys/class/xpu/xpu0).

    None for virtual devices and for links whose target a recording left out (lo, veth).
    """
    try:
        _, chain = pci_chain(reader.view.realpath(class_path))
    except FileNotFoundError:
        return None
    return chain[-1] if chain else None


class _Located(NamedTuple):
    bdf: str
    sysfs_path: str
    host_bridge: str
    chain: tuple[str, ...]  # bdfs from the top of the hierarchy down to this one
    base: str  # where its attributes are read: its /sys/bus/pci/devices entry, if listed


class _Config(NamedTuple):
    ordering: Ordering
    port_type: str | None
    space: pciconfig.ConfigSpace | None


def _config(reader: Reader, base: str) -> _Config:
    path = f"{base}/config"
    if not reader.view.exists(path):
        return _Config(Ordering(reason="no config space file"), None, None)
    space = reader.guard(path, lambda: _decode(reader, path))
    if space is None:
        return _Config(Ordering(reason="config space unreadable"), None, None)
    if not space.visible:
        return _Config(Ordering(reason="needs root"), None, space)
    if space.pcie is None:
        return _Config(Ordering(reason="not a PCI Express function"), None, space)
    cap = space.pcie
    ordering = Ordering(cap.ido_request, cap.ido_completion, cap.relaxed_ordering)
    return _Config(ordering, cap.port_type_name, space)


def _decode(reader: Reader, path: str) -> pciconfig.ConfigSpace:
    """The config space at `path`, read only as far as decoding it looks (a live host's
    every word is a config access)."""
    with reader.view.read_sparse(path) as data:
        return pciconfig.decode(data, path)


def _link(reader: Reader, base: str) -> Link:
    return Link(
        current_speed=reader.value(f"{base}/current_link_speed", parse_link_speed),
        current_width=reader.value(f"{base}/current_link_width", parse_link_width),
        max_speed=reader.value(f"{base}/max_link_speed", parse_link_speed),
        max_width=reader.value(f"{base}/max_link_width", parse_link_width),
    )


def _local_cpus(reader: Reader, base: str) -> tuple[int, ...]:
    """local_cpulist, else the local_cpus mask (all that some recordings keep)."""
    if reader.view.exists(f"{base}/local_cpulist"):
        return reader.value(f"{base}/local_cpulist", parse_cpulist) or ()
    return reader.value(f"{base}/local_cpus", parse_cpumask) or ()


def _kind(class_code: int | None, port_type: str | None, parent: str | None) -> str:
    """What a function is; `parent` is the kind of the function above it (None: none)."""
    if port_type in _PORT_KINDS:
        return _PORT_KINDS[port_type]
    if class_code is None or class_code >> 8 != CLASS_BRIDGE_PCI:
        return "endpoint"
    # Config space unreadable: infer from the position in the chain.
    if parent is None:
        return "root port"
    if parent == "switch upstream":
        return "switch downstream"
    if parent in ("root port", "switch downstream"):
        return "switch upstream"
    return "bridge"


def _locate(reader: Reader) -> tuple[list[_Located], list[str]]:
    """Every function placed by its sysfs link; bdfs whose entry is a plain directory apart."""
    located: list[_Located] = []
    plain: list[str] = []
    for bdf in reader.view.listdir(PCI_DEVICES):
        path = f"{PCI_DEVICES}/{bdf}"
        if not BDF.match(bdf):
            reader.odd(path, bdf, "expected a bus id like 0000:13:00.0", "skipped")
            continue
        try:
            real = reader.view.realpath(path)
        except FileNotFoundError:
            reader.odd(
                path, None, "expected a link into /sys/devices/pci* (it leads nowhere)", "skipped"
            )
            continue
        host_bridge, chain = pci_chain(real)
        if chain and chain[-1] == bdf:
            located.append(_Located(bdf, real, host_bridge, tuple(chain), path))
        elif reader.view.is_dir(path):
            plain.append(bdf)
        else:
            reader.odd(path, real, "expected a link into /sys/devices/pci*", "skipped")
    return located + _unlisted_ancestors(located), plain


def _unlisted_ancestors(located: list[_Located]) -> list[_Located]:
    """Bridges on a listed function's sysfs path that /sys/bus/pci/devices lacks.

    Recordings made by hand (and hwloc's gatherer on some kernels) can miss a bus entry while
    its directory, with all its attributes, sits on the path of the devices below it.
    """
    listed = {loc.bdf for loc in located}
    extra: dict[str, _Located] = {}
    for loc in located:
        for depth, bdf in enumerate(loc.chain[:-1]):
            if bdf in listed or bdf in extra:
                continue
            real = loc.sysfs_path.split(f"/{bdf}/", 1)[0] + f"/{bdf}"
            extra[bdf] = _Located(bdf, real, loc.host_bridge, loc.chain[: depth + 1], real)
    return list(extra.values())


def _place_by_bus(
    plain: list[str], secondary: dict[tuple[str, int], str], known: dict[str, _Located]
) -> list[_Located]:
    """Chains for plain-directory entries from the bridges' secondary bus numbers."""
    placed: dict[str, _Located] = dict(known)

    def place(bdf: str, depth: int = 0) -> _Located:
        if bdf in placed:
            return placed[bdf]
        domain, bus, _ = bdf.split(":")
        parent = secondary.get((domain, int(bus, 16)))
        entry = f"{PCI_DEVICES}/{bdf}"
        if parent is None or parent == bdf or depth > 64:
            here = _Located(bdf, entry, f"pci{domain}:{bus}", (bdf,), entry)
        else:
            above = place(parent, depth + 1)
            here = _Located(bdf, entry, above.host_bridge, (*above.chain, bdf), entry)
        placed[bdf] = here
        return here

    return [place(bdf) for bdf in plain]


def discover_pci(reader: Reader) -> dict[str, PciFunction]:
    """All PCI functions keyed by bus id, parents before children."""
    view = reader.view
    names = PciNames(view)
    table = id_table()
    located, plain = _locate(reader)
    configs = {loc.bdf: _config(reader, loc.base) for loc in located}
    configs.update({bdf: _config(reader, f"{PCI_DEVICES}/{bdf}") for bdf in plain})
    if plain:
        secondary = {
            (bdf.split(":")[0], cfg.space.secondary_bus): bdf
            for bdf, cfg in configs.items()
            if cfg.space is not None and cfg.space.secondary_bus is not None
        }
        located += _place_by_bus(plain, secondary, {loc.bdf: loc for loc in located})
        where = "comes from the bridges' bus numbers" if secondary else "is unknown"
        reader.warn(
            f"{PCI_DEVICES}: {len(plain)} entries are plain directories, not links into "
            f"/sys/devices (a recording tool copied them); their place in the PCI tree {where}"
        )
    # Parents first, so a child can see its parent's kind.
    located.sort(key=lambda item: len(item.chain))
    # Named once all ids are known: the vendors pci.ids must name are one search of it.
    rows: list[tuple[int | None, int | None, dict[str, object]]] = []
    kinds: dict[str, str] = {}
    for loc in located:
        bdf, base = loc.bdf, loc.base
        cfg = configs[bdf]
        vendor_id = reader.value(f"{base}/vendor", parse_hex, required=True)
        device_id = reader.value(f"{base}/device", parse_hex, required=True)
        class_code = reader.value(f"{base}/class", _parse_class, required=True)
        if cfg.space is not None:  # the header says the same to anyone who may read it
            vendor_id = cfg.space.vendor_id if vendor_id is None else vendor_id
            device_id = cfg.space.device_id if device_id is None else device_id
            class_code = cfg.space.class_code if class_code is None else class_code
        parent_bdf = loc.chain[-2] if len(loc.chain) > 1 else None
        kind = _kind(class_code, cfg.port_type, kinds.get(parent_bdf) if parent_bdf else None)
        kinds[bdf] = kind
        group = view.link_name(f"{base}/iommu_group")
        fields = dict(
            bdf=bdf,
            sysfs_path=loc.sysfs_path,
            parent=parent_bdf,
            host_bridge=loc.host_bridge,
            vendor_id=vendor_id,
            device_id=device_id,
            class_code=class_code,
            subsystem_vendor_id=reader.value(f"{base}/subsystem_vendor", parse_hex),
            subsystem_device_id=reader.value(f"{base}/subsystem_device", parse_hex),
            kind=kind,
            port_type=cfg.port_type,
            numa_node=reader.value(f"{base}/numa_node", parse_numa_node),
            local_cpus=_local_cpus(reader, base),
            link=_link(reader, base),
            driver=view.link_name(f"{base}/driver"),
            iommu_group=int(group) if group and group.isdecimal() else None,
            ordering=cfg.ordering,
            is_virtual_function=view.exists(f"{base}/physfn")
            or (vendor_id, device_id) in table.virtual_functions,
        )
        rows.append((vendor_id, device_id, fields))
    names.prefetch((vendor_id, device_id) for vendor_id, device_id, _ in rows)
    functions = [
        PciFunction(  # type: ignore[arg-type]
            vendor_name=names.vendor(vendor_id),
            device_name=names.device(vendor_id, device_id),
            **fields,
        )
        for vendor_id, device_id, fields in rows
    ]
    return {fn.bdf: fn for fn in sorted(functions, key=lambda fn: fn.bdf)}


def _parse_class(text: str, path: str) -> int:
    return parse_hex(text, path, bits=24)


def path_to_root(functions: dict[str, PciFunction], bdf: str) -> tuple[str, ...]:
    """Bus ids from the root port down to `bdf` itself."""
    chain = [bdf]
    parent = functions[bdf].parent
    while parent is not None and parent in functions and parent not in chain:
        chain.append(parent)
        parent = functions[parent].parent
    return tuple(reversed(chain))
