"""A fast, bounded reader for recorded tarballs: streamed, headers parsed directly.

`tarfile` builds a rich object per member and costs over a second for a recording of 8,000
small sysfs files; a probe must not. Recordings are plain POSIX tar (ustar, with pax or GNU
long-name records when a path is long), so the reader handles exactly that.

A recording may come from an untrusted machine, so nothing it claims is trusted: the archive is
decompressed a chunk at a time and parsed as it streams, every number is checked before use,
and the caps below stop a decompression bomb after at most MAX_UNPACKED bytes. Every refusal is
one RecordingError line naming the file and what was wrong.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator

from xputune.errors import RecordingError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from typing import Any

BLOCK = 512
MiB = 1 << 20

# Caps. The bundled 8-card recordings hold ~8,500 members, compress to ~55 KB and unpack to
# ~7.4 MB (headers and padding included); a 16-card box with twice the NICs stays under 20 MB.
#: Headers of any kind; 64 MiB of tar holds at most 131,072 headers, so this is the tighter one.
MAX_MEMBERS = 100_000
#: Bytes of tar stream (headers, data, padding): ~9x the 8-card recordings.
MAX_UNPACKED = 64 * MiB
#: Bytes of the file as stored: a plain .tar is its unpacked size, and compression only shrinks.
MAX_INPUT = 64 * MiB
#: One pax or GNU long-name record set: a path is at most PATH_MAX (4 KiB) twice over.
MAX_HEADER = 64 * 1024
#: What an xz stream may ask the decoder for: xz -9 needs 65 MiB, a hostile header 4 GiB.
XZ_MEMLIMIT = 96 * MiB
#: Decompressed bytes per step: large enough to amortise calls, small next to the caps.
CHUNK = 1 * MiB

_ZERO_BLOCK = bytes(BLOCK)
_OCTAL = b"01234567"
_FILE_KINDS = (b"0", b"\0", b"7")
#: Types whose size field tarfile ignores: no data blocks follow them.
_NO_DATA = (b"1", b"2", b"3", b"4", b"5", b"6")
_OTHER = {
    b"3": "a character device",
    b"4": "a block device",
    b"6": "a FIFO",
    b"S": "a GNU sparse file",
}

Member = tuple[str, str, "bytes | str"]


def shown(name: str) -> str:
    """`name` as a message may print it: escaped when it holds control characters."""
    return name if name.isprintable() else ascii(name)[1:-1]


def _refuse(label: str, why: str) -> RecordingError:
    return RecordingError(f"{label}: not a readable tarball ({why})")


# -- bytes in ------------------------------------------------------------------------------------


def open_recording(path: str) -> int:
    """A descriptor on a regular file of at most MAX_INPUT bytes, without waiting on a FIFO."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise RecordingError(f"{path}: not a regular file (a socket)") from None
        raise RecordingError(f"{path}: cannot open ({exc.strerror or exc})") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordingError(f"{path}: not a regular file ({describe_mode(st.st_mode)})")
        if st.st_size > MAX_INPUT:
            raise RecordingError(f"{path}: larger than {MAX_INPUT // MiB} MiB")
    except BaseException:
        os.close(fd)
        raise
    return fd


def describe_mode(mode: int) -> str:
    """What a non-regular file is, for 'not a regular file (...)' messages."""
    for test, what in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return what
    return f"mode {mode:o}"


def _raw_chunks(fd: int, label: str) -> Callable[[], bytes]:
    """Reads of the stored file; refuses once it has grown past MAX_INPUT since fstat."""
    total = 0

    def read() -> bytes:
        nonlocal total
        try:
            data = os.read(fd, CHUNK)
        except OSError as exc:
            raise RecordingError(f"{label}: cannot read ({exc.strerror or exc})") from exc
        total += len(data)
        if total > MAX_INPUT:
            raise RecordingError(f"{label}: larger than {MAX_INPUT // MiB} MiB")
        return data

    return read


def _decompressor(fmt: str) -> Any:
    """A decompressor for `fmt`; each module is imported when a recording needs it (a probe of
    a folder, or of a recording already in the cache, decompresses nothing)."""
    import zlib

    if fmt == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if fmt == "xz":
        import lzma

        return lzma.LZMADecompressor(lzma.FORMAT_AUTO, memlimit=XZ_MEMLIMIT)
    import bz2

    return bz2.BZ2Decompressor()


def _sniff(head: bytes) -> str | None:
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"BZh"):
        return "bzip2"
    return None


