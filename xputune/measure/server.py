"""What a running SGLang server says about itself, and the capacities a prediction needs.

SGLang 0.5.20's GET /server_info holds the resolved server arguments (page_size,
enable_hierarchical_cache, hicache_ratio, hicache_size, hicache_write_policy,
hicache_storage_backend, tp_size, model_path, ...) plus the scheduler's figures
(max_total_num_tokens: the device pool, L1, in tokens; max_req_input_len) and "version". A
server whose answer lacks max_total_num_tokens or version is not one a replay drives.

The host pool (L2) is not published; it is sized the way 0.5.20's HostKVCache sizes it
(mem_cache/pool_host/base.py): with --hicache-size S > 0, S * 1e9 // bytes per token of one
rank (from the model's config.json, when the server's model_path is readable here, or
--host-tokens); otherwise int(L1 * --hicache-ratio); then aligned up to one page past it.

The token range a replay may send comes from the model's vocab_size in the same config.json.

Bounds. Every number read from the answer is checked before it becomes a size: a field that is
there must be a number of its kind within its bound, else the whole answer is refused in one
line (ServerError: "the server said something unusable", exit 2) naming the field and what it
held: NaN, Infinity, 1e308, a 4,000-digit integer, a negative or zero size, a boolean where a
number goes. A field that is absent or null takes its default. The bounds are far above any
real server (they refuse garbage, not configurations):

  max_total_num_tokens, max_req_input_len   1 .. TOKENS_MAX (2^50) tokens
  chunked_prefill_size                      <= TOKENS_MAX (0 or negative: chunking off)
  page_size                                 1 .. PAGE_MAX (2^20) tokens
  tp_size                                   1 .. TP_MAX (2^16) ranks
  hicache_ratio                             (0, RATIO_MAX = 1e6]; read with HiCache on only
  hicache_size                              0 .. SIZE_GB_MAX (1e7) GB per rank; likewise
  the L2 pool these size                    <= TOKENS_MAX tokens
  vocab_size (config.json, a local file)    1 .. VOCAB_MAX (2^31); past it: unknown

The answer itself is read within DOC_MAX bytes and one deadline (client.get_json).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from xputune.measure.client import Endpoint, ServerError, ServerTimeout, get_json, shown
from xputune.userfiles import printable

#: token ids a replay draws from, within the vocabulary: the lowest ids are special tokens in
#: many tokenizers (pad, bos, eos, unk), the highest are added tokens in others.
TOKEN_LO = 10
TOKEN_HI_MAX = 32000

#: Seconds a /server_info answer may take in all (a real one comes in milliseconds).
INFO_TIMEOUT = 10.0
#: Bounds on what /server_info may say (see the module's docstring).
TOKENS_MAX = 1 << 50  # tokens in a pool or a prompt (--host-tokens has the same cap)
PAGE_MAX = 1 << 20  # tokens per page (--block-size has the same cap)
TP_MAX = 1 << 16  # tensor-parallel ranks
RATIO_MAX = 1e6  # --hicache-ratio: host pool / device pool
SIZE_GB_MAX = 1e7  # --hicache-size: GB per rank (10 PB)
VOCAB_MAX = 1 << 31  # token ids (--token-range has the same cap)


@dataclass(frozen=True)
class ServerInfo:
    url: str
    version: str
    model_path: str | None
    tp_size: int
    page_size: int
    device_tokens: int  # L1: the device KV pool
    max_req_input_len: int | None  # SGLang's limit: it refuses a prompt of this length or more
    radix_cache: bool
    hicache: bool
    hicache_ratio: float | None
    hicache_size_gb: float
    write_policy: str | None
    storage_backend: str | None
    chunked_prefill: int | None
    host_tokens: int | None  # L2, None when unknown (or no HiCache: 0)
    host_source: str  # "off", "ratio", "size", "given", "unknown"
    vocab_size: int | None
    notes: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "version": self.version,
            "model_path": self.model_path,
            "tp_size": self.tp_size,
            "page_size": self.page_size,
            "device_tokens": self.device_tokens,
            "host_tokens": self.host_tokens,
            "host_tokens_from": self.host_source,
            "max_req_input_len": self.max_req_input_len,
            "radix_cache": self.radix_cache,
            "hierarchical_cache": self.hicache,
            "hicache_ratio": self.hicache_ratio,
            "hicache_size_gb": self.hicache_size_gb,
            "write_policy": self.write_policy,
            "storage_backend": self.storage_backend,
            "chunked_prefill_size": self.chunked_prefill,
            "vocab_size": self.vocab_size,
        }


def _pos_int(value: Any, top: int) -> int | None:
    """A whole number 1..top, else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= top
    return value if ok else None


