"""The one reader of what /proc says about a process: status, stat, cmdline and environ, and
which socket listens on a port (/proc/net/tcp, tcp6, and the fd links that name a socket).

These are the kernel's formats (proc(5)): `status` is "Key:\\tvalue" lines (Cpus_allowed_list
and Mems_allowed_list are cpulists, read by host/values.py); `stat` is "pid (comm) state ppid
..." where comm may itself hold spaces and parentheses, so the fields start after the last
")"; `cmdline` and `environ` are NUL-separated (a process that retitles itself, as SGLang's
schedulers do through setproctitle, leaves its title then NULs in cmdline and may blank
environ entirely); /proc/net/tcp lines are "sl local rem st ... uid timeout inode" with
addresses as hex IP:PORT and st 0A for LISTEN; an fd link to a socket reads "socket:[INODE]".
Parsers raise HostDataError naming the file; callers decide whether that stops anything.
"""

from __future__ import annotations

from xputune.errors import HostDataError
from xputune.tuples import NamedTuple

#: /proc/net/tcp's state of a listening socket (include/net/tcp_states.h: TCP_LISTEN = 10).
LISTEN = "0A"
#: Most bytes of a title or a variable kept (a value is data: shown, never run).
_MAX_FIELD = 4096


def status_field(text: str, key: str, path: str) -> str | None:
    """The value of `key` in a status file ("Cpus_allowed_list:\\t0-15"); None when absent."""
    label = f"{key}:"
    for line in text.splitlines():
        if line.startswith(label):
            return line[len(label) :].strip()
    return None


class Stat(NamedTuple):
    """The fields of /proc/PID/stat a process tree needs."""

    pid: int
    comm: str
    state: str
    ppid: int


def parse_stat(text: str, path: str) -> Stat:
    """pid, comm, state and ppid of a stat line (comm may hold ") " itself)."""
    head, paren, rest = text.strip().rpartition(")")
    pid_text, _, comm = head.partition(" (")
    fields = rest.split()
    if not paren or not pid_text.isdigit() or len(fields) < 2 or not fields[1].isdigit():
        raise HostDataError(path, text, "expected 'pid (comm) state ppid ...'")
    return Stat(int(pid_text), comm, fields[0], int(fields[1]))


def nul_fields(data: bytes) -> list[str]:
    """cmdline or environ as its strings: NUL-separated, empty ones (padding) dropped,
    undecodable bytes replaced, each cut at _MAX_FIELD."""
    return [part.decode("utf-8", "replace")[:_MAX_FIELD] for part in data.split(b"\0") if part]


def environ_vars(data: bytes) -> dict[str, str]:
    """NAME=value pairs of an environ file; entries without '=' (or a blanked area) skipped."""
    out: dict[str, str] = {}
    for entry in nul_fields(data):
        name, eq, value = entry.partition("=")
        if eq and name:
            out[name] = value
    return out


def listening_inodes(text: str, port: int, path: str) -> tuple[set[int], list[HostDataError]]:
    """Inodes of the sockets in LISTEN state on `port` in a /proc/net/tcp or tcp6 table, and
    what was wrong with lines that are not table rows (the header line is skipped)."""
    found: set[int] = set()
    bad: list[HostDataError] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if not fields:
            continue
        try:
            local = fields[1]
            state = fields[3]
            inode = fields[9]
            port_hex = local.rpartition(":")[2]
            if not inode.isdigit() or len(port_hex) != 4:
                raise ValueError
            here = int(port_hex, 16)
        except (IndexError, ValueError):
            bad.append(HostDataError(path, line, "expected a /proc/net/tcp row"))
            continue
        if state == LISTEN and here == port and int(inode):
            found.add(int(inode))
    return found, bad


def socket_inode(target: str) -> int | None:
    """The inode of an fd link's target "socket:[12345]"; None for anything else."""
    if target.startswith("socket:[") and target.endswith("]"):
        digits = target[8:-1]
        if digits.isdigit() and len(digits) <= 20:
            return int(digits)
    return None


__all__ = [
    "LISTEN",
    "Stat",
    "environ_vars",
    "listening_inodes",
    "nul_fields",
    "parse_stat",
    "socket_inode",
    "status_field",
]
