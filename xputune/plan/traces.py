"""Trace parsers: a hit-rate Trace (or a stream of Batches) out; the caller opens the file.

TraceReader reads a binary stream (plain, or a decompressing one) in chunks with msgspec and the
C core, in a thread of its own a few chunks ahead of its consumer: what `xputune tiers` uses.
parse_mooncake / parse_generic (json.loads per text line) are the reference it must agree with,
and the path a chunk with a bad line falls back to.

Two request-trace formats, both JSON lines, one request per line, blank lines ignored:

- Mooncake: {"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [..]}, one id
  per `block_size` (512) tokens, already prefix-chained. The last block holds the remainder of
  input_length; ids beyond what input_length fills are an error.
- generic: {"hashes": [..]} (page hashes, not chained: a rolling prefix hash is folded in so an
  id fixes its whole prefix; "chained": true skips that) with optional "input_length", or
  {"tokens": [..]} (token ids, cut into pages and hashed). The page size comes from a
  "page_size" field on any line or from the caller; lines must agree.

And the measured-tier table: CSV with a header naming capacity_tokens or capacity_gb, hit_rate
(a fraction, or a percentage with %), and optionally ttft_ms.

Errors name the line: a bad trace should cost one look, not a debugging session. A trace has
no bound on its length (it is streamed), but each line has one (MAX_LINE, after any
decompression): a line longer than any real request is refused with its number before it is
held whole, so one endless line costs a few MiB, not all the memory there is. Lines are read
as strict JSON (userfiles.loads: no NaN, no nesting past the parser's depth).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from xputune.errors import XputuneError
from xputune.userfiles import loads, size_text

if TYPE_CHECKING:
    import numpy as np

MOONCAKE_BLOCK = 512
#: bytes in one trace line, at most: a Mooncake request of a 1M-token prompt is about 20 KB,
#: a generic one of 1M token ids about 8 MB.
MAX_LINE = 16 << 20
_MASK = (1 << 64) - 1
#: Bounds on a trace's numbers, far above any real request (they refuse garbage such as a
#: 4,000-digit integer, not data), the same on both paths: the fast one hands a line past
#: them to the per-line one, which refuses it naming the line.
MAX_TOKENS = 1 << 50  # input_length and output_length: tokens of one request
MAX_PAGE_SIZE = 1 << 31  # page_size: tokens per page
MAX_TIMESTAMP_MS = float(1 << 53)  # timestamp: ms (past it a double holds no whole ms)


@dataclass(frozen=True)
class Trace:
    """Requests as flat arrays: block ids, tokens per block, and where each request starts.

    What every parser here yields and plan/hitrate.py computes curves from (its semantics are
    in that module's docstring); defined here, below both, so neither imports the other.
    """

    block_ids: np.ndarray  # uint64, root first within each request
    block_tokens: np.ndarray  # int64, 1..block_size
    offsets: np.ndarray  # int64, len = requests + 1, offsets[0] = 0
    block_size: int
    uncached_tokens: int = 0  # input tokens not covered by any block id

    @property
    def requests(self) -> int:
        return len(self.offsets) - 1

    @property
    def accesses(self) -> int:
        return len(self.block_ids)

    @property
    def total_tokens(self) -> int:
        return int(self.block_tokens.sum()) + self.uncached_tokens


class TraceFormatError(XputuneError):
    """A trace or table line that cannot be read; the message names the line."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}: line {line}: {reason}")
        self.line = line


class EmptyTraceError(TraceFormatError):
    """A trace with no request in it (an empty file, blank lines only): no curve to draw,
    said in one line before anything divides by its zero tokens. No line is to blame (0)."""

    def __init__(self, source: str) -> None:
        XputuneError.__init__(self, f"{source}: the trace is empty (no requests in it)")
        self.line = 0


