"""Host views for fault injection: they behave like DirView and fail or lie on purpose."""

from __future__ import annotations

import struct

from xputune.errors import HostError
from xputune.host.view import DirView


class FailingView(DirView):
    """Raises on the k-th write (1-based) once; every other write goes through."""

    def __init__(self, root: str, fail_at: int) -> None:
        super().__init__(root)
        self.fail_at = fail_at
        self.writes = 0

    def write_bytes(self, path: str, data: bytes, offset: int | None = None) -> None:
        self.writes += 1
        if self.writes == self.fail_at:
            raise HostError(f"injected write failure #{self.writes} at {path}")
        super().write_bytes(path, data, offset)


class HardwiredView(DirView):
    """Config-space writes lose the bits in `zero_bits` at `offset` of the listed files, the
    way a device that does not implement them behaves (reads back 0)."""

    def __init__(self, root: str, paths: set[str], offset: int, zero_bits: int) -> None:
        super().__init__(root)
        self.paths = paths
        self.offset = offset
        self.zero_bits = zero_bits

    def write_bytes(self, path: str, data: bytes, offset: int | None = None) -> None:
        if path in self.paths and offset == self.offset and len(data) == 2:
            (word,) = struct.unpack("<H", data)
            data = struct.pack("<H", word & ~self.zero_bits)
        super().write_bytes(path, data, offset)


class LiveLikeView(DirView):
    """Says it is the live host (for the root and remount paths) but reads the tree."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.live = True
        self.label = f"live-like {root}"

    def _fs(self, host_path: str) -> str:
        return self.root + host_path

    def _realpath(self, path: str) -> str:
        return self._confined_realpath(path)
