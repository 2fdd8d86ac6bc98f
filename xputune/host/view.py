"""Root-confined access to a host's /sys and /proc.

Paths given to a view are host paths ("/sys/bus/pci/devices/0000:13:00.0/vendor"), whatever the
root. A view refuses to follow a symlink out of its root and reports loops, so a recording from
an untrusted machine can be probed safely. Every path read is remembered in `accessed`, which is
how `xputune record` captures exactly what the probe reads.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import NamedTuple

from xputune.errors import HostError, RootEscapeError
from xputune.host.tarread import iter_members

MAX_SYMLINKS = 40  # the kernel's own limit (MAXSYMLINKS)


class HostView(ABC):
    """Read (and, where the root allows it, write) files of one host by host path."""

    #: Human-readable description of the root, used in messages.
    label: str
    #: True for the machine this process runs on.
    live: bool = False

    def __init__(self) -> None:
        self.accessed: set[str] = set()
        #: Contents as read, kept only when a recording is being made (see keep_contents).
        self.contents: dict[str, bytes] | None = None

    def keep_contents(self) -> None:
        """Remember every file's bytes as read, so a recording holds exactly what was seen."""
        self.contents = {}

    # -- primitives each backend provides ---------------------------------------------------
    def realpath(self, path: str) -> str:
        """The host path `path` resolves to; raises RootEscapeError or HostError on a loop."""
        self.accessed.add(path)
        return self._realpath(path)

    @abstractmethod
    def _realpath(self, path: str) -> str: ...

    @abstractmethod
    def _read(self, real: str) -> bytes: ...

    @abstractmethod
    def _listdir(self, real: str) -> list[str]: ...

    @abstractmethod
    def _kind(self, real: str) -> str | None:
        """'file', 'dir', 'link' or None (missing) for an already-resolved path."""

    # -- conveniences shared by all backends ------------------------------------------------
    def exists(self, path: str) -> bool:
        try:
            return self._kind(self.realpath(path)) is not None
        except FileNotFoundError:
            return False

    def is_dir(self, path: str) -> bool:
        try:
            return self._kind(self.realpath(path)) == "dir"
        except FileNotFoundError:
            return False

    def read_bytes(self, path: str) -> bytes:
        """The whole file; FileNotFoundError when missing, HostError when unreadable."""
        self.accessed.add(path)
        real = self.realpath(path)
        try:
            data = self._read(real)
            if self.contents is not None:
                self.contents[path] = data
            return data
        except PermissionError as exc:
            raise HostError(f"{self.label}: permission denied reading {path}") from exc
        except IsADirectoryError as exc:
            raise HostError(f"{self.label}: {path} is a directory, expected a file") from exc
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise HostError(f"{self.label}: cannot read {path}: {exc.strerror}") from exc

    def read_text(self, path: str) -> str:
        """The file as text with surrounding whitespace removed, as sysfs attributes are read."""
        data = self.read_bytes(path)
        try:
            return data.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise HostError(f"{self.label}: {path} is not text") from exc

    def read_optional(self, path: str) -> str | None:
        """Like read_text, but None when the file does not exist (attributes vary by kernel)."""
        try:
            return self.read_text(path)
        except FileNotFoundError:
            self.accessed.add(path)
            return None

    def listdir(self, path: str) -> list[str]:
        """Sorted entries of a directory; [] when it does not exist."""
        self.accessed.add(path)
        try:
            real = self.realpath(path)
            return sorted(self._listdir(real))
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            return []
        except PermissionError as exc:
            raise HostError(f"{self.label}: permission denied listing {path}") from exc

    def link_name(self, path: str) -> str | None:
        """Last component of a symlink's target (a driver's or iommu group's name), or None."""
        self.accessed.add(path)
        try:
            return posixpath.basename(self.realpath(path))
        except FileNotFoundError:
            return None

    def write_bytes(self, path: str, data: bytes, offset: int | None = None) -> None:
        raise HostError(f"{self.label} is read-only; extract it to a directory to change it")

    def writable(self) -> bool:
        return False


