"""A server's processes: from the pid of its launcher, or the process listening on its port, to
the scheduler process of each rank.

SGLang (0.5.20 to 0.5.23, managers/scheduler.py) retitles every scheduler process with
setproctitle: "sglang::scheduler" followed by one "_<PART><n>" per parallel dimension larger
than one, in the order DP, PP, ATTN_CP, MOE_DP, TP, EP ("sglang::scheduler_TP3",
"sglang::scheduler_DP0_TP3"; a server at TP 1 has a bare "sglang::scheduler", rank 0). The
title replaces the process's argv, so /proc/PID/cmdline is the title then NULs, and comm is
its first 15 bytes ("sglang::schedul", too short to hold the rank). The title also overwrites
the environment area: such a process's environ reads as NULs, so its variables are read from
the nearest ancestor whose environ is intact (intent.py).

Parentage comes from /proc/PID/stat (field 4, ppid) of every process: always there, unlike
task/TID/children (CONFIG_PROC_CHILDREN). A port is traced to its process as ss(8) does: the
inode of the LISTEN socket in /proc/net/tcp and tcp6, then the process whose fd link names
"socket:[inode]".
"""

from __future__ import annotations

import re

from xputune.errors import HostError, XputuneError
from xputune.host.procinfo import Stat, listening_inodes, nul_fields, parse_stat, socket_inode
from xputune.host.reader import Reader
from xputune.tuples import NamedTuple

TITLE = "sglang::scheduler"
_PART = re.compile(r"_(DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d{1,6})")
#: Socket tables a listening port is looked up in (IPv4, then IPv6).
NET_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


class RankId(NamedTuple):
    """A scheduler's place in the server: its TP rank and, where the server has them, DP and
    PP ranks; `label` as people read it ("TP3", "DP1 TP3")."""

    tp: int
    dp: int | None
    pp: int | None
    label: str


def scheduler_rank(title: str) -> RankId | None:
    """The rank a scheduler's title names; None when the title is no scheduler's."""
    if not title.startswith(TITLE):
        return None
    rest = title[len(TITLE) :].rstrip()
    parts = _PART.findall(rest)
    if "".join(f"_{k}{v}" for k, v in parts) != rest:
        return None
    found = {kind: int(value) for kind, value in parts}
    label = " ".join(f"{kind}{value}" for kind, value in parts if kind in ("DP", "PP", "TP"))
    return RankId(found.get("TP", 0), found.get("DP"), found.get("PP"), label or "TP0")


class Processes:
    """The processes of one host as /proc lists them (pid -> stat), read once."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.view = reader.view
        self.stats: dict[int, Stat] = {}
        for name in self.view.listdir("/proc"):
            if not name.isdigit():
                continue
            stat = reader.value(f"/proc/{name}/stat", parse_stat)
            if stat is not None:
                self.stats[int(name)] = stat
        self._argv: dict[int, tuple[str, ...]] = {}

    def exists(self, pid: int) -> bool:
        return pid in self.stats

    def children(self, pid: int) -> list[int]:
        return sorted(p for p, s in self.stats.items() if s.ppid == pid and p != pid)

    def descendants(self, pid: int) -> list[int]:
        """Every process below `pid`, nearest first (breadth first, pids in order)."""
        below: dict[int, list[int]] = {}
        for child, stat in self.stats.items():
            if child != stat.ppid:
                below.setdefault(stat.ppid, []).append(child)
        out: list[int] = []
        queue = [pid]
        seen = {pid}
        while queue:
            here = queue.pop(0)
            for child in sorted(below.get(here, ())):
                if child not in seen:
                    seen.add(child)
                    out.append(child)
                    queue.append(child)
        return out

    def ancestors(self, pid: int) -> list[int]:
        """`pid`'s parent, its parent, ... up to the top (1 or a process outside the tree)."""
        out: list[int] = []
        here = self.stats.get(pid)
        while here is not None and here.ppid in self.stats and here.ppid not in out:
            out.append(here.ppid)
            here = self.stats.get(here.ppid)
        return out

    def argv(self, pid: int) -> tuple[str, ...]:
        """/proc/PID/cmdline's strings (a retitled process: its title); () when unreadable."""
        if pid not in self._argv:
            data = self.reader.data(f"/proc/{pid}/cmdline")
            self._argv[pid] = tuple(nul_fields(data or b""))
        return self._argv[pid]

    def title(self, pid: int) -> str:
        argv = self.argv(pid)
        return argv[0] if argv else ""


def schedulers(procs: Processes, top: int) -> list[tuple[int, RankId]]:
    """(pid, rank) of every scheduler process at or below `top`, by rank."""
    found = []
    for pid in [top, *procs.descendants(top)]:
        rank = scheduler_rank(procs.title(pid))
        if rank is not None:
            found.append((pid, rank))
    return sorted(found, key=lambda item: (item[1].dp or 0, item[1].pp or 0, item[1].tp, item[0]))


def listener(procs: Processes, port: int) -> int:
    """The process listening on TCP `port` (the topmost, when its children share the socket).

    XputuneError when nothing listens there, or no process this user may look into holds it.
    """
    reader, view = procs.reader, procs.view
    inodes: set[int] = set()
    for table in NET_TABLES:
        text = reader.text(table)
        if text is None:
            continue
        found, bad = listening_inodes(text, port, table)
        inodes |= found
        for exc in bad[:1]:
            reader.odd(table, exc.value, exc.expected, "line skipped")
    if not inodes:
        raise XputuneError(
            f"nothing listens on TCP port {port} on {view.label} (is the server on this host "
            "and up? give its launcher's --pid instead)"
        )
    holders: list[int] = []
    closed = 0
    for pid in sorted(procs.stats):
        folder = f"/proc/{pid}/fd"
        try:
            names = view.listdir(folder)
        except HostError:
            closed += 1
            continue
        for name in names:
            target = view.readlink(f"{folder}/{name}")
            if target is not None and socket_inode(target) in inodes:
                holders.append(pid)
                break
    if not holders:
        hint = f" ({closed} processes could not be looked into: run as root)" if closed else ""
        raise XputuneError(
            f"TCP port {port} listens on {view.label} but no process holding it was found"
            f"{hint}; give the server's --pid instead"
        )
    held = set(holders)
    tops = [pid for pid in holders if procs.stats[pid].ppid not in held]
    return min(tops or holders)


__all__ = ["TITLE", "Processes", "RankId", "listener", "scheduler_rank", "schedulers"]