def shown(value: int | float) -> str:
    """A number as an error quotes it: short, and never str() of an integer past Python's
    4,300-digit limit, nor float() of one past a double."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if value.bit_length() > 128:
        return f"an integer of {'thousands' if value.bit_length() > 3300 else 'hundreds'} of digits"
    return str(value)


def _nonneg_int(value: Any, what: str, top: int = MAX_TOKENS) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}"[:120])
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {shown(value)}")
    if value > top:
        raise ValueError(f"{what} must be at most {top:,}, got {shown(value)}")
    return value


def _id_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list of integers")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError(f"{what} must hold integers, got {item!r}"[:120])
        if item < 0 or item > _MASK:
            raise ValueError(f"{what} must hold 64-bit unsigned integers, got {shown(item)}")
    return value


def _records(lines: Iterable[str], source: str, first: int = 1):
    for number, raw in enumerate(lines, start=first):
        text = raw.strip()
        if not text:
            continue
        try:
            record = loads(text, one_line=True)
        except ValueError as exc:
            raise TraceFormatError(source, number, str(exc)) from None
        if not isinstance(record, dict):
            raise TraceFormatError(source, number, "expected a JSON object")
        yield number, record


class _Builder:
    """Accumulates requests as flat lists; the arrays are made once at the end."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.lengths: list[int] = []
        self.last: list[int] = []  # tokens of each request's last block (0: no blocks)
        self.uncached = 0

    def add(self, ids: list[int], input_length: int, block: int) -> None:
        k = len(ids)
        if k and (k - 1) * block >= input_length:
            raise ValueError(
                f"{k} blocks of {block} tokens need input_length > {(k - 1) * block}, "
                f"got {input_length}"
            )
        self.ids.extend(ids)
        self.last.append(min(block, input_length - (k - 1) * block) if k else 0)
        self.uncached += max(0, input_length - k * block)
        self.lengths.append(k)

    def batch(self, block: int) -> Batch:
        import numpy as np

        return Batch(
            ids=np.array(self.ids, dtype=np.uint64),
            counts=np.array(self.lengths, dtype=np.int64),
            last_tokens=np.array(self.last, dtype=np.int64),
            uncached=self.uncached,
            block=block,
        )

    def trace(self, block: int) -> Trace:
        return _trace_of([self.batch(block)], block)


def _mooncake_add(builder: _Builder, record: dict, block: int) -> None:
    for field in ("hash_ids", "input_length"):
        if field not in record:
            raise ValueError(f"missing field {field!r}")
    ids = _id_list(record["hash_ids"], "hash_ids")
    builder.add(ids, _nonneg_int(record["input_length"], "input_length"), block)


def parse_mooncake(
    lines: Iterable[str], block_size: int = MOONCAKE_BLOCK, source: str = "trace"
) -> Trace:
    """A Mooncake JSONL trace (hash_ids are prefix-chained, one per block_size tokens).

    The per-line reference reader (json.loads per line); read_trace is the fast one."""
    builder = _Builder()
    number = 0
    for number, record in _records(lines, source):
        try:
            _mooncake_add(builder, record, block_size)
        except ValueError as exc:
            raise TraceFormatError(source, number, str(exc)) from None
    if not number:
        raise EmptyTraceError(source)
    return builder.trace(block_size)


