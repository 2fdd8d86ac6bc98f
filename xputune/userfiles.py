"""Files a user names on the command line (a model's config.json, tables of measurements, a
trace, probe documents, a saved vendor output), opened with one clear line for each way that
fails, and read within a bound.

xputune runs as root and trusts nothing it did not write itself. A path on the command line
may name a FIFO nobody writes to (a read blocks forever), a device (/dev/zero never ends), a
socket, or a regular file a thousand times larger than any real one of its kind. So a path is
opened with O_PATH (nothing that it names is opened yet), checked with fstat on that
descriptor (never a check-then-open by path), refused unless it is a regular file, then opened
for reading through that same descriptor (O_NONBLOCK|O_NOCTTY), and read only up to a cap for
its kind. JSON is read
strictly: NaN and Infinity are not JSON, nor is a number beyond a double's range, and nesting
too deep for the parser is one line, not a RecursionError. Data read from such a file is shown
through printable() wherever a message quotes it.

The commands and the launcher read these; plan/ stays pure and gets their contents. Like
errors.py this sits below every layer and imports none of them.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import stat

from xputune import trail
from xputune.errors import XputuneError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~2 ms of start-up)
if TYPE_CHECKING:  # pathlib costs a probe ~4 ms of start-up (it imports urllib, ipaddress)
    from collections.abc import Callable, Iterator
    from pathlib import Path
    from typing import Any, BinaryIO

#: Caps on the whole file, per kind: far above any real file of the kind (they refuse junk,
#: not data). A trace has no cap on the whole, it is streamed; plan/traces.py bounds its lines.
TEXT_MAX = 16 << 20  # any text file with no cap of its own (CSV tables of measurements)
CONFIG_MAX = 4 << 20  # a model's config.json: real ones are a few KiB
DOCUMENT_MAX = 4 << 20  # one probe or check JSON document: about 50 KiB for 8 cards
PROFILE_MAX = 1 << 20  # a tuning profile (YAML): a few KiB

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def printable(text: str) -> str:
    """`text` with every character that is not printable escaped (\\x1b, \\u202e, \\n...):
    what a message or a table may show of data without a terminal acting on it."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _shown(path: Path | str) -> str:
    return printable(str(path))


