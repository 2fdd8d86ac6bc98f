"""What an L3 tier needs before SGLang starts, each missing piece said in one line.

A Mooncake-backed server that starts without its master, without libibverbs (the store's
library links it even over tcp) or with a segment its node cannot hold fails minutes later,
deep in SGLang's startup log, or worse, serves without L3. These checks run first:

  - the master answers on HOST:PORT (a TCP connect, 2 s);
  - the `mooncake` package is there for SGLang's interpreter and libibverbs.so.1 loads;
  - each NUMA node can hold the L2 pools and segments registered there;
  - the file backend's folder exists, is a folder and is writable;
  - SGLang's own layout flag, when given, is one the backend runs (Mooncake rewrites
    layer_first to page_first: said, not refused).

Returns (notes, refusals): a refusal stops a real launch; a dry run prints it as "would refuse".
Each refusal carries its own fix: the launcher says them one a line, and a fix said once after
several reasons would read as the last one's.
"""

from __future__ import annotations

import os
import socket

from xputune.launch.sglang import user_value
from xputune.plan.l3 import L3Plan, parse_address

CONNECT_TIMEOUT = 2.0


def _master_reachable(address: str) -> str | None:
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT):
            return None
    except OSError as exc:
        return (
            f"the Mooncake master {address} does not answer ({exc.strerror or exc}): start "
            "mooncake_master there, or name the one that runs with --l3-master"
        )


def _mooncake_missing(python: str | None = None, found: bool | None = None) -> str | None:
    """Why the store cannot load: the package missing for SGLang's interpreter (`found`, from
    the preflight; this interpreter's own when None), or libibverbs missing on this host."""
    import ctypes
    import importlib.util
    import shlex

    if found is None:
        found = importlib.util.find_spec("mooncake") is not None
        python = None
    if not found:
        if python is None:
            return (
                "the mooncake package is not installed for this Python "
                "(pip install mooncake-transfer-engine, or -non-cuda on a host without CUDA)"
            )
        return (
            f"the mooncake package is not installed for {shlex.quote(python)} "
            f"(`{shlex.quote(python)} -m pip install mooncake-transfer-engine`, or -non-cuda "
            "on a host without CUDA)"
        )
    try:
        ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return (
            "libibverbs.so.1 is missing: Mooncake's store links it even over tcp "
            "(Debian/Ubuntu: apt install libibverbs1)"
        )
    return None


def _folder_problem(folder: str) -> str | None:
    if not os.path.isabs(folder):
        return f"the L3 folder {folder!r} must be an absolute path (SGLang's workers cd elsewhere)"
    if not os.path.isdir(folder):
        return f"the L3 folder {folder} does not exist (create it first)"
    if not os.access(folder, os.W_OK | os.X_OK):
        return (
            f"the L3 folder {folder} is not writable by this user: give it write access, or "
            "name another with --l3-dir"
        )
    return None


def l3_preflight(
    plan: L3Plan,
    user_args: list[str],
    live: bool,
    python: str | None = None,
    mooncake: bool | None = None,
    master_in_set: bool = False,
) -> tuple[list[str], list[str]]:
    """(notes, refusals) for launching with `plan`'s L3 tier; `live`: the host is this one;
    `python` and `mooncake`: SGLang's interpreter and whether it has the mooncake package
    (launch/preflight.py; None: ask this interpreter); `master_in_set`: the master starts
    with the servers (launch cluster), so it cannot answer yet."""
    notes: list[str] = [f"note: {n}" for n in plan.notes]
    notes += [f"warning: {w}" for w in plan.warnings]
    refusals: list[str] = []
    req = plan.request
    layout = user_value(user_args, "--hicache-mem-layout")
    if req.backend == "mooncake":
        if layout == ["layer_first"]:
            notes.append(
                "note: --hicache-mem-layout layer_first in ARGS: SGLang rewrites it to "
                "page_first for mooncake (Mooncake never runs layer_first)"
            )
        master = req.master or "127.0.0.1:50051"
        reachable = None if master_in_set else _master_reachable(master)
        for problem in (_mooncake_missing(python, mooncake), reachable):
            if problem:
                refusals.append(problem)
    elif req.directory is not None and live:
        problem = _folder_problem(req.directory)
        if problem:
            refusals.append(problem)
    for node in plan.nodes:
        if node.fits is False:
            refusals.append(
                f"node {node.node} cannot hold its {node.registered_bytes / 1e9:,.1f} GB of L2 "
                f"and L3 (usable {node.usable_bytes / 1e9:,.1f} GB): lower --tier or "  # type: ignore[operator]
                "--l3-segment-gb"
            )
    return notes, refusals
