"""A port for a server this tool starts, chosen where the kernel never hands one out.

Binding port 0 finds a free port in the kernel's ephemeral range (net.ipv4.ip_local_port_range,
32768-60999 by default). Between that probe and the server's own bind come 20-60 s of model
loading, in which the server's own processes take ephemeral ports too: a TP-2 engine's gloo
pairs listen on them, every outgoing connection uses one as its source. When one lands on the
chosen port the server cannot bind (uvicorn exits 3 after startup) and its own post-warmup
request reaches the stranger instead. A port below the ephemeral range is only ever taken by
someone asking for it by number; among those, one free now is drawn at random, so two sweeps
started together rarely draw the same.
"""

from __future__ import annotations

import random
import socket

from xputune.host import HostView, open_host

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
#: Where the kernel's ephemeral range starts when its setting cannot be read (Linux's default).
DEFAULT_EPHEMERAL_START = 32768
#: The draw stays above the well-known and the commonly configured service ports.
LOWEST = 20000
TRIES = 64


def ephemeral_start(view: HostView) -> int:
    """The first port of the kernel's ephemeral range ("32768\\t60999" in its setting)."""
    try:
        first = int(view.read_text(RANGE_FILE).split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_START
    return first if 1024 < first <= 65535 else DEFAULT_EPHEMERAL_START


def _free(family: socket.AddressFamily, host: str, port: int) -> bool:
    with socket.socket(family) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def server_port(host: str = "127.0.0.1", view: HostView | None = None, run: int = 1) -> int:
    """A port free now on HOST, below the ephemeral range when there is room below it; with
    `run`, the first of that many free ports in a row (a cluster's instances: first + i)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    top = ephemeral_start(view or open_host())
    low = max(1024, min(LOWEST, top - 1000))
    draw = random.SystemRandom()
    if top - low >= 1000 + run:
        for _ in range(TRIES):
            port = draw.randrange(low, top - run + 1)
            if all(_free(family, host, p) for p in range(port, port + run)):
                return port
    if run > 1:
        raise OSError(f"no {run} free ports in a row below {top} on {host}")
    with socket.socket(family) as s:  # no room below, or all busy: the kernel's choice
        s.bind((host, 0))
        return int(s.getsockname()[1])
