"""Network interfaces and RDMA devices with the PCI function each sits on."""

from __future__ import annotations

from xputune.errors import HostError
from xputune.host import HostView
from xputune.topology.model import Nic, PciFunction
from xputune.topology.pci import path_to_root, pci_chain
from xputune.topology.values import parse_int

NET_CLASS = "/sys/class/net"
IB_CLASS = "/sys/class/infiniband"


def _pci_of(view: HostView, class_path: str) -> str | None:
    """Nearest PCI ancestor of a class device; the link may end at a non-PCI child (virtio2)."""
    _, chain = pci_chain(view.realpath(class_path))
    return chain[-1] if chain else None


def _speed(view: HostView, path: str) -> int | None:
    # Reading speed of a down link fails with EINVAL on a live host; -1 means unknown.
    try:
        text = view.read_optional(path)
    except HostError:
        return None
    if text is None:
        return None
    value = parse_int(text, path)
    return value if value > 0 else None


def discover_nics(view: HostView, functions: dict[str, PciFunction]) -> tuple[Nic, ...]:
    rdma_by_bdf: dict[str, tuple[str, str | None]] = {}
    for dev in view.listdir(IB_CLASS):
        bdf = _pci_of(view, f"{IB_CLASS}/{dev}")
        if bdf is None or bdf in rdma_by_bdf:
            continue
        ports = view.listdir(f"{IB_CLASS}/{dev}/ports")
        layer = (
            view.read_optional(f"{IB_CLASS}/{dev}/ports/{ports[0]}/link_layer") if ports else None
        )
        rdma_by_bdf[bdf] = (dev, layer)

    nics: list[Nic] = []
    named: set[str] = set()
    for ifname in view.listdir(NET_CLASS):
        bdf = _pci_of(view, f"{NET_CLASS}/{ifname}")
        if bdf is None or bdf not in functions:
            continue  # virtual interfaces (lo, bridges, veth) have no PCI function
        base = f"{NET_CLASS}/{ifname}"
        rdma, layer = rdma_by_bdf.get(bdf, (None, None))
        if layer is None:
            net_type = view.read_optional(f"{base}/type")
            layer = {"1": "Ethernet", "32": "InfiniBand"}.get(net_type or "")
        nics.append(
            Nic(
                name=ifname,
                bdf=bdf,
                rdma=rdma,
                numa_node=functions[bdf].numa_node,
                speed_mbps=_speed(view, f"{base}/speed"),
                link_layer=layer,
                operstate=view.read_optional(f"{base}/operstate"),
                path=path_to_root(functions, bdf),
            )
        )
        named.add(bdf)
    # RDMA devices without a netdev still are NICs for placement purposes.
    for bdf, (rdma, layer) in rdma_by_bdf.items():
        if bdf not in named and bdf in functions:
            nics.append(
                Nic(
                    rdma,
                    bdf,
                    rdma,
                    functions[bdf].numa_node,
                    None,
                    layer,
                    None,
                    path_to_root(functions, bdf),
                )
            )
    return tuple(sorted(nics, key=lambda n: (n.bdf, n.name)))
