"""Record a host: probe it, then write exactly what the probe read (see host/record.py)."""

from __future__ import annotations

from xputune.errors import HostError
from xputune.host import HostView
from xputune.host.record import hwloc_paths, write_recording
from xputune.host.view import DirView
from xputune.topology.discover import discover
from xputune.topology.ids import trim_pci_ids
from xputune.topology.model import Topology


def record(view: HostView, out: str, *, scrub: bool = True) -> tuple[Topology, int]:
    """Write a recording of `view` to `out`; returns what the probe saw and the entry count.

    File contents are taken as the probe read them, so a live file that changes between
    reads (free memory) replays exactly as probed. pci.ids is cut down to the IDs present.
    """
    if not isinstance(view, DirView):
        raise HostError("record reads a live host or an extracted tree, not a tarball")
    view.keep_contents()
    topo = discover(view)
    paths = set(view.accessed) | hwloc_paths(view)
    present = {(fn.vendor_id, fn.device_id) for fn in topo.pci.values()}
    replace = {
        path: trim_pci_ids(data.decode("utf-8", "replace"), present).encode()
        for path, data in (view.contents or {}).items()
        if path.endswith("/pci.ids")
    }
    count = write_recording(view, paths, out, scrub=scrub, replace=replace)
    return topo, count
