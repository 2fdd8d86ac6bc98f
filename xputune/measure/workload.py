"""The requests a replay sends, made from a trace.

Reading: the trace's own per-line reader (plan/traces.py: the same checks, prefix chaining of
generic page hashes and error lines that name the line as `tiers` uses), plus the two fields a
replay needs and a hit-rate curve does not: the arrival time ("timestamp", ms) and the output
length ("output_length"). Lines are read one at a time, each within LINE_MAX bytes, and only as
many requests as the replay will send (--skip, --requests): a slice of a large trace costs the
slice.

Scaling: a Mooncake block is 512 tokens, far more than a test server's pool holds. With
`block_tokens` = n each trace block becomes n tokens (a partial block of t of B tokens becomes
ceil(t * n / B), at least 1; so do the tokens past the blocks). The prediction is made from the
scaled requests with block size n, so measurement and prediction see the same workload.

Bounds: SGLang's own rules, the same in 0.5.20 through 0.5.23 (docs/measure.md, "The server's
limits"). Its scheduler aborts a request whose prompt has len(input_ids) >= max_req_input_len
(managers/utils.py, validate_input_length), so the longest prompt it takes is one token less
(longest_prompt); a longer one is cut to that length at the end, which keeps every shared
prefix a prefix. It clips max_new_tokens to max_req_len - len(input_ids) - 1, where max_req_len
= max_req_input_len + 5 (scheduler.init_req_max_new_tokens, tp_worker's worker info), so a
request is asked for no more output than the server would produce (longest_output): what it is
asked for is what it does, and input + output stays under the model's context length, which
the tokenizer manager checks (input + max_new_tokens > context length is refused). The output
length is the trace's, capped at --max-output and then at that.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from xputune.plan import traces
from xputune.plan.traces import TraceFormatError

if TYPE_CHECKING:
    from xputune.measure.tokens import TokenRange
    from xputune.plan.hitrate import Trace

#: bytes in one trace line, at most (a Mooncake request of a 1M-token prompt is about 20 KB)
LINE_MAX = 16 << 20


@dataclass(frozen=True)
class TraceRequest:
    """One request as the trace gives it (tokens in the trace's own block size)."""

    line: int
    at_ms: float | None  # arrival time, ms; None when the trace has none
    ids: tuple[int, ...]  # prefix-chained block ids, root first
    tokens: tuple[int, ...]  # input tokens each block carries (the last may be partial)
    tail: int  # input tokens past the blocks
    output: int | None  # output tokens, None when the trace does not say


@dataclass(frozen=True)
class TraceSlice:
    requests: list[TraceRequest]
    format: str  # "mooncake" or "generic"
    block: int  # tokens per trace block
    skipped: int  # requests passed over before the slice


def _lines(stream: BinaryIO, source: str) -> Iterator[tuple[int, str]]:
    number = 0
    while True:
        raw = stream.readline(LINE_MAX + 1)
        if not raw:
            return
        number += 1
        if len(raw) > LINE_MAX:
            raise TraceFormatError(source, number, f"longer than {LINE_MAX >> 20} MiB")
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise TraceFormatError(source, number, "not UTF-8 text") from None


def _at(record: dict[str, Any]) -> float | None:
    value = record.get("timestamp")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"timestamp must be a number of ms, got {value!r}"[:120])
    if value < 0:
        raise ValueError(f"timestamp must be >= 0, got {value}")
    if not value <= traces.MAX_TIMESTAMP_MS:  # compared before float(): 4,000 digits overflow
        raise ValueError(f"timestamp must be at most 2^53 ms, got {traces.shown(value)}")
    return float(value)


def _output(record: dict[str, Any]) -> int | None:
    value = record.get("output_length")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"output_length must be an integer >= 0, got {value!r}"[:120])
    return traces._nonneg_int(value, "output_length")  # at most traces.MAX_TOKENS


def read_slice(
    stream: BinaryIO,
    *,
    fmt: str = "auto",
    block_size: int | None = None,
    source: str = "trace",
    skip: int = 0,
    limit: int | None = None,
) -> TraceSlice:
    """Requests skip+1 .. skip+limit of a trace (all after `skip` when limit is None)."""
    if fmt not in ("auto", "mooncake", "generic"):
        raise ValueError(f"unknown trace format {fmt!r}")
    out: list[TraceRequest] = []
    seen = 0
    size = block_size  # generic: the page size in force
    for number, text in _lines(stream, source):
        if limit is not None and len(out) >= limit:
            break
        if not text.strip():
            continue
        if fmt == "auto":
            fmt = traces.sniff_format(text)
        for _, record in traces._records([text], source, number):
            builder = traces._Builder()
            try:
                if fmt == "mooncake":
                    block = block_size or traces.MOONCAKE_BLOCK
                    traces._mooncake_add(builder, record, block)
                else:
                    size = traces._generic_add(builder, record, size)
                    block = size
                at, output = _at(record), _output(record)
            except ValueError as exc:
                raise TraceFormatError(source, number, str(exc)) from None
            seen += 1
            if seen <= skip:
                continue
            k = len(builder.ids)
            tokens = (block,) * (k - 1) + (builder.last[0],) if k else ()
            out.append(
                TraceRequest(number, at, tuple(builder.ids), tokens, builder.uncached, output)
            )
    if fmt == "auto":
        fmt = "mooncake"  # an empty trace; the caller refuses it
    block = (block_size or traces.MOONCAKE_BLOCK) if fmt == "mooncake" else size
    if block is None:
        raise TraceFormatError(source, 0, 'no page size: add "page_size" or pass --block-size')
    return TraceSlice(out, fmt, block, min(seen, skip))


# ------------------------------------------------------------------------------ the workload


