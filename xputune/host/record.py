"""Write a recording of a host: a tarball in hwloc-gather-topology's layout.

The recording holds exactly the files a probe read (the view remembers them) plus the NUMA and
CPU files hwloc's gather records, so `lstopo --input` can read it too. Symlinks are kept as
symlinks, directories that were listed keep their symlink and subdirectory entries, and sysfs
files are stored with their real length (sysfs reports 4096 for every attribute).
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import stat
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass

from xputune.errors import HostError
from xputune.host.view import DirView

# Files whose content identifies a machine or a person; replaced unless --no-scrub.
SCRUBBED_NAMES = frozenset(
    {
        "address",
        "perm_addr",
        "broadcast",
        "serial",
        "serial_number",
        "board_serial",
        "product_serial",
        "product_uuid",
        "chassis_serial",
        "node_guid",
        "sys_image_guid",
        "port_guid",
        "phys_port_id",
        "phys_switch_id",
        "hostname",
        "machine-id",
    }
)
SCRUB_TEXT = b"scrubbed\n"
_HWLOC_NODE_FILES = ("cpumap", "cpulist", "meminfo", "distance", "numastat")
_HWLOC_CPU_TOPOLOGY = re.compile(r"^cpu\d+$")


@dataclass
class _Entry:
    kind: str  # file, dir, link
    data: bytes = b""
    target: str = ""


def hwloc_paths(view: DirView) -> set[str]:
    """The NUMA/CPU files hwloc-gather-topology records, so lstopo can replay the recording."""
    paths = {
        "/proc/cpuinfo",
        "/proc/meminfo",
        "/proc/mounts",
        "/proc/cmdline",
        "/sys/devices/system/cpu/online",
        "/sys/devices/system/cpu/possible",
        "/sys/devices/system/cpu/present",
        "/sys/devices/system/node/online",
        "/sys/devices/system/node/possible",
    }
    for entry in view.listdir("/sys/devices/system/node"):
        if entry.startswith("node") and entry[4:].isdigit():
            base = f"/sys/devices/system/node/{entry}"
            paths.update(f"{base}/{name}" for name in _HWLOC_NODE_FILES)
    for entry in view.listdir("/sys/devices/system/cpu"):
        if _HWLOC_CPU_TOPOLOGY.match(entry):
            base = f"/sys/devices/system/cpu/{entry}/topology"
            paths.update(f"{base}/{name}" for name in view.listdir(base))
    return paths


class _Capture:
    def __init__(self, view: DirView, scrub: bool) -> None:
        self.view = view
        self.scrub = scrub
        self.entries: dict[str, _Entry] = {"/": _Entry("dir")}

    def _fs(self, host_path: str) -> str:
        return host_path if self.view.live else self.view.root + host_path

    def _resolve(self, path: str) -> str | None:
        """Resolve like the kernel, recording every directory and symlink on the way."""
        parts = [p for p in path.split("/") if p]
        resolved = "/"
        hops = 0
        while parts:
            part = parts.pop(0)
            if part in (".", ""):
                continue
            if part == "..":
                resolved = posixpath.dirname(resolved)
                continue
            candidate = posixpath.join(resolved, part)
            try:
                st = os.lstat(self._fs(candidate))
            except OSError:
                return None
            if stat.S_ISLNK(st.st_mode) and candidate == "/proc/self":
                # Store /proc/self as a plain folder, as hwloc's gather does: no pid in it.
                self.entries[candidate] = _Entry("dir")
                resolved = candidate
                continue
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > 40:
                    return None
                target = os.readlink(self._fs(candidate))
                self.entries[candidate] = _Entry("link", target=target)
                if target.startswith("/"):
                    resolved = "/"
                parts = [p for p in target.split("/") if p] + parts
                continue
            if stat.S_ISDIR(st.st_mode):
                self.entries.setdefault(candidate, _Entry("dir"))
            resolved = candidate
        return resolved

    def add(self, path: str, seen: bytes | None = None) -> None:
        """Capture `path`; `seen` is its content as the probe read it (live files change)."""
        real = self._resolve(path)
        if real is None:
            return
        fs = self._fs(real)
        try:
            st = os.stat(fs)
        except OSError:
            return
        if stat.S_ISDIR(st.st_mode):
            self._add_listing(real)
        elif stat.S_ISREG(st.st_mode):
            if seen is not None:
                data = seen
            else:
                try:
                    with open(fs, "rb") as fh:
                        data = fh.read()
                except OSError:
                    return  # unreadable attributes (e.g. speed of a down link) stay absent
            if self.scrub and posixpath.basename(real) in SCRUBBED_NAMES:
                data = SCRUB_TEXT
            self.entries[real] = _Entry("file", data=data)

    def _add_listing(self, real: str) -> None:
        """Keep a listed directory's symlinks and subdirectories so listings replay alike."""
        fs = self._fs(real)
        try:
            names = os.listdir(fs)
        except OSError:
            return
        for name in names:
            child = posixpath.join(real, name)
            try:
                st = os.lstat(os.path.join(fs, name))
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                self.entries.setdefault(
                    child, _Entry("link", target=os.readlink(os.path.join(fs, name)))
                )
            elif stat.S_ISDIR(st.st_mode):
                self.entries.setdefault(child, _Entry("dir"))


def write_recording(
    view: DirView,
    paths: set[str],
    out: str,
    *,
    scrub: bool = True,
    top: str | None = None,
    replace: Mapping[str, bytes] | None = None,
    extra: Mapping[str, bytes] | None = None,
) -> int:
    """Write `paths` (as read through `view`) to the tarball `out`; returns the member count.

    `replace` substitutes the content of some files (e.g. pci.ids cut down to the IDs present);
    `extra` adds files at host paths whether or not the tree holds them (the vendor tools'
    outputs that `record` saves beside sys/ and proc/).
    """
    capture = _Capture(view, scrub)
    seen = view.contents or {}
    for path in sorted(paths):
        capture.add(path, seen.get(path))
    for path, data in (replace or {}).items():
        if path in capture.entries and capture.entries[path].kind == "file":
            capture.entries[path] = _Entry("file", data=data)
    for path, data in (extra or {}).items():
        capture.entries[path] = _Entry("file", data=data)
    top = top or _top_name(out)
    mode = {".gz": "w:gz", ".tgz": "w:gz", ".bz2": "w:bz2", ".xz": "w:xz"}.get(
        os.path.splitext(out)[1], "w"
    )
    # Parents must exist in the archive before their children for every extractor.
    for path in list(capture.entries):
        parent = posixpath.dirname(path)
        while parent != "/" and parent not in capture.entries:
            capture.entries[parent] = _Entry("dir")
            parent = posixpath.dirname(parent)
    now = int(time.time())
    tmp = f"{out}.tmp-{os.getpid()}"
    try:
        with tarfile.open(tmp, mode) as tar:
            for path in sorted(capture.entries):
                entry = capture.entries[path]
                info = tarfile.TarInfo(top + path if path != "/" else top)
                info.mtime = now
                if entry.kind == "dir":
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                elif entry.kind == "link":
                    info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry.target, 0o777
                    tar.addfile(info)
                else:
                    info.size, info.mode = len(entry.data), 0o444
                    tar.addfile(info, io.BytesIO(entry.data))
        os.replace(tmp, out)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise HostError(f"cannot write {out}: {exc.strerror or exc}") from exc
    return len(capture.entries)


def _top_name(out: str) -> str:
    name = os.path.basename(out)
    for suffix in (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".tar"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or "host"
    return name or "host"