def _fold(parent: int, value: int) -> int:
    """One step of the rolling prefix hash: a page id that also encodes every page before it."""
    z = (parent * 0x100000001B3 + value + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def chain(hashes: list[int]) -> list[int]:
    """Turn per-page content hashes into prefix-chained ids."""
    out: list[int] = []
    h = 0
    for value in hashes:
        h = _fold(h, value)
        out.append(h)
    return out


def _generic_add(builder: _Builder, record: dict, size: int | None) -> int:
    """Add one generic request; returns the page size in force after it."""
    if "page_size" in record:
        given = _nonneg_int(record["page_size"], "page_size", MAX_PAGE_SIZE)
        if given == 0:
            raise ValueError("page_size must be > 0")
        if size is not None and given != size:
            raise ValueError(f"page_size {given} differs from {size} used so far")
        size = given
    if size is None:
        raise ValueError('no page size: add "page_size" or pass one')
    if "tokens" in record:
        tokens = _id_list(record["tokens"], "tokens")
        pages = [hash(tuple(tokens[i : i + size])) & _MASK for i in range(0, len(tokens), size)]
        builder.add(chain(pages), len(tokens), size)
    elif "hashes" in record:
        hashes = _id_list(record["hashes"], "hashes")
        length = record.get("input_length", len(hashes) * size)
        length = _nonneg_int(length, "input_length")
        chained = record.get("chained", False)
        if not isinstance(chained, bool):
            raise ValueError("chained must be true or false")
        builder.add(hashes if chained else chain(hashes), length, size)
    else:
        raise ValueError("missing field 'hashes' or 'tokens'")
    return size


def parse_generic(
    lines: Iterable[str], page_size: int | None = None, source: str = "trace"
) -> Trace:
    """The generic JSONL format (page hashes or token ids per request), line by line."""
    builder = _Builder()
    size = page_size
    number = 0
    for number, record in _records(lines, source):
        try:
            size = _generic_add(builder, record, size)
        except ValueError as exc:
            raise TraceFormatError(source, number, str(exc)) from None
    if not number:
        raise EmptyTraceError(source)
    if size is None:
        raise TraceFormatError(source, 0, "empty trace and no page size")
    return builder.trace(size)


# ------------------------------------------------------------------------- the streaming reader


@dataclass
class Batch:
    """Some requests of a trace as flat arrays: ids back to back, blocks per request, the
    tokens of each request's last block (the others carry `block`), and input tokens beyond
    the blocks."""

    ids: np.ndarray  # uint64
    counts: np.ndarray  # int64
    last_tokens: np.ndarray  # int64
    uncached: int
    block: int

    @property
    def tokens(self) -> int:
        """Input tokens of these requests."""
        import numpy as np

        full = int(self.counts.sum()) - int(np.count_nonzero(self.counts))
        return full * self.block + int(self.last_tokens.sum()) + self.uncached


def _trace_of(batches: list[Batch], block: int) -> Trace:
    import numpy as np

    ids = np.concatenate([b.ids for b in batches]) if batches else np.zeros(0, np.uint64)
    counts = np.concatenate([b.counts for b in batches]) if batches else np.zeros(0, np.int64)
    last = np.concatenate([b.last_tokens for b in batches]) if batches else counts
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    tokens = np.full(len(ids), block, dtype=np.int64)
    has = counts > 0
    tokens[offsets[1:][has] - 1] = last[has]
    return Trace(
        block_ids=ids.astype(np.uint64, copy=False),
        block_tokens=tokens,
        offsets=offsets,
        block_size=block,
        uncached_tokens=sum(b.uncached for b in batches),
    )


def sniff_format(first_line: str) -> str:
    """'mooncake' or 'generic', from the fields of the first request."""
    try:
        record = loads(first_line)
    except ValueError:
        return "generic"
    if isinstance(record, dict) and "hash_ids" in record:
        return "mooncake"
    return "generic"


def _lone_cr(buf: bytes) -> bool:
    """Whether a CR not followed by LF ends some line (text mode reads it so)."""
    return b"\r" in buf and buf.count(b"\r") != buf.count(b"\r\n")


def _split_lines(buf: bytes) -> list[bytes]:
    """The lines of a chunk with lone CRs in it, as text mode would split them."""
    import re

    pieces = re.split(rb"\r\n|\r|\n", buf)
    if pieces and not pieces[-1]:
        pieces.pop()
    return pieces


def _line_count(buf: bytes) -> int:
    if _lone_cr(buf):
        return len(_split_lines(buf))
    return buf.count(b"\n") + (not buf.endswith(b"\n"))


_CHUNK = 1 << 22  # bytes per read; a chunk is cut after its last newline
#: Chunks a TraceReader reads and decodes ahead of its consumer, in a thread of its own.
READ_AHEAD = 2
_T = TypeVar("_T")


def _read_ahead(items: Iterator[_T], depth: int) -> Iterator[_T]:
    """`items`, made by a worker thread up to `depth` ahead of the consumer (0: made here).

    Why: what consumes a trace's batches is the C stack pass, which runs without the GIL
    (ctypes lets it go), and reading a chunk (read, msgspec, the C id parser) costs about
    half of that pass. Done one after the other the two add up; done side by side, where a
    second core is free, reading is mostly hidden behind the pass (~1.4 -> ~1.1 s of a
    10M-access trace on two cores, 1.7 -> 1.3 s gzipped). The items and their order are the
    same; an error of the reader reaches the consumer where it would have come, after the
    items before it. A consumer that stops early (closes the iterator) stops the worker
    within one chunk; the worker is joined before the iterator ends, so the stream is free
    again (rewind) once it has.
    """
    if depth <= 0:
        yield from items
        return
    import queue
    import threading

    box: queue.Queue[tuple[bool, Any]] = queue.Queue(depth)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                box.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put((True, item)):
                    return
            put((False, None))
        except BaseException as exc:  # handed to the consumer, raised there
            put((False, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=work, name="xputune-trace-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            more, value = box.get()
            if not more:
                if value is not None:
                    raise value
                return
            yield value
    finally:
        stop.set()
        worker.join()


_DECODERS: dict[str, Any] = {}


def _decoder(kind: str):
    """msgspec decoders for the two schemas; the id arrays stay raw text for the C parser."""
    if not _DECODERS:
        import msgspec
        from msgspec import UNSET, Raw, UnsetType

        # defstruct, not class syntax: this module's annotations are strings (__future__).
        mooncake = msgspec.defstruct(
            "MooncakeLine", [("input_length", int), ("hash_ids", Raw)], gc=False
        )
        generic = msgspec.defstruct(
            "GenericLine",
            [
                ("page_size", int | UnsetType, UNSET),
                ("hashes", Raw, Raw()),
                ("tokens", Raw, Raw()),
                ("input_length", int | UnsetType, UNSET),
                ("chained", bool, False),
            ],
            gc=False,
        )

        _DECODERS["mooncake"] = msgspec.json.Decoder(mooncake)
        _DECODERS["generic"] = msgspec.json.Decoder(generic)
        _DECODERS["errors"] = msgspec.MsgspecError
        _DECODERS["unset"] = UNSET
    return _DECODERS[kind]


class TraceReader:
    """A trace read from a binary stream in chunks: an iterator of Batches, never the whole file.

    Each chunk (about 4 MiB of whole lines) is decoded at once by msgspec into typed structs
    whose id arrays are left as raw JSON text and parsed by the C core into uint64 arrays; the
    per-request checks are array operations. A chunk the fast path does not take as it is (a bad
    line, "tokens" requests, odd line ends) goes through the per-line reference path
    (json.loads, the same checks as parse_mooncake / parse_generic), which names the line and
    why. Either way the requests and their arrays are the same.

    Sampled curves (hitrate.sampled_curve_stream) read a trace twice: first only its ids
    (block_ids(): plain Mooncake lines are scanned for them without decoding), then again as
    batches after rewind().

    Both iterators read `ahead` chunks ahead of their consumer in a thread of their own
    (_read_ahead): the consumer is the C stack pass, which runs without the GIL, so reading
    costs `tiers` little beyond the pass. The counts (requests, slow_lines) and the format are
    whole once an iterator has ended; while it runs they may be ahead of what it has given.
    """

    def __init__(
        self,
        stream: BinaryIO,
        fmt: str = "auto",
        block_size: int | None = None,
        source: str = "trace",
        chunk_bytes: int = _CHUNK,
        max_line: int = MAX_LINE,
        ahead: int = READ_AHEAD,
    ) -> None:
        if fmt not in ("auto", "mooncake", "generic"):
            raise ValueError(f"unknown trace format {fmt!r}")
        self.stream = stream
        self.format = fmt
        self.given_block = block_size
        self.source = source
        self.chunk_bytes = chunk_bytes
        self.max_line = max_line
        self.ahead = ahead
        self.requests = 0  # non-blank lines (requests)
        self.kept_requests = 0  # requests in the batches given
        self.slow_lines = 0  # lines that went through the per-line path
        self.size: int | None = None  # generic page size in force

    @property
    def block(self) -> int | None:
        if self.format == "mooncake":
            return self.given_block or MOONCAKE_BLOCK
        return self.size if self.size is not None else self.given_block

    # -------------------------------------------------------------------- chunks and lines

    def _too_long(self, number: int) -> TraceFormatError:
        return TraceFormatError(
            self.source, number, f"longer than {size_text(self.max_line)}: not a request"
        )

    def _chunks(self) -> Iterator[tuple[bytes, int]]:
        """Chunks of whole lines and the line number of each one's first line; the format
        is known (sniffed) when a chunk is given. A line is held at most max_line bytes
        (plus one read) before it is refused."""
        if self.format == "generic":
            self.size = self.given_block
        number = 1  # the line number of the chunk's first line
        parts: list[bytes] = []
        held = 0  # bytes in parts: the start of line `number`
        requests = False  # a line that is not blank has been seen
        while True:
            data = self.stream.read(self.chunk_bytes)
            if data:
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    parts.append(data)  # a line longer than a chunk: read on
                    held += len(data)
                    if held > self.max_line:
                        raise self._too_long(number)
                    continue
                if parts and held + data.find(b"\n") > self.max_line:
                    raise self._too_long(number)
                buf = b"".join([*parts, data[:cut]]) if parts else data[:cut]
                parts = [data[cut:]] if cut < len(data) else []
                held = len(data) - cut
            else:
                buf = b"".join(parts)
                parts = []
                if not buf:
                    break
            if self.format == "auto":
                first = next((ln for ln in buf.split(b"\n", 64) if ln.strip()), None)
                if first is None:
                    number += buf.count(b"\n")
                    continue
                self.format = sniff_format(first.decode("utf-8", "replace"))
                if self.format == "generic":
                    self.size = self.given_block
            requests = requests or not buf.isspace()
            yield buf, number
            number += _line_count(buf)
            if not data:
                break
        if not requests:
            raise EmptyTraceError(self.source)
        if self.format == "generic" and self.size is None:
            raise TraceFormatError(self.source, 0, "empty trace and no page size")

    def __iter__(self) -> Iterator[Batch]:
        return _read_ahead(self._batches(), self.ahead)

    def _batches(self) -> Iterator[Batch]:
        for buf, number in self._chunks():
            batch = self._chunk(buf, number)
            if batch is not None and len(batch.counts):
                self.kept_requests += len(batch.counts)
                yield batch

    def block_ids(self) -> Iterator[np.ndarray]:
        """The block ids of the trace, chunk by chunk, in order (what the batches hold). Plain
        Mooncake lines are only scanned for their ids (stackdist.scan_ids): a line that is not
        well formed either goes through the checks of the batches here, or fails them when the
        batches are read. Counts no requests."""
        return _read_ahead(self._block_ids(), self.ahead)

    def _block_ids(self) -> Iterator[np.ndarray]:
        from xputune.plan.stackdist import scan_ids

        for buf, number in self._chunks():
            ids = scan_ids(buf, b"hash_ids") if self.format == "mooncake" else None
            if ids is None:
                batch = self._chunk(buf, number)
                if batch is None:
                    continue
                ids = batch.ids
            yield ids

    def rewind(self) -> None:
        """Read the trace again from its start (the stream must be seekable: a plain or a
        gzip file); the format sniffed stays, the counts restart."""
        self.stream.seek(0)
        self.requests = self.kept_requests = self.slow_lines = 0
        self.size = None

    def _chunk(self, buf: bytes, number: int) -> Batch | None:
        """The batch of one chunk of whole lines (its first line numbered `number`)."""
        if _lone_cr(buf):
            # A lone CR ends a line too (as text mode reads it): only the per-line path
            # splits that way.
            lines = list(enumerate(_split_lines(buf), start=number))
            self.requests += sum(1 for _, ln in lines if ln.strip())
            return self._slow(lines)
        batch = self._fast(buf)
        if batch is None:
            lines = list(enumerate(buf.split(b"\n"), start=number))
            self.requests += sum(1 for _, ln in lines if ln.strip())
            return self._slow(lines)
        return batch

    # -------------------------------------------------------------------- the per-line path

    def _slow(self, lines: list[tuple[int, bytes]]) -> Batch | None:
        builder = _Builder()
        for number, raw in lines:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise TraceFormatError(self.source, number, "not UTF-8 text") from None
            for _, record in _records([text], self.source, number):
                self.slow_lines += 1
                try:
                    if self.format == "mooncake":
                        _mooncake_add(builder, record, self.block or MOONCAKE_BLOCK)
                    else:
                        self.size = _generic_add(builder, record, self.size)
                except ValueError as exc:
                    raise TraceFormatError(self.source, number, str(exc)) from None
        block = self.block
        return None if block is None else builder.batch(block)

    # ------------------------------------------------------------------------ the fast path

    def _fast(self, buf: bytes) -> Batch | None:
        """The chunk's batch, or None when some line needs the per-line path."""
        import numpy as np

        errors = _decoder("errors")
        try:
            records = _decoder(self.format).decode_lines(buf)
        except (errors, RecursionError):  # deep nesting: the per-line path words it
            return None
        n = len(records)
        if n == 0:
            return None
        if self.format == "mooncake":
            raw = b"".join([r.hash_ids for r in records])
            try:
                lengths = np.fromiter([r.input_length for r in records], np.int64, count=n)
            except OverflowError:
                return None
            block = self.block or MOONCAKE_BLOCK
            chained, missing = None, []
        else:
            unset = _decoder("unset")
            size = self.size
            given, missing, flags = [], [], []
            for r in records:
                if len(r.tokens) or not len(r.hashes):
                    return None
                ps = r.page_size
                if ps is not unset:
                    if ps <= 0 or (size is not None and ps != size):
                        return None
                    size = ps
                if size is None:
                    return None
                length = r.input_length
                missing.append(length is unset)
                given.append(0 if length is unset else length)
                flags.append(r.chained)
            raw = b"".join([r.hashes for r in records])
            try:
                lengths = np.array(given, dtype=np.int64)
            except OverflowError:
                return None
            block = size
            chained = np.array(flags, dtype=np.int8)
        if block is None or block > MAX_PAGE_SIZE:
            return None
        batch = self._arrays(raw, n, lengths, block, chained, missing)
        if batch is not None:
            self.requests += n
        return batch

    def _arrays(self, raw, n, lengths, block, chained, missing) -> Batch | None:
        import numpy as np

        from xputune.plan.stackdist import chain_ids, parse_id_arrays

        parsed = parse_id_arrays(raw, n)
        if parsed is None:
            return None
        ids, counts = parsed
        if missing:
            lengths = np.where(np.array(missing, dtype=bool), counts * block, lengths)
        has = counts > 0
        if (lengths < 0).any() or (lengths > MAX_TOKENS).any():
            return None
        if (has & ((counts - 1) * block >= lengths)).any():
            return None
        if chained is not None:
            chain_ids(ids, counts, chained)
            self.size = block
        last = np.where(has, np.minimum(block, lengths - (counts - 1) * block), 0)
        uncached = int(np.maximum(lengths - counts * block, 0).sum())
        return Batch(ids, counts, last, uncached, block)


def read_trace(
    stream: BinaryIO | TraceReader,
    fmt: str = "auto",
    block_size: int | None = None,
    source: str = "trace",
    **kwargs: Any,
) -> Trace:
    """The whole trace as one Trace (the exact curve streams instead: curve_from_batches)."""
    reader = (
        stream
        if isinstance(stream, TraceReader)
        else TraceReader(stream, fmt, block_size, source, **kwargs)
    )
    batches = list(reader)
    block = reader.block
    return _trace_of(batches, block if block is not None else MOONCAKE_BLOCK)


@dataclass(frozen=True)
class MeasuredTier:
    """One capacity step as measured on a live server."""

    capacity: float
    hit_rate: float
    ttft_ms: float | None = None


@dataclass(frozen=True)
class MeasuredTable:
    unit: str  # "tokens" or "gb"
    rows: tuple[MeasuredTier, ...]


#: a measured number above this is no measurement (1e15 tokens, GB or ms)
MEASURED_MAX = 1e15


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} is not a number: {text!r}"[:120]) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{what} is not a finite number: {text!r}"[:120])
    if abs(value) > MEASURED_MAX:
        raise ValueError(f"{what} is out of range: {text!r}"[:120])
    return value


def parse_measured_table(lines: Iterable[str], source: str = "table") -> MeasuredTable:
    """capacity_tokens|capacity_gb, hit_rate[, ttft_ms] rows, sorted by capacity."""
    import csv

    rows: list[MeasuredTier] = []
    header: list[str] | None = None
    unit = ""
    reader = csv.reader(lines)
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # a field past csv's limit (128 KiB)
            raise TraceFormatError(source, reader.line_num, f"not a CSV row ({exc})") from None
        number = reader.line_num
        cells = [c.strip() for c in fields]
        if not cells or all(not c for c in cells) or cells[0].startswith("#"):
            continue
        if header is None:
            header = [c.lower() for c in cells]
            if "capacity_tokens" in header:
                unit = "tokens"
            elif "capacity_gb" in header:
                unit = "gb"
            else:
                raise TraceFormatError(
                    source, number, "header needs capacity_tokens or capacity_gb"
                )
            if "hit_rate" not in header:
                raise TraceFormatError(source, number, "header needs hit_rate")
            continue
        try:
            if len(cells) != len(header):
                raise ValueError(f"expected {len(header)} fields, got {len(cells)}")
            row = dict(zip(header, cells, strict=True))
            capacity = _number(row[f"capacity_{unit}"], "capacity")
            if capacity < 0:
                raise ValueError(f"capacity must be >= 0, got {capacity:g}")
            text = row["hit_rate"]
            hit = _number(text.rstrip("%"), "hit_rate") / (100.0 if text.endswith("%") else 1.0)
            if not 0.0 <= hit <= 1.0:
                raise ValueError(f"hit_rate must be within 0..1 (or 0..100%), got {text}")
            ttft = None
            if row.get("ttft_ms"):
                ttft = _number(row["ttft_ms"], "ttft_ms")
                if ttft < 0:
                    raise ValueError(f"ttft_ms must be >= 0, got {ttft:g}")
            rows.append(MeasuredTier(capacity, hit, ttft))
        except ValueError as exc:
            raise TraceFormatError(source, number, str(exc)) from None
    if not rows:
        raise TraceFormatError(source, 0, "no rows")
    return MeasuredTable(unit, tuple(sorted(rows, key=lambda r: r.capacity)))
