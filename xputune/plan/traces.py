"""Trace parsers: text lines in, a hit-rate Trace out (the caller opens the file).

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

Errors name the line: a bad trace should cost one look, not a debugging session.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xputune.errors import XputuneError

if TYPE_CHECKING:
    from xputune.plan.hitrate import Trace

MOONCAKE_BLOCK = 512
_MASK = (1 << 64) - 1


class TraceFormatError(XputuneError):
    """A trace or table line that cannot be read; the message names the line."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source}: line {line}: {reason}")
        self.line = line


def _nonneg_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, got {value!r}"[:120])
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return value


def _id_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list of integers")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError(f"{what} must hold integers, got {item!r}"[:120])
        if item < 0 or item > _MASK:
            raise ValueError(f"{what} must hold 64-bit unsigned integers, got {item}")
    return value


def _records(lines: Iterable[str], source: str):
    for number, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(source, number, f"not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise TraceFormatError(source, number, "expected a JSON object")
        yield number, record


class _Builder:
    """Accumulates requests as flat lists; the arrays are made once at the end."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.tokens: list[int] = []
        self.lengths: list[int] = []
        self.uncached = 0

    def add(self, ids: list[int], input_length: int, block: int) -> None:
        k = len(ids)
        if k and (k - 1) * block >= input_length:
            raise ValueError(
                f"{k} blocks of {block} tokens need input_length > {(k - 1) * block}, "
                f"got {input_length}"
            )
        self.ids.extend(ids)
        if k:
            self.tokens.extend([block] * (k - 1))
            self.tokens.append(min(block, input_length - (k - 1) * block))
        self.uncached += max(0, input_length - k * block)
        self.lengths.append(k)

    def trace(self, block: int) -> Trace:
        import numpy as np

        from xputune.plan.hitrate import Trace

        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        return Trace(
            block_ids=np.array(self.ids, dtype=np.uint64),
            block_tokens=np.array(self.tokens, dtype=np.int64),
            offsets=offsets,
            block_size=block,
            uncached_tokens=self.uncached,
        )


def parse_mooncake(
    lines: Iterable[str], block_size: int = MOONCAKE_BLOCK, source: str = "trace"
) -> Trace:
    """A Mooncake JSONL trace (hash_ids are prefix-chained, one per block_size tokens)."""
    builder = _Builder()
    for number, record in _records(lines, source):
        try:
            for field in ("hash_ids", "input_length"):
                if field not in record:
                    raise ValueError(f"missing field {field!r}")
            ids = _id_list(record["hash_ids"], "hash_ids")
            builder.add(ids, _nonneg_int(record["input_length"], "input_length"), block_size)
        except ValueError as exc:
            raise TraceFormatError(source, number, str(exc)) from None
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


def parse_generic(
    lines: Iterable[str], page_size: int | None = None, source: str = "trace"
) -> Trace:
    """The generic JSONL format (page hashes or token ids per request)."""
    builder = _Builder()
    size = page_size
    for number, record in _records(lines, source):
        try:
            if "page_size" in record:
                given = _nonneg_int(record["page_size"], "page_size")
                if given == 0:
                    raise ValueError("page_size must be > 0")
                if size is not None and given != size:
                    raise ValueError(f"page_size {given} differs from {size} used so far")
                size = given
            if size is None:
                raise ValueError('no page size: add "page_size" or pass one')
            if "tokens" in record:
                tokens = _id_list(record["tokens"], "tokens")
                pages = [
                    hash(tuple(tokens[i : i + size])) & _MASK for i in range(0, len(tokens), size)
                ]
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
        except ValueError as exc:
            raise TraceFormatError(source, number, str(exc)) from None
    if size is None:
        raise TraceFormatError(source, 0, "empty trace and no page size")
    return builder.trace(size)


def sniff_format(first_line: str) -> str:
    """'mooncake' or 'generic', from the fields of the first request."""
    try:
        record = json.loads(first_line)
    except json.JSONDecodeError:
        return "generic"
    if isinstance(record, dict) and "hash_ids" in record:
        return "mooncake"
    return "generic"


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


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what} is not a number: {text!r}"[:120]) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{what} is not a finite number: {text!r}")
    return value


def parse_measured_table(lines: Iterable[str], source: str = "table") -> MeasuredTable:
    """capacity_tokens|capacity_gb, hit_rate[, ttft_ms] rows, sorted by capacity."""
    import csv

    rows: list[MeasuredTier] = []
    header: list[str] | None = None
    unit = ""
    for number, fields in enumerate(csv.reader(lines), start=1):
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