def _unusable(url: str, key: str, value: Any, expected: str) -> ServerError:
    return ServerError(
        f"{url}: /server_info says {key} = {shown(value)}: unusable (expected {expected})"
    )


def _count(doc: dict[str, Any], key: str, url: str, top: int, off: bool = False) -> int | None:
    """A whole number 1..top from the answer; None when absent or null (and, with `off`,
    when 0 or negative: SGLang's "switched off"); ServerError for anything else."""
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _unusable(url, key, value, f"a whole number 1..{top:,}")
    if off and value <= 0:
        return None
    if not 0 < value <= top:
        raise _unusable(url, key, value, f"a whole number 1..{top:,}")
    return value


def _number(doc: dict[str, Any], key: str, url: str, low: float, top: float,
            open_low: bool) -> float | None:  # fmt: skip
    """A finite number in (low, top] (open_low) or [low, top] from the answer; None when
    absent or null; ServerError for anything else."""
    value = doc.get(key)
    if value is None:
        return None
    span = f"{'(' if open_low else '['}{low:g}, {top:g}]"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _unusable(url, key, value, f"a number in {span}")
    below = value <= low if open_low else value < low
    if below or value > top or (isinstance(value, float) and not math.isfinite(value)):
        raise _unusable(url, key, value, f"a number in {span}")
    return float(value)


def _text(value: Any) -> str | None:
    return printable(value)[:300] if isinstance(value, str) and value else None


