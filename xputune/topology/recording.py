"""Record a host: probe it, then write exactly what the probe read (see host/record.py).

Files that are no part of the host tree (the vendor tools' outputs that `record` saves under
xputune/vendor/, see devices/vendor_files.py) come from the caller through `extra`, which is
given the discovered topology (so only the tools of vendors present are run) and returns host
path -> bytes. This layer only writes them; it never runs a tool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from xputune.errors import HostError
from xputune.host import HostView
from xputune.host.record import hwloc_paths, write_recording
from xputune.host.view import DirView
from xputune.topology.discover import discover
from xputune.topology.ids import trim_pci_ids
from xputune.topology.model import Topology

Extra = Callable[[Topology], Mapping[str, bytes]]


def record(
    view: HostView, out: str, *, scrub: bool = True, extra: Extra | None = None
) -> tuple[Topology, int]:
    """Write a recording of `view` to `out`; returns what the probe saw and the entry count.

    File contents are taken as the probe read them, so a live file that changes between
    reads (free memory) replays exactly as probed. pci.ids is cut down to the IDs present.
    `extra(topo)` adds files at host paths (absolute, e.g. /xputune/vendor/x.txt), replacing
    any the tree holds already.
    """
    if not isinstance(view, DirView):
        raise HostError("record reads a live host or an extracted tree, not a tarball")
    view.keep_contents()
    topo = discover(view)
    added = dict(extra(topo)) if extra is not None else {}
    paths = set(view.accessed) | hwloc_paths(view)
    present = {(fn.vendor_id, fn.device_id) for fn in topo.pci.values()}
    replace = {
        path: trim_pci_ids(data.decode("utf-8", "replace"), present).encode()
        for path, data in (view.contents or {}).items()
        if path.endswith("/pci.ids")
    }
    count = write_recording(view, paths, out, scrub=scrub, replace=replace, extra=added)
    return topo, count
