"""The `topo -m` matrix as data for the probe's relation matrix (NV#, XL between cards).

The tools name matrix devices XPU3/GPU3 (their index), NIC1 (a legend entry) or mlx5_0 (an RDMA
device named directly). A consumer joins on what probe knows: card bus ids where some report
gives them (a `-q -x`, the default table or NVML of the same host, matched by the tool's
index), else probe's card name (xpu3/gpu3), and RDMA device names for NICs.
"""

from __future__ import annotations

import re

from xputune.devices.xpusmi.model import SmiReport
from xputune.topology.cards import PREFIX

_CARD = re.compile(r"^(XPU|GPU)([0-9]{1,6})$", re.ASCII)
Matrix = dict[str, dict[str, str | None]]


def device_keys(topo_report: SmiReport, ids: SmiReport | None = None) -> dict[str, str]:
    """Tool device name -> join key: bus id (from `ids` by index), card name, or RDMA name."""
    topo = topo_report.topology
    if topo is None:
        return {}
    by_index = {c.index: c.bus_id for c in (ids.cards if ids else ()) if c.bus_id}
    prefix = PREFIX.get(topo_report.vendor, PREFIX["other"])
    keys: dict[str, str] = {}
    for name in topo.devices:
        m = _CARD.match(name)
        if m:
            index = int(m[2])
            keys[name] = by_index.get(index) or f"{prefix}{index}"
        else:
            keys[name] = topo.nics.get(name, name)
    return keys


def relation_matrix(topo_report: SmiReport, ids: SmiReport | None = None) -> Matrix:
    """Relations between every pair of devices, keyed by device_keys(); {} without a matrix.

    Values are the tool's codes (X, XL, NV18, PIX, PXB, PHB, NODE, SYS) or None where it printed
    nothing readable. Example: relation_matrix(parse(topo_text), parse(xml_text))
    ["0000:18:00.0"]["0000:19:00.0"] == "NV18".
    """
    topo = topo_report.topology
    if topo is None:
        return {}
    keys = device_keys(topo_report, ids)
    return {
        keys[row]: {keys[col]: topo.relations[row].get(col) for col in topo.devices}
        for row in topo.devices
        if row in topo.relations
    }
