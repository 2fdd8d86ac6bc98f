"""A fast reader for recorded tarballs: the whole archive in memory, headers parsed directly.

`tarfile` builds a rich object per member and costs over a second for a recording of 8,000
small sysfs files; a probe must not. Recordings are plain POSIX tar (ustar, with pax or GNU
long-name records when a path is long), so the reader handles exactly that, and anything else
(sparse files, devices, FIFOs) is skipped, since a host view never reads it.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Iterator

from xputune.errors import HostError

BLOCK = 512
_MAGICS = (
    (b"\x1f\x8b", gzip.decompress),
    (b"\xfd7zXZ\x00", lzma.decompress),
    (b"BZh", bz2.decompress),
)


def _decompress(raw: bytes, label: str) -> bytes:
    for magic, decompress in _MAGICS:
        if raw.startswith(magic):
            try:
                return decompress(raw)
            except (OSError, EOFError, lzma.LZMAError, ValueError) as exc:
                raise HostError(f"{label}: not a readable tarball ({exc})") from exc
    return raw


def _octal(field: bytes, label: str) -> int:
    text = field.split(b"\0", 1)[0].strip()
    if not text:
        return 0
    if field[0] & 0x80:  # GNU base-256 for large sizes
        return int.from_bytes(field[1:], "big")
    try:
        return int(text, 8)
    except ValueError:
        raise HostError(f"{label}: not a readable tarball (bad number {text!r})") from None


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax(data: bytes) -> dict[str, str]:
    """Records of a pax extended header: "LEN key=value\\n" each."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        length = int(data[pos:space])
        key, _, value = data[space + 1 : pos + length - 1].partition(b"=")
        out[key.decode()] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def iter_members(path: str) -> Iterator[tuple[str, str, bytes | str]]:
    """(name, kind, data or link target) per member; kind is "file", "dir" or "link"."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise HostError(f"{path}: cannot open ({exc.strerror or exc})") from exc
    data = memoryview(_decompress(raw, path))
    if len(data) < BLOCK or bytes(data[257:262]) != b"ustar":
        raise HostError(f"{path}: not a readable tarball (no ustar header)")
    pos = 0
    long_name: str | None = None
    long_link: str | None = None
    while pos + BLOCK <= len(data):
        header = bytes(data[pos : pos + BLOCK])
        if header == bytes(BLOCK):
            break  # end-of-archive marker
        if header[257:262] != b"ustar":
            raise HostError(f"{path}: not a readable tarball (bad header at byte {pos})")
        size = _octal(header[124:136], path)
        kind = header[156:157]
        body_start = pos + BLOCK
        body_end = body_start + size
        if body_end > len(data):
            raise HostError(f"{path}: not a readable tarball (truncated)")
        pos = body_start + -(-size // BLOCK) * BLOCK
        if kind in (b"x", b"L", b"K"):
            body = bytes(data[body_start:body_end])
            if kind == b"x":
                records = _pax(body)
                long_name = records.get("path", long_name)
                long_link = records.get("linkpath", long_link)
            elif kind == b"L":
                long_name = _text(body)
            else:
                long_link = _text(body)
            continue
        if kind == b"g":
            continue
        prefix = _text(header[345:500])
        name = long_name or (f"{prefix}/{_text(header[0:100])}" if prefix else _text(header[:100]))
        target = long_link or _text(header[157:257])
        long_name = long_link = None
        if kind in (b"0", b"\0", b"7"):
            yield name, "file", bytes(data[body_start:body_end])
        elif kind == b"5":
            yield name, "dir", b""
        elif kind == b"2":
            yield name, "link", target