def _inflate(first: bytes, read: Callable[[], bytes], fmt: str, label: str) -> Iterator[bytes]:
    """Decompressed chunks of at most CHUNK bytes, across concatenated streams.

    zlib keeps input it could not use in `unconsumed_tail`; lzma and bz2 keep it inside and say
    `needs_input`. Either way no call returns more than CHUNK, so memory stays bounded whatever
    the ratio.
    """
    is_zlib = fmt == "gzip"
    dec = _decompressor(fmt)
    pending, at_end = first, False
    errors: tuple[type[Exception], ...] = (OSError, EOFError, ValueError)
    if is_zlib:
        import zlib

        errors += (zlib.error,)
    elif fmt == "xz":
        import lzma

        errors += (lzma.LZMAError,)
    while True:
        if dec.eof:
            rest = (dec.unused_data + pending).lstrip(b"\0")  # padding between streams
            while not rest and not at_end:
                more = read()
                at_end = not more
                rest = more.lstrip(b"\0")
            if not rest:
                return
            dec, pending = _decompressor(fmt), rest
        if not pending and not at_end and (is_zlib or dec.needs_input):
            pending = read()
            at_end = not pending
        try:
            out = dec.decompress(pending, CHUNK)
        except errors as exc:
            if "Memory usage limit" in str(exc):
                why = f"the xz data needs more than {XZ_MEMLIMIT // MiB} MiB of memory"
                raise _refuse(label, why) from None
            raise _refuse(label, f"the {fmt} data is corrupt: {exc}") from None
        pending = dec.unconsumed_tail if is_zlib else b""
        if out:
            yield out
        elif at_end and not pending and not dec.eof and (is_zlib or dec.needs_input):
            raise _refuse(label, f"the {fmt} data is truncated")


def _chunks(path: str) -> Iterator[bytes]:
    """The tar stream of the recording at `path`, decompressed as it is read."""
    fd = open_recording(path)
    try:
        read = _raw_chunks(fd, path)
        first = read()
        if first.startswith(b"\x28\xb5\x2f\xfd"):
            raise RecordingError(
                f"{path}: compressed with zstd, which xputune does not read (use xz or gzip)"
            )
        fmt = _sniff(first)
        if fmt is None:
            if first:
                yield first
            yield from iter(read, b"")
        else:
            yield from _inflate(first, read, fmt, path)
    finally:
        os.close(fd)


class _Tape:
    """The tar stream, taken in order; refuses to go past MAX_UNPACKED before pulling more."""

    __slots__ = ("_buf", "_chunks", "_pos", "label", "offset")

    def __init__(self, chunks: Iterator[bytes], label: str) -> None:
        self._chunks = chunks
        self._buf = b""
        self._pos = 0
        self.offset = 0  # bytes of the tar stream taken so far
        self.label = label

    def _budget(self, n: int) -> None:
        if self.offset + n > MAX_UNPACKED:
            raise RecordingError(f"{self.label}: unpacks to more than {MAX_UNPACKED // MiB} MiB")

    def take(self, n: int) -> bytes:
        """The next `n` bytes, or fewer where the stream ends."""
        self._budget(n)
        buf, pos = self._buf, self._pos
        end = pos + n
        if end <= len(buf):
            self._pos = end
            self.offset += n
            return buf[pos:end]
        parts = [buf[pos:]]
        have = len(buf) - pos
        while have < n:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        joined = b"".join(parts)
        self.offset += min(n, len(joined))
        if len(joined) <= n:
            self._buf, self._pos = b"", 0
            return joined
        if n > CHUNK:  # keep only the leftover alive, not a second copy of a large member
            self._buf, self._pos = joined[n:], 0
        else:
            self._buf, self._pos = joined, n
        return joined[:n]

    def skip(self, n: int) -> int:
        """Drop the next `n` bytes without keeping them; returns how many there were."""
        self._budget(n)
        left = n
        while left:
            avail = len(self._buf) - self._pos
            if avail >= left:
                self._pos += left
                left = 0
                break
            left -= avail
            self._buf, self._pos = next(self._chunks, b""), 0
            if not self._buf:
                break
        self.offset += n - left
        return n - left


# -- headers -------------------------------------------------------------------------------------


def _number(field: bytes, what: str, label: str, at: int) -> int:
    """An octal (or GNU base-256) header field, refused unless it is a plain non-negative one."""
    if field[0] & 0x80:
        if field[0] != 0x80:
            raise _refuse(label, f"header at byte {at}: negative {what}")
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    if not text:
        return 0
    if text.translate(None, _OCTAL):
        raise _refuse(label, f"header at byte {at}: bad {what} {text!r}")
    return int(text, 8)


def _name(raw: bytes, label: str, at: int) -> str:
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse(label, f"header at byte {at}: name is not UTF-8 ({raw[:60]!r})") from None
    if "\0" in name:
        raise _refuse(label, f"header at byte {at}: name {shown(name)} holds a NUL byte")
    return name


def _field(raw: bytes, label: str, at: int) -> str:
    return _name(raw.split(b"\0", 1)[0], label, at)


def _pax(data: bytes, label: str, at: int) -> dict[bytes, bytes]:
    """Records of a pax extended header: "LEN key=value\\n" each, LEN counting the whole."""
    out: dict[bytes, bytes] = {}
    pos, end = 0, len(data)
    where = f"pax header at byte {at}"
    while pos < end:
        if data[pos] == 0:
            if data[pos:].strip(b"\0"):
                raise _refuse(label, f"{where}: stray bytes after a NUL")
            break  # NUL padding after the last record
        space = data.find(b" ", pos, pos + 21)
        digits = data[pos:space] if space > pos else b""
        if not digits.isdigit():
            raise _refuse(label, f"{where}: record length {data[pos : pos + 12]!r} is not a number")
        length = int(digits)
        if length <= len(digits) + 3:
            raise _refuse(label, f"{where}: record length {length} is too short")
        if pos + length > end:
            raise _refuse(label, f"{where}: record of {length} bytes runs past the end")
        if data[pos + length - 1] != 0x0A:
            raise _refuse(label, f"{where}: record does not end with a newline")
        key, eq, value = data[space + 1 : pos + length - 1].partition(b"=")
        if not eq or not key:
            raise _refuse(label, f"{where}: record has no key=value")
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            raise _refuse(label, f"{where}: key {key[:40]!r} is not UTF-8") from None
        out[key] = value
        pos += length
    return out