def size_text(n: int) -> str:
    """A cap as a message states it: 16 MiB, 4 KiB, else 1,000 bytes (never rounded)."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and not n % (1 << shift):
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def _too_large(path: Path | str, what: str, limit: int) -> XputuneError:
    return XputuneError(f"{what} too large: {_shown(path)} (more than {size_text(limit)})")


def _refusal(exc: OSError, path: Path | str, what: str) -> XputuneError:
    if exc.errno == errno.ENAMETOOLONG:  # the name itself is the fault: not echoed whole
        head = _shown(str(path)[:40])
        return XputuneError(
            f"{what} not readable: its path is too long ({len(str(path)):,} characters; "
            f"it starts {head}...)"
        )
    shown = _shown(path)
    if isinstance(exc, FileNotFoundError):
        return XputuneError(f"{what} not found: {shown}")
    if isinstance(exc, IsADirectoryError):
        return XputuneError(f"{what} is a directory: {shown}")
    if isinstance(exc, PermissionError):
        return XputuneError(f"{what} not readable (permission denied): {shown}")
    if exc.errno == errno.ENXIO:  # opening a socket (or a device without its driver)
        return XputuneError(f"{what} is a socket or a device, not a regular file: {shown}")
    return XputuneError(f"{what} not readable: {shown} ({exc.strerror or exc})")


class _Capped(io.RawIOBase):
    """A binary stream that refuses (one line) to give more than `limit` bytes in all: what a
    streamed reader (the XML form of smi, stdin) reads through."""

    def __init__(self, raw: Any, limit: int, path: Path | str, what: str, own: bool) -> None:
        super().__init__()
        self._raw, self._limit, self._path, self._what = raw, limit, path, what
        self._own = own  # closing this closes `raw`
        self._seen = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer) or 0
        self._seen += n
        if self._seen > self._limit:
            raise _too_large(self._path, self._what, self._limit)
        return n

    def close(self) -> None:
        if not self.closed and self._own:
            self._raw.close()
        super().close()


def bounded(stream: Any, what: str, limit: int, name: str = "stdin") -> BinaryIO:
    """`stream` (stdin's buffer) read through a cap of `limit` bytes in all; closing what
    this returns leaves `stream` open."""
    return io.BufferedReader(_Capped(stream, limit, name, what, own=False))


_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _open_regular(path: Path, what: str) -> int:
    """A descriptor open for reading on the regular file at `path`, or one line saying what
    it is instead. Where Linux has O_PATH the path is first opened without opening what it
    names (a device's driver never sees an open: /dev/watchdog is not armed, a tape is not
    rewound, a FIFO does not wait), checked with fstat, and only a regular file is opened
    again, through that descriptor (/proc/self/fd), so no rename in between can swap it."""
    trail.user_file(what, path)
    o_path = getattr(os, "O_PATH", 0)
    try:
        fd = os.open(path, (o_path or _READ) | os.O_CLOEXEC)
    except OSError as exc:
        raise _refusal(exc, path, what) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise XputuneError(f"{what} is a directory: {_shown(path)}")
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "something else")
            raise XputuneError(f"{what} is {kind}, not a regular file: {_shown(path)}")
        if not o_path:
            return fd
        try:
            readable = os.open(f"/proc/self/fd/{fd}", _READ)
        except FileNotFoundError:  # no /proc: open the path, and check it is the same file
            readable = _same_file(path, what, info)
        except OSError as exc:
            raise _refusal(exc, path, what) from None
    except BaseException:
        if not o_path:  # the descriptor that would have been handed out
            os.close(fd)
        raise
    finally:
        if o_path:
            os.close(fd)
    return readable


def _same_file(path: Path, what: str, info: os.stat_result) -> int:
    try:
        fd = os.open(path, _READ)
    except OSError as exc:
        raise _refusal(exc, path, what) from None
    now = os.fstat(fd)
    if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino) or not stat.S_ISREG(now.st_mode):
        os.close(fd)
        raise XputuneError(f"{what} changed while it was opened: {_shown(path)}")
    return fd


def open_binary(path: Path, what: str, limit: int | None = None) -> BinaryIO:
    """The file, open for reading bytes (buffered: peek works). Refused, naming it, unless it
    is a regular file (see _open_regular), and when it holds more than `limit` bytes (checked
    on open and again while it is read, as a file may grow); None: no cap on the whole (a
    streamed trace)."""
    fd = _open_regular(path, what)
    try:
        if limit is not None and os.fstat(fd).st_size > limit:
            raise _too_large(path, what, limit)
        os.set_blocking(fd, True)
        raw = io.FileIO(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    if limit is None:
        return io.BufferedReader(raw)
    return io.BufferedReader(_Capped(raw, limit, path, what, own=True))


def read_bytes(path: Path, what: str, limit: int = TEXT_MAX) -> bytes:
    """The whole file, at most `limit` bytes (else one line saying so)."""
    with open_binary(path, what, limit) as fh:
        try:
            return fh.read()
        except OSError as exc:
            raise _refusal(exc, path, what) from None


def read_text(path: Path, what: str, limit: int = TEXT_MAX) -> str:
    """The file as UTF-8 text, at most `limit` bytes, line ends read as text mode reads them
    (\r\n and a lone \r become \n)."""
    try:
        text = read_bytes(path, what, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise XputuneError(f"{what} is not UTF-8 text: {_shown(path)}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def read_lines(path: Path, what: str, limit: int = TEXT_MAX) -> list[str]:
    return io.StringIO(read_text(path, what, limit)).readlines()  # split at newlines only


# -------------------------------------------------------------------------------- traces

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_FEED = 1024  # compressed bytes given to the zstd decoder at a time


class CountingReader:
    """A binary file that reports each read's size to `advance` (for progress over a file).

    Wrap the raw file before any decompression so the total is the file's size on disk
    (open_trace does, given `on_read`).
    """

    def __init__(self, raw: Any, advance: Callable[[int], None]) -> None:
        self._raw = raw
        self._advance = advance

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._advance(len(data))
        return data

    def read1(self, size: int = -1) -> bytes:
        data = self._raw.read1(size)
        self._advance(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer) or 0
        self._advance(n)
        return n

    def readline(self, size: int = -1) -> bytes:
        data = self._raw.readline(size)
        self._advance(len(data))
        return data

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def __enter__(self) -> CountingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _ZstdFrames(io.RawIOBase):
    """zstd frames, one after another, decompressed from `raw` ZSTD_FEED bytes at a time, so
    what one read holds stays bounded (a zstd block expands up to 32,768 times: 1 KiB in,
    32 MiB out at most), and a stream that ends inside a frame is refused (EOFError):
    zstandard's own stream_reader ends such a stream quietly, short."""

    def __init__(self, raw: Any, zstandard: Any) -> None:
        super().__init__()
        self._raw = raw
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._frame: Any = None  # the frame being read; None between frames
        self._out = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._out:
            data = self._raw.read(ZSTD_FEED)
            if not data:
                if self._frame is not None:
                    raise EOFError("the zstd stream ends inside a frame (truncated)")
                return 0
            self._out = memoryview(self._decompress(data))
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _decompress(self, data: bytes) -> bytes:
        parts = []
        while data:
            if self._frame is None:
                self._frame = self._new()
            parts.append(self._frame.decompress(data))
            data = b""
            if self._frame.eof:  # what follows is the next frame
                data, self._frame = self._frame.unused_data, None
        return b"".join(parts)


class TraceStream:
    """A trace's bytes, decompressed: what open_trace gives. read, readline and seek pass
    through; a truncated or corrupt compressed stream (or the disk failing under it) is one
    XputuneError naming the file, never a zlib or zstd traceback. Closing it closes the file."""

    def __init__(self, inner: Any, file: Any, path: Path | str, broken: tuple) -> None:
        self._inner, self._file, self._path, self._broken = inner, file, path, broken

    def _fail(self, exc: BaseException) -> XputuneError:
        reason = printable(str(exc) or type(exc).__name__)[:200]
        return XputuneError(f"{_shown(self._path)}: cannot read the trace ({reason})")

    def read(self, size: int = -1) -> bytes:
        try:
            return self._inner.read(size)
        except self._broken as exc:
            raise self._fail(exc) from None

    def readline(self, size: int = -1) -> bytes:
        try:
            return self._inner.readline(size)
        except self._broken as exc:
            raise self._fail(exc) from None

    def seek(self, offset: int, whence: int = 0) -> int:
        """Back to the start (a sampled curve reads a trace twice): plain and gzip only."""
        try:
            return self._inner.seek(offset, whence)
        except self._broken as exc:
            raise self._fail(exc) from None

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._file.close()

    def __enter__(self) -> TraceStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_trace(path: Path, on_read: Callable[[int], None] | None = None) -> TraceStream:
    """A request trace, the one opener of every command that reads one (tiers, replay,
    sweep): plain, gzip (the standard library) or zstd (the `zstd` extra), told apart by
    their magic bytes, never by the name. The file is opened as open_binary opens it (a
    regular file only; no cap on the whole: a trace is streamed, and its readers bound each
    line). `on_read` hears of every byte read from the file on disk (before decompression),
    so a progress bar over the file's size ends at 100% whatever the compression."""
    import zlib

    fh = open_binary(path, "trace")
    try:
        magic = fh.peek(4)[:4]
        raw: Any = fh if on_read is None else CountingReader(fh, on_read)
        broken: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)
        inner: Any = raw
        if magic[:2] == GZIP_MAGIC:
            import gzip

            inner = gzip.GzipFile(fileobj=raw, mode="rb")
        elif magic == ZSTD_MAGIC:
            try:
                import zstandard
            except ImportError:
                raise XputuneError(
                    f"{_shown(path)} is zstd-compressed: pip install 'xputune[zstd]', or "
                    "decompress it"
                ) from None
            inner = io.BufferedReader(_ZstdFrames(raw, zstandard), 1 << 16)
            broken += (zstandard.ZstdError,)
    except BaseException:
        fh.close()
        raise
    return TraceStream(inner, fh, path, broken)