def host_pool_tokens(
    device_tokens: int, page: int, ratio: float | None, size_gb: float, bytes_per_token: int | None
) -> int | None:
    """L2 tokens as SGLang 0.5.20 sizes its host pool (None: bytes per token unknown)."""
    if size_gb > 0:
        if not bytes_per_token:
            return None
        size = int(size_gb * 1e9 // bytes_per_token)
    else:
        size = int(device_tokens * (2.0 if ratio is None else ratio))
    return (size // page + 1) * page


def _model_config(model_path: str | None) -> tuple[str, dict[str, Any]] | None:
    """The model's config.json when the server's model_path is a folder readable here."""
    from xputune.errors import XputuneError
    from xputune.userfiles import config_path, model_config

    if not model_path:
        return None
    try:
        path = config_path(model_path)
        if path is None or not path.is_file():
            return None
        return model_config(None, path)
    except (XputuneError, OSError):
        return None


def _bytes_per_token(named: tuple[str, dict[str, Any]] | None, tp: int, dtype: str) -> int | None:
    from xputune.errors import XputuneError
    from xputune.plan.models import load_geometry

    if named is None:
        return None
    try:
        geometry = load_geometry(None, named, tp, dtype)
    except XputuneError:
        return None
    return geometry.bytes_per_token if geometry is not None else None


def _kv_dtype(args: dict[str, Any], config: dict[str, Any] | None) -> str:
    """The KV cache dtype: --kv-cache-dtype, or the model's own for "auto"."""
    kv = args.get("kv_cache_dtype")
    if isinstance(kv, str) and kv not in ("auto", ""):
        return "fp8" if kv.startswith("fp8") else kv
    for key in ("torch_dtype", "dtype"):
        value = (config or {}).get(key)
        if isinstance(value, str) and value:
            return value
    return "bf16"


def parse_server_info(doc: Any, url: str, host_tokens: int | None = None) -> ServerInfo:
    """ServerInfo from GET /server_info; ServerError when it is not SGLang's answer."""
    if not isinstance(doc, dict) or "version" not in doc:
        raise ServerError(
            f"{url} does not look like an SGLang server (/server_info has no version)"
        )
    if doc.get("max_total_num_tokens") is None:
        raise ServerError(
            f"{url} does not look like an SGLang server (/server_info has no max_total_num_tokens)"
        )
    device = _count(doc, "max_total_num_tokens", url, TOKENS_MAX)
    assert device is not None
    page = _count(doc, "page_size", url, PAGE_MAX) or 1
    tp = _count(doc, "tp_size", url, TP_MAX) or 1
    max_req_input_len = _count(doc, "max_req_input_len", url, TOKENS_MAX)
    chunked = _count(doc, "chunked_prefill_size", url, TOKENS_MAX, off=True)
    model_path = _text(doc.get("model_path"))
    named = _model_config(model_path)
    config = named[1] if named is not None else None
    if (
        config is not None
        and "vocab_size" not in config
        and isinstance(config.get("text_config"), dict)
    ):
        config = config["text_config"]
    vocab = _pos_int((config or {}).get("vocab_size"), VOCAB_MAX)
    hicache = doc.get("enable_hierarchical_cache") is True
    ratio, size_gb = None, 0.0
    if hicache:  # read only where they size something
        ratio = _number(doc, "hicache_ratio", url, 0.0, RATIO_MAX, open_low=True)
        size_gb = _number(doc, "hicache_size", url, 0.0, SIZE_GB_MAX, open_low=False) or 0.0
    notes = []
    if not hicache:
        host, source = 0, "off"
    elif host_tokens is not None:
        host, source = host_tokens, "given"
    else:
        per_token = _bytes_per_token(named, tp, _kv_dtype(doc, config)) if size_gb > 0 else None
        host = host_pool_tokens(device, page, ratio, size_gb, per_token)
        source = "size" if size_gb > 0 else "ratio"
        if host is None:
            source = "unknown"
            notes.append(
                f"L2 size unknown: --hicache-size {size_gb:g} GB needs the model's bytes per "
                "token (its config.json is not readable here); give --host-tokens"
            )
        elif host > TOKENS_MAX:
            raise ServerError(
                f"{url}: /server_info sizes an L2 of {host:,} tokens ({source}): unusable "
                f"(more than {TOKENS_MAX:,})"
            )
    storage = _text(doc.get("hicache_storage_backend")) if hicache else None
    return ServerInfo(
        url=url,
        version=_text(doc.get("version")) or "?",
        model_path=model_path,
        tp_size=tp,
        page_size=page,
        device_tokens=device,
        max_req_input_len=max_req_input_len,
        radix_cache=doc.get("disable_radix_cache") is not True,
        hicache=hicache,
        hicache_ratio=ratio if hicache and size_gb <= 0 else None,
        hicache_size_gb=size_gb if hicache else 0.0,
        write_policy=_text(doc.get("hicache_write_policy")) if hicache else None,
        storage_backend=storage,
        chunked_prefill=chunked,
        host_tokens=host,
        host_source=source,
        vocab_size=vocab,
        notes=tuple(notes),
    )


def host_pool_bytes(doc: Any, info: ServerInfo) -> int | None:
    """Bytes of one rank's host pool as SGLang allocates it: its L2 tokens times the model's
    bytes per token at the server's TP size and KV dtype (`xputune verify` looks for a
    mapping of this size); None when the model's config.json is not readable here."""
    if not info.hicache or not info.host_tokens or not isinstance(doc, dict):
        return None
    named = _model_config(info.model_path)
    config = named[1] if named is not None else None
    per_token = _bytes_per_token(named, info.tp_size, _kv_dtype(doc, config))
    return None if per_token is None else info.host_tokens * per_token


def read_server(endpoint: Endpoint, host_tokens: int | None = None,
                timeout: float | None = None):  # fmt: skip
    """The server's ServerInfo, asked over HTTP, all of it within `timeout` seconds (default
    INFO_TIMEOUT); ServerError (one line) when it cannot be reached, does not answer in time
    or does not answer as SGLang does."""
    try:
        doc = get_json(endpoint, "/server_info", INFO_TIMEOUT if timeout is None else timeout)
    except ServerError as exc:
        if isinstance(exc, ServerTimeout) or str(exc).startswith("cannot reach"):
            raise
        raise ServerError(f"{endpoint.url} does not look like an SGLang server ({exc})") from None
    return parse_server_info(doc, endpoint.url, host_tokens)


def token_range(info: ServerInfo, given: tuple[int, int] | None):
    """The token ids to draw prompts from: given, else [TOKEN_LO, min(vocab, TOKEN_HI_MAX))."""
    from xputune.errors import XputuneError
    from xputune.measure.tokens import TokenRange

    if given is not None:
        lo, hi = given
        if info.vocab_size is not None and hi > info.vocab_size:
            raise XputuneError(
                f"--token-range {lo}:{hi} goes past the model's vocabulary of "
                f"{info.vocab_size} tokens (an id past it stops the server)"
            )
        try:
            return TokenRange(lo, hi)
        except ValueError as exc:
            raise XputuneError(f"--token-range: {exc}") from None
    if info.vocab_size is None:
        raise XputuneError(
            f"cannot tell the vocabulary size of the model at {info.url} (its config.json is "
            "not readable here): give --token-range LO:HI inside it, e.g. 10:1000"
        )
    lo = min(TOKEN_LO, max(0, info.vocab_size - 2))
    return TokenRange(lo, min(info.vocab_size, TOKEN_HI_MAX))