def longest_prompt(max_req_input_len: int) -> int:
    """The longest prompt SGLang takes: its scheduler aborts len(input_ids) >=
    max_req_input_len ("Input length (N tokens) exceeds the maximum allowed length (N
    tokens)"), so one token less than the max_req_input_len /server_info reports (0: the
    server takes no prompt, and every request is left out as empty)."""
    return max(0, max_req_input_len - 1)


def longest_output(max_req_input_len: int, prompt: int) -> int:
    """The most output tokens SGLang generates after a prompt of `prompt` tokens (at least 1):
    it clips max_new_tokens to max_req_len - prompt - 1, max_req_len = max_req_input_len + 5."""
    return max(1, max_req_input_len + 4 - prompt)


@dataclass(frozen=True)
class Request:
    """One request as a replay sends it: scaled, within the server's limits."""

    index: int  # position in the replay
    line: int  # line of the trace
    at_ms: float | None
    ids: tuple[int, ...]
    tokens: tuple[int, ...]  # scaled tokens per block, 1..block_tokens
    tail: int  # scaled tokens past the blocks
    output: int  # tokens asked for

    @property
    def prompt_tokens(self) -> int:
        return sum(self.tokens) + self.tail


@dataclass(frozen=True)
class Workload:
    requests: list[Request]
    format: str
    trace_block: int  # tokens per block in the trace
    block_tokens: int  # tokens per block as sent
    skipped: int
    truncated: int  # prompts cut to the server's limit
    outputs_capped: int  # output lengths cut to max_output
    outputs_missing: int  # requests whose trace line gave no output length
    empty: int = 0  # requests of no input tokens, left out (a server refuses them)
    outputs_limited: int = 0  # output lengths cut to what the server generates (longest_output)
    longest_prompt: int | None = None  # the longest prompt the server takes (None: no limit)
    salt: int = 0  # every block id under this salt (tokens.salt_key): 0, the trace's own

    @property
    def input_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.requests)

    @property
    def output_tokens(self) -> int:
        return sum(r.output for r in self.requests)

    @property
    def timed(self) -> bool:
        """Every request has an arrival time (open loop is possible)."""
        return bool(self.requests) and all(r.at_ms is not None for r in self.requests)

    def head(self, count: int, salt: int) -> Workload:
        """The first `count` requests, sent under `salt`: the same requests, in tokens no other
        salt sends (a replay's phase, measure/phases.py)."""
        import dataclasses

        return dataclasses.replace(self, requests=self.requests[:count], salt=salt)

    def trace(self) -> Trace:
        """The requests as plan.hitrate sees a trace: what the prediction is made from."""
        from xputune.plan.hitrate import trace_from_requests

        return trace_from_requests(
            [(list(r.ids), list(r.tokens)) for r in self.requests],
            self.block_tokens,
            uncached_tokens=sum(r.tail for r in self.requests),
        )

    def body(self, request: Request, vocab: TokenRange, stream: bool = True) -> bytes:
        """The /generate request body (JSON) of one request: its prompt as token ids."""
        from xputune.measure.tokens import prompt_tokens

        ids = prompt_tokens(
            request.ids, request.tokens, self.block_tokens, request.tail, request.line, vocab,
            self.salt,
        )  # fmt: skip
        return encode_body(ids.tolist(), request.output, stream)


def encode_body(ids: list[int], max_new_tokens: int, stream: bool = True) -> bytes:
    """SGLang's native /generate body: greedy, exactly max_new_tokens (ignore_eos)."""
    head = b'{"input_ids":[' + ",".join(map(str, ids)).encode() + b"]"
    params = (
        b',"sampling_params":{"max_new_tokens":%d,"temperature":0,"ignore_eos":true}'
        % max_new_tokens
    )
    return head + params + (b',"stream":true}' if stream else b"}")


def _scaled(tokens: int, n: int, block: int) -> int:
    return -(-tokens * n // block)


def build_workload(
    trace: TraceSlice,
    *,
    block_tokens: int | None = None,
    max_req_input_len: int | None = None,
    max_output: int = 512,
    default_output: int = 1,
) -> Workload:
    """The trace's requests scaled to `block_tokens` per block, bounded for the server whose
    /server_info reports `max_req_input_len` (None: no bound)."""
    n = block_tokens or trace.block
    if n < 1:
        raise ValueError(f"tokens per block must be >= 1, got {n}")
    if max_output < 1:
        raise ValueError(f"the output cap must be >= 1, got {max_output}")
    max_prompt = None if max_req_input_len is None else longest_prompt(max_req_input_len)
    out: list[Request] = []
    truncated = capped = missing = empty = limited = 0
    for r in trace.requests:
        tokens = [max(1, _scaled(t, n, trace.block)) for t in r.tokens]
        tail = _scaled(r.tail, n, trace.block)
        ids = list(r.ids)
        if max_prompt is not None and sum(tokens) + tail > max_prompt:
            truncated += 1
            kept, room = [], max_prompt
            for t in tokens:
                if room <= 0:
                    break
                kept.append(min(t, room))
                room -= kept[-1]
            ids, tokens, tail = ids[: len(kept)], kept, max(0, min(tail, room))
        if not tokens and not tail:
            empty += 1
            continue
        if r.output is None:
            missing += 1
        want = default_output if r.output is None else max(1, r.output)
        if want > max_output:
            capped += 1
            want = max_output
        if max_req_input_len is not None:
            most = longest_output(max_req_input_len, sum(tokens) + tail)
            if want > most:
                limited += 1
                want = most
        out.append(Request(len(out), r.line, r.at_ms, tuple(ids), tuple(tokens), tail, want))
    return Workload(
        out, trace.format, trace.block, n, trace.skipped, truncated, capped, missing, empty,
        limited, max_prompt,
    )  # fmt: skip
