"""`xputune verify` against a server: find it, ask it how large its host pool is, read where
every rank's pool really is (placement/), and keep the result for `status` and `metrics`.

The server is found from `--pid` (its launcher: the schedulers are its descendants) or from
`--url` (the process listening on that port). The pool's expected size comes from the server
itself when it can be asked (live host only: GET /server_info gives its L2 tokens, the model's
config.json its bytes per token; measure/server.py), else from --hicache-size on its command
line (placement/read.py); a recording (`--root`) is never paired with a live server's answer,
since the two would describe different machines.
"""

from __future__ import annotations

from typing import Any

from xputune.errors import XputuneError
from xputune.host import HostView
from xputune.host.reader import Reader
from xputune.measure.client import Endpoint, ServerError, get_json
from xputune.measure.server import INFO_TIMEOUT, host_pool_bytes, parse_server_info
from xputune.placement import intent
from xputune.placement.procs import Processes, listener, schedulers
from xputune.placement.read import read
from xputune.placement.report import document


def server_endpoint(argv: tuple[str, ...]) -> Endpoint | None:
    """Where the server listens, from its command line (SGLang's defaults 127.0.0.1:30000)."""
    if not argv:
        return None
    host = (intent.flag(argv, "--host") or ["127.0.0.1"])[-1]
    port = (intent.flag(argv, "--port") or ["30000"])[-1]
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    try:
        return Endpoint.parse(f"http://{host}:{port}")
    except XputuneError:
        return None


def _server_argv(procs: Processes, top: int) -> tuple[str, ...]:
    """The command line SGLang's launcher ran with, below `top` (which may be xputune's
    `launch sglang --verify`, whose own flags come first)."""
    ranks = schedulers(procs, top) if procs.exists(top) else []
    return intent.server_argv(procs, ranks[0][0], top) if ranks else procs.argv(top)


def expected_pool(endpoint: Endpoint, timeout: float = INFO_TIMEOUT) -> tuple[int | None, str]:
    """(bytes, source) of one rank's pool as the server sizes it; ServerError when it does
    not answer as SGLang does."""
    doc = get_json(endpoint, "/server_info", timeout)
    info = parse_server_info(doc, endpoint.url)
    size = host_pool_bytes(doc, info)
    if size is None:
        return None, "unknown"
    return size, f"/server_info of {endpoint.url}: {info.host_tokens:,} L2 tokens"


def verify(
    view: HostView, url: str | None, pid: int | None, timeout: float = INFO_TIMEOUT
) -> dict[str, Any]:
    """The verify document (placement/report.py) of the server at `url` or under `pid`."""
    endpoint = Endpoint.parse(url) if url else None
    reader = Reader(view)
    procs = Processes(reader)
    if pid is not None:
        top, found_by = pid, f"--pid {pid}"
    elif endpoint is not None:
        top = listener(procs, endpoint.port)
        found_by = f"pid {top}, listening on port {endpoint.port}"
    else:
        raise XputuneError("give the server's --url or its launcher's --pid")
    expected, source = None, "unknown"
    asked = endpoint
    if view.live:
        asked = endpoint or server_endpoint(_server_argv(procs, top))
        if asked is not None:
            try:
                expected, source = expected_pool(asked, timeout)
            except ServerError as exc:
                reader.warn(f"pool size not asked of the server ({exc}); read from its command "
                            "line instead")  # fmt: skip
    from xputune.topology.discover import discover

    topo = discover(view)
    reading = read(reader, procs, top, found_by, topo, expected, source)
    return document(reading, url=asked.url if asked is not None else None)


def keep(view: HostView, doc: dict[str, Any]) -> str:
    """Keep `doc` as the last verification; the line that says where, or why not ("" for a
    recording, which has no state directory to keep it in)."""
    from xputune.tune import verifystate

    if not view.writable():
        return ""
    try:
        return f"kept as the last verification in {verifystate.save(view, doc)}"
    except XputuneError as exc:
        return f"not kept as the last verification: {exc}"


__all__ = ["expected_pool", "keep", "server_endpoint", "verify"]