class _Pending:
    """What pax and GNU long-name headers say about the member that follows them."""

    __slots__ = ("link", "name", "size", "sparse")

    def __init__(self) -> None:
        self.name: str | None = None
        self.link: str | None = None
        self.size: int | None = None
        self.sparse = False

    def apply_pax(self, records: dict[bytes, bytes], label: str, at: int) -> None:
        if b"path" in records:
            self.name = _name(records[b"path"], label, at)
        if b"linkpath" in records:
            self.link = _name(records[b"linkpath"], label, at)
        if b"size" in records:
            size = records[b"size"]
            if not size.isdigit():
                raise _refuse(label, f"pax header at byte {at}: bad size {size[:20]!r}")
            self.size = int(size)
        if any(key.startswith(b"GNU.sparse.") for key in records):
            self.sparse = True


def _meta_body(tape: _Tape, size: int, label: str, at: int) -> bytes:
    if size > MAX_HEADER:
        raise _refuse(label, f"pax header at byte {at} is larger than {MAX_HEADER} bytes")
    data = tape.take(size)
    if len(data) < size:
        raise _refuse(label, f"header at byte {at}: truncated")
    tape.skip(-size % BLOCK)
    return data


def _header(tape: _Tape, count: int, label: str) -> tuple[bytes, int] | None:
    """The next member header and its offset; None at the end of the archive."""
    at = tape.offset
    header = tape.take(BLOCK)
    if len(header) < BLOCK:
        if not header and count:
            return None  # ends on a block boundary without the marker: tarfile reads it too
        if not count:
            raise _refuse(label, "no ustar header")
        raise _refuse(label, f"truncated at byte {at}")
    if header == _ZERO_BLOCK:
        if not count:
            raise _refuse(label, "no ustar header")
        return None
    if header[257:262] != b"ustar":
        raise _refuse(label, "no ustar header" if not count else f"bad header at byte {at}")
    if count >= MAX_MEMBERS:
        raise RecordingError(f"{label}: more than {MAX_MEMBERS} members")
    return header, at


def iter_members(path: str) -> Iterator[Member]:
    """(name, kind, payload) per member, in archive order.

    kind is "file" (payload: its bytes), "dir", "link" (payload: the target), "hardlink"
    (payload: the member it repeats) or "other" (payload: what it is, e.g. "a FIFO").
    """
    tape = _Tape(_chunks(path), path)
    pending = _Pending()
    count = 0
    while (found := _header(tape, count, path)) is not None:
        header, at = found
        count += 1
        kind = header[156:157]
        size = _number(header[124:136], "size", path, at)
        if kind in (b"x", b"g", b"L", b"K"):
            body = _meta_body(tape, size, path, at)
            if kind == b"x":
                pending.apply_pax(_pax(body, path, at), path, at)
            elif kind == b"g":
                _pax(body, path, at)  # checked, then ignored: nothing a view needs
            elif kind == b"L":
                pending.name = _field(body, path, at)
            else:
                pending.link = _field(body, path, at)
            continue
        yield _member(tape, header, at, kind, size, pending, path)
        pending = _Pending()


def _member(
    tape: _Tape, header: bytes, at: int, kind: bytes, size: int, pending: _Pending, label: str
) -> Member:
    if pending.size is not None:
        size = pending.size
    name = pending.name or _ustar_name(header, label, at)
    has_data = kind not in _NO_DATA
    if kind in _FILE_KINDS and not pending.sparse:
        data = tape.take(size)
        if len(data) < size:
            raise _refuse(label, f"member {shown(name)} is truncated")
        tape.skip(-size % BLOCK)
        if kind == b"\0" and name.endswith("/"):
            return name, "dir", b""  # pre-POSIX tar marked directories this way
        return name, "file", data
    if has_data:
        tape.skip(size + (-size % BLOCK))
    if kind == b"5":
        return name, "dir", b""
    if kind in (b"1", b"2"):
        target = pending.link if pending.link is not None else _field(header[157:257], label, at)
        return name, "link" if kind == b"2" else "hardlink", target
    what = "a GNU sparse file" if pending.sparse else _OTHER.get(kind)
    return name, "other", what or f"an entry of tar type {kind!r}"


def _ustar_name(header: bytes, label: str, at: int) -> str:
    name = _field(header[0:100], label, at)
    if header[257:263] == b"ustar\0":  # POSIX: a prefix field; GNU keeps times there
        prefix = _field(header[345:500], label, at)
        if prefix:
            return f"{prefix}/{name}"
    return name
