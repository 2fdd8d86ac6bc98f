"""Builders of hostile recordings and trees, made at test time so no binary blob is committed.

`tarfile` refuses to write most of what a hostile recording holds (a pax record of length 0, a
negative size), so headers are laid out by hand here, byte for byte as POSIX ustar has them.
"""

from __future__ import annotations

import gzip
import lzma
import os
import subprocess
import sys
import zlib
from pathlib import Path

BLOCK = 512
ZEROS = bytes(BLOCK)


def header(
    name: bytes,
    size: int = 0,
    kind: bytes = b"0",
    *,
    size_field: bytes | None = None,
    link: bytes = b"",
    magic: bytes = b"ustar\x0000",
) -> bytes:
    """One 512-byte ustar header with a correct checksum (so tarfile reads it too)."""
    h = bytearray(BLOCK)
    h[0 : len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = size_field if size_field is not None else b"%011o\0" % size
    h[136:148] = b"00000000000\0"
    h[148:156] = b" " * 8
    h[156:157] = kind
    h[157 : 157 + len(link)] = link
    h[257 : 257 + len(magic)] = magic
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def body(data: bytes) -> bytes:
    """Member data padded to whole blocks."""
    return data + bytes(-len(data) % BLOCK)


def member(name: bytes, data: bytes = b"", kind: bytes = b"0", **fields: bytes) -> bytes:
    return header(name, len(data), kind, **fields) + body(data)


def pax(records: bytes, kind: bytes = b"x") -> bytes:
    """A pax extended header carrying `records` verbatim (valid or not)."""
    return header(b"box/PaxHeader", len(records), kind) + body(records)


def record(key: bytes, value: bytes) -> bytes:
    """One well-formed pax record: its length counts its own digits."""
    rest = b" " + key + b"=" + value + b"\n"
    length = len(rest) + 1
    while len(b"%d" % length) + len(rest) != length:
        length += 1
    return b"%d" % length + rest


def archive(*members: bytes) -> bytes:
    """A small valid recording around `members`: top folder box/, end-of-archive marker."""
    return member(b"box/", kind=b"5") + b"".join(members) + ZEROS * 2


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def zero_bomb(path: Path, members: int, each: int, compress: str = "gz") -> str:
    """`members` files of `each` zero bytes, unpacking to members*each, in a tiny file.

    Each member's zeros are compressed once and repeated: concatenated gzip members (and xz
    streams) decompress to the concatenation, so the test never holds the unpacked bytes.
    """
    assert each % BLOCK == 0
    pack = gzip.compress if compress == "gz" else lzma.compress
    zeros = _compressed_zeros(each, compress)
    with open(path, "wb") as out:
        out.write(pack(member(b"box/", kind=b"5")))
        for n in range(members):
            out.write(pack(header(b"box/sys/zero%d" % n, each)))
            out.write(zeros)
        out.write(pack(ZEROS * 2))
    return str(path)


def _compressed_zeros(size: int, compress: str) -> bytes:
    """`size` zeros compressed a MiB at a time, so building a bomb stays small in memory."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31) if compress == "gz" else lzma.LZMACompressor()
    chunk = bytes(1 << 20)
    parts = []
    left = size
    while left:
        n = min(left, len(chunk))
        parts.append(packer.compress(chunk[:n]))
        left -= n
    parts.append(packer.flush())
    return b"".join(parts)


def peak_rss_mib(code: str, *args: str) -> tuple[int, str, float]:
    """Run `code` in a fresh interpreter: (exit code, stderr, its own peak RSS in MiB).

    The child reports its VmHWM itself: RUSAGE_CHILDREN keeps the largest child so far, which
    would let an earlier, bigger child of the test run mask this one.
    """
    wrapped = (
        "import atexit\n"
        "def _hwm():\n"
        "    with open('/proc/self/status') as fh:\n"
        "        kib = [ln.split()[1] for ln in fh if ln.startswith('VmHWM')][0]\n"
        "    print('VmHWM', kib)\n"
        "atexit.register(_hwm)\n" + code
    )
    proc = subprocess.run(
        [sys.executable, "-c", wrapped, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    kib = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("VmHWM")]
    return proc.returncode, proc.stderr, int(kib[-1]) / 1024 if kib else float("nan")
