"""Record a host: probe it, then write exactly what the probe read (see host/record.py).

Files that are no part of the host tree (the vendor tools' outputs that `record` saves under
xputune/vendor/, see devices/vendor_files.py) come from the caller through `extra`, which is
given the discovered topology (so only the tools of vendors present are run) and returns host
path -> bytes. This layer only writes them; it never runs a tool.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
from collections.abc import Callable, Mapping

from xputune.errors import HostError
from xputune.host import HostView
from xputune.host.record import _top_name, hwloc_paths, write_recording
from xputune.host.view import DirView
from xputune.topology.discover import discover
from xputune.topology.ids import trim_pci_ids
from xputune.topology.model import Topology

Extra = Callable[[Topology], Mapping[str, bytes]]
_MODES = {".gz": "w:gz", ".tgz": "w:gz", ".bz2": "w:bz2", ".xz": "w:xz"}


def record(
    view: HostView, out: str, *, scrub: bool = True, extra: Extra | None = None
) -> tuple[Topology, int]:
    """Write a recording of `view` to `out`; returns what the probe saw and the entry count.

    File contents are taken as the probe read them, so a live file that changes between
    reads (free memory) replays exactly as probed. pci.ids is cut down to the IDs present.
    `extra(topo)` adds files at host paths (absolute, e.g. /xputune/vendor/x.txt): one that
    the tree holds already gets the new content, the others are added to the archive.
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
    inject: dict[str, bytes] = {}
    for path, data in added.items():
        if not view.live and view.exists(path):
            paths.add(path)
            replace[path] = data
        else:
            inject[path] = data
    if not inject:
        return topo, write_recording(view, paths, out, scrub=scrub, replace=replace)
    return topo, _write_with(view, paths, out, scrub, replace, inject)


def _write_with(
    view: DirView,
    paths: set[str],
    out: str,
    scrub: bool,
    replace: dict[str, bytes],
    inject: Mapping[str, bytes],
) -> int:
    """write_recording, plus files at paths the tree does not hold (added after its members,
    parents first). The tree goes to an uncompressed temporary tar first, then is compressed
    once into `out` with the additions."""
    top = _top_name(out)
    plain = f"{out}.tmp-{os.getpid()}.tar"
    final = f"{out}.tmp-{os.getpid()}"
    mode = _MODES.get(os.path.splitext(out)[1], "w")
    try:
        count = write_recording(view, paths, plain, scrub=scrub, top=top, replace=replace)
        with tarfile.open(plain) as src, tarfile.open(final, mode) as dst:
            names: set[str] = set()
            mtime = 0
            for member in src:
                names.add(member.name)
                mtime = member.mtime
                dst.addfile(member, src.extractfile(member) if member.isreg() else None)
            for path in sorted(inject):
                if top + path in names:
                    continue  # the tree holds it after all (a live host's own file): kept
                parents = []
                parent = posixpath.dirname(path)
                while parent != "/":
                    parents.append(parent)
                    parent = posixpath.dirname(parent)
                for folder in reversed(parents):
                    if top + folder not in names:
                        info = tarfile.TarInfo(top + folder)
                        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
                        dst.addfile(info)
                        names.add(info.name)
                        count += 1
                info = tarfile.TarInfo(top + path)
                info.size, info.mode, info.mtime = len(inject[path]), 0o444, mtime
                dst.addfile(info, io.BytesIO(inject[path]))
                names.add(info.name)
                count += 1
        os.replace(final, out)
    except (OSError, tarfile.TarError) as exc:
        if os.path.exists(final):
            os.unlink(final)
        raise HostError(f"cannot write {out}: {getattr(exc, 'strerror', None) or exc}") from exc
    finally:
        if os.path.exists(plain):
            os.unlink(plain)
    return count