class DirView(HostView):
    """A host rooted at a directory: the live machine ("/") or an extracted recording."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = os.path.realpath(root)
        self.live = self.root == "/"
        self.label = "this host" if self.live else root
        self._real_cache: dict[str, str] = {}

    def _fs(self, host_path: str) -> str:
        return host_path if self.live else self.root + host_path

    def _realpath(self, path: str) -> str:
        if not path.startswith("/"):
            raise HostError(f"host paths are absolute, got {path!r}")
        cached = self._real_cache.get(path)
        if cached is not None:
            return cached
        real = os.path.realpath(path) if self.live else self._confined_realpath(path)
        self._real_cache[path] = real
        return real

    def _confined_realpath(self, path: str) -> str:
        """Resolve so that `..` and absolute targets cannot escape the root.

        Each prefix is resolved once and remembered, so the attributes of one device cost one
        lstat each instead of one per path component.
        """
        return self._resolve(path.rstrip("/") or "/", path, [0])

    def _resolve(self, path: str, original: str, hops: list[int]) -> str:
        cached = self._real_cache.get(path)
        if cached is not None:
            return cached
        head, _, name = path.rpartition("/")
        base = self._resolve(head, original, hops) if head else "/"
        if name in ("", "."):
            result = base
        elif name == "..":
            if base == "/":
                raise RootEscapeError(f"{self.label}: {original} leads outside the root")
            result = posixpath.dirname(base)
        else:
            candidate = base.rstrip("/") + "/" + name
            try:
                st = os.lstat(self.root + candidate)
            except (FileNotFoundError, NotADirectoryError):
                raise FileNotFoundError(errno.ENOENT, "no such file", original) from None
            if stat.S_ISLNK(st.st_mode):
                hops[0] += 1
                if hops[0] > MAX_SYMLINKS:
                    raise HostError(f"{self.label}: symlink loop at {original}")
                target = os.readlink(self.root + candidate)
                if target.startswith("/"):
                    raise RootEscapeError(
                        f"{self.label}: symlink {candidate} -> {target} points outside the root"
                    )
                result = self._resolve(
                    (base.rstrip("/") + "/" + target).rstrip("/") or "/", original, hops
                )
            else:
                result = candidate
        self._real_cache[path] = result
        return result

    def _read(self, real: str) -> bytes:
        with open(self._fs(real), "rb") as fh:
            return fh.read()

    def _listdir(self, real: str) -> list[str]:
        return os.listdir(self._fs(real))

    def _kind(self, real: str) -> str | None:
        try:
            st = os.lstat(self._fs(real))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        if stat.S_ISLNK(st.st_mode):
            return "link"
        return "file"

    def writable(self) -> bool:
        return True

    def write_bytes(self, path: str, data: bytes, offset: int | None = None) -> None:
        """Write through the root; `offset` writes in place (config space), else truncates."""
        real = self.realpath(path)
        fs = self._fs(real)
        try:
            if offset is None:
                with open(fs, "r+b" if self.live else "wb") as fh:
                    fh.write(data)
            else:
                fd = os.open(fs, os.O_WRONLY)
                try:
                    written = os.pwrite(fd, data, offset)
                finally:
                    os.close(fd)
                if written != len(data):
                    raise HostError(f"{self.label}: short write to {path} at {offset:#x}")
        except PermissionError as exc:
            raise HostError(f"{self.label}: permission denied writing {path}") from exc
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise HostError(f"{self.label}: cannot write {path}: {exc.strerror}") from exc
        self.accessed.add(path)


class _Member(NamedTuple):
    kind: str  # "file", "dir" or "link"
    data: bytes = b""
    target: str = ""


_DIR = _Member("dir")


class TarView(HostView):
    """A recorded tarball read into memory: one top folder acts as the filesystem root."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.label = path
        self._members: dict[str, _Member] = {"/": _Member("dir")}
        self._children: dict[str, set[str]] = {"/": set()}
        self._load(iter_members(path))

    def _load(self, members: Iterable[tuple[str, str, bytes | str]]) -> None:
        top: str | None = None
        add = self._add
        for raw_name, kind, payload in members:
            name = raw_name[2:] if raw_name.startswith("./") else raw_name
            name = name.rstrip("/")
            if not name:
                continue
            first, _, rel = name.partition("/")
            if top is None:
                top = first
            elif first != top:
                raise HostError(f"{self.label}: expected one top folder, found {top} and {first}")
            if "." in rel and any(p in (".", "..") for p in rel.split("/")):
                if ".." in rel.split("/"):
                    raise RootEscapeError(f"{self.label}: member {raw_name} leads outside the root")
                rel = "/".join(p for p in rel.split("/") if p != ".")
            host_path = "/" + rel if rel else "/"
            if kind == "file":
                add(host_path, _Member("file", data=payload))  # type: ignore[arg-type]
            elif kind == "link":
                add(host_path, _Member("link", target=payload))  # type: ignore[arg-type]
            else:
                add(host_path, _Member("dir"))
        if top is None:
            raise HostError(f"{self.label}: the tarball is empty")

    def _add(self, host_path: str, member: _Member) -> None:
        members, children = self._members, self._children
        members[host_path] = member
        child = host_path
        while child != "/":
            parent, _, name = child.rpartition("/")
            parent = parent or "/"
            kids = children.get(parent)
            if kids is None:
                kids = children[parent] = set()
            elif name in kids:
                break  # already linked, and so are its ancestors
            kids.add(name)
            if parent not in members:
                members[parent] = _DIR
            child = parent

    def _realpath(self, path: str) -> str:
        if not path.startswith("/"):
            raise HostError(f"host paths are absolute, got {path!r}")
        parts = [p for p in path.split("/") if p]
        resolved = "/"
        follows = 0
        while parts:
            part = parts.pop(0)
            if part == ".":
                continue
            if part == "..":
                if resolved == "/":
                    raise RootEscapeError(f"{self.label}: {path} leads outside the root")
                resolved = posixpath.dirname(resolved)
                continue
            candidate = posixpath.join(resolved, part)
            member = self._members.get(candidate)
            if member is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            if member.kind != "link":
                resolved = candidate
                continue
            follows += 1
            if follows > MAX_SYMLINKS:
                raise HostError(f"{self.label}: symlink loop at {path}")
            if member.target.startswith("/"):
                raise RootEscapeError(
                    f"{self.label}: symlink {candidate} -> {member.target} points outside the root"
                )
            parts = [p for p in member.target.split("/") if p] + parts
        return resolved

    def _read(self, real: str) -> bytes:
        member = self._members[real]
        if member.kind == "dir":
            raise IsADirectoryError(real)
        return member.data

    def _listdir(self, real: str) -> list[str]:
        if self._members[real].kind != "dir":
            raise NotADirectoryError(real)
        return list(self._children.get(real, ()))

    def _kind(self, real: str) -> str | None:
        member = self._members.get(real)
        return member.kind if member else None


__all__ = ["DirView", "HostView", "TarView"]