# ---------------------------------------------------------------------------------- JSON


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond the range of a number")
    return value


def loads(text: str | bytes, one_line: bool = False) -> Any:
    """Strict JSON: ValueError with a one-line reason for anything else (NaN, Infinity, a
    number beyond a double's range or of thousands of digits, nesting deeper than the
    parser goes). The reason names the line and column of a syntax error (only the column
    when `text` is one line of a file whose line number the caller gives)."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}" if one_line else f"line {exc.lineno} column {exc.colno}"
        raise ValueError(f"not JSON ({exc.msg} at {where})") from None
    except RecursionError:
        raise ValueError("not JSON xputune reads (nested too deeply)") from None
    except ValueError as exc:
        reason = str(exc)
        if "integer string conversion" in reason:
            reason = "an integer of thousands of digits"
        raise ValueError(f"not JSON xputune reads ({reason})") from None


def parse_json(text: str | bytes, source: str) -> Any:
    """loads(), its refusal one XputuneError line naming `source`."""
    try:
        return loads(text)
    except ValueError as exc:
        raise XputuneError(f"{printable(source)}: {exc}") from None


def read_json(path: Path, what: str, limit: int) -> Any:
    """A JSON file of at most `limit` bytes, read strictly (see loads)."""
    return parse_json(read_text(path, what, limit), str(path))


# ------------------------------------------------------------------------- model configs


def config_path(name: str) -> Path | None:
    """The config.json a --model value names: the file itself, or a folder holding one."""
    from pathlib import Path

    path = Path(name).expanduser()
    try:  # is_dir/is_file answer False only for a missing file, not for a name too long
        if path.is_dir() and (path / "config.json").is_file():
            return path / "config.json"
        if path.is_file() or name.endswith(".json"):
            return path
    except OSError as exc:  # ENAMETOOLONG, EACCES on a folder above: a path it cannot be
        raise _refusal(exc, path, "model config") from None
    return None


def model_config(model: str | None, config: Path | None) -> tuple[str, dict[str, Any]] | None:
    """(name, fields) of the config.json that --model or --config names; None when neither
    names a file (--model is then a preset name or a Hugging Face id, for plan/models.py)."""
    if model and config:
        raise XputuneError("give --model or --config, not both")
    path = config if config is not None else config_path(model) if model else None
    if path is None:
        return None
    data = read_json(path, "model config", CONFIG_MAX)
    if not isinstance(data, dict):
        raise XputuneError(f"{_shown(path)}: expected a JSON object")
    stem = path.parent.name if path.name == "config.json" and path.parent.name else None
    return stem or path.stem, data


def check_writable(path: Path, what: str) -> None:
    """Refuse, in one line, an output file that cannot be written, before the work that makes
    it (a missing folder, a directory, no permission, a name too long)."""
    try:  # is_dir and exists answer False only for a missing file, not for a name too long
        if path.is_dir():
            raise XputuneError(f"{what}: {path} is a directory")
        parent = path.parent
        if not parent.is_dir():
            raise XputuneError(f"{what}: cannot write {path}: no such directory {parent}")
        if path.exists() and not os.access(path, os.W_OK):
            raise XputuneError(f"{what}: cannot write {path}: permission denied")
        if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
            raise XputuneError(f"{what}: cannot write {path}: {parent} is not writable")
    except OSError as exc:  # ENAMETOOLONG, EACCES on a folder above: said, not echoed whole
        text = str(path)
        shown = text if len(text) <= 80 else f"{text[:40]}... ({len(text):,} characters)"
        raise XputuneError(f"{what}: cannot write {printable(shown)}: {exc.strerror}") from None


def write_output(path: Path, data: bytes, what: str) -> None:
    """Write a file the user asked for; one line when it cannot be."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise XputuneError(f"cannot write {what} {path}: {exc.strerror}") from None
