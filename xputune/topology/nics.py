"""Network interfaces and RDMA devices with the PCI function each sits on."""

from __future__ import annotations

from xputune.errors import HostError
from xputune.host.reader import FATAL, Reader
from xputune.host.values import parse_net_speed
from xputune.topology.model import Nic, PciFunction
from xputune.topology.pci import path_to_root, pci_ancestor

NET_CLASS = "/sys/class/net"
IB_CLASS = "/sys/class/infiniband"


def _speed(reader: Reader, path: str) -> int | None:
    """Mb/s; reading speed of a down link fails with EINVAL on a live host: unknown, not odd."""
    try:
        text = reader.view.read_text(path)
    except FATAL:
        raise
    except (FileNotFoundError, HostError):
        return None
    return reader.parse(path, text, parse_net_speed)


def discover_nics(reader: Reader, functions: dict[str, PciFunction]) -> tuple[Nic, ...]:
    view = reader.view
    rdma_by_bdf: dict[str, tuple[str, str | None]] = {}
    for dev in view.listdir(IB_CLASS):
        bdf = pci_ancestor(reader, f"{IB_CLASS}/{dev}")
        if bdf is None or bdf in rdma_by_bdf:
            continue
        ports = view.listdir(f"{IB_CLASS}/{dev}/ports")
        layer = reader.text(f"{IB_CLASS}/{dev}/ports/{ports[0]}/link_layer") if ports else None
        rdma_by_bdf[bdf] = (dev, layer)

    nics: list[Nic] = []
    named: set[str] = set()
    for ifname in view.listdir(NET_CLASS):
        bdf = pci_ancestor(reader, f"{NET_CLASS}/{ifname}")
        if bdf is None or bdf not in functions:
            continue  # virtual interfaces (lo, bridges, veth) have no PCI function
        base = f"{NET_CLASS}/{ifname}"
        rdma, layer = rdma_by_bdf.get(bdf, (None, None))
        if layer is None:
            net_type = reader.text(f"{base}/type")
            layer = {"1": "Ethernet", "32": "InfiniBand"}.get(net_type or "")
        nics.append(
            Nic(
                name=ifname,
                bdf=bdf,
                rdma=rdma,
                numa_node=functions[bdf].numa_node,
                speed_mbps=_speed(reader, f"{base}/speed"),
                link_layer=layer,
                operstate=reader.text(f"{base}/operstate"),
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
