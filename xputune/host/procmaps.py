"""The one reader of a process's memory maps: /proc/PID/numa_maps and /proc/PID/smaps.

Both formats are the kernel's (fs/proc/task_mmu.c; proc(5), numa(7) and
Documentation/admin-guide/mm/numa_memory_policy.rst describe them), and both are read by two
callers: hicache/ (a buffer asking about itself) and placement/ (xputune verify reading a
server's ranks through a host view), so the quirks are learned once:

numa_maps, one line per mapping: the start address in hex, the policy as mpol_to_str prints
it (`<mode>[=<flags>][:<nodelist>]`: default, local, bind:0, prefer:1, interleave:0-3,
bind=static:2, and two modes that hold a space, "weighted interleave:0-1" and
"prefer (many):0-1"), then `file=PATH` (spaces, tabs, newlines and '=' octal-escaped, so
"/dev/shm/#12 (deleted)" reads "/dev/shm/#12\\040(deleted)") or `heap` or `stack`, `huge`
for a hugetlbfs mapping, and only where pages are present: anon=, dirty=, mapped=, mapmax=,
swapcache=, active=, writeback=, one N<node>= per node holding pages, kernelpagesize_kB=.
Counts are pages of the mapping's kernel page size: 4 kB for anonymous and shmem memory even
when transparent huge pages back it (a PMD-mapped THP counts 512), 2048 or 1048576 kB for
hugetlbfs. So bytes on a node are N<node> * kernelpagesize_kB * 1024 whatever the page kind.

smaps, one block per mapping: a /proc/PID/maps header (`start-end perms offset dev inode
[name]`), then `Key: value kB` lines (Size, KernelPageSize, Rss, Anonymous, AnonHugePages,
ShmemPmdMapped, Shared_Hugetlb, Private_Hugetlb, Locked, ...), `THPeligible: 0|1`,
`ProtectionKey: N` on some CPUs and `VmFlags: rd wr ... hg dc`. AnonHugePages counts THP of a
private mapping, ShmemPmdMapped those of shmem, *_Hugetlb hugetlbfs pages (which Rss leaves
out).

Both readers are liberal about lines they do not know and strict about the ones they do: a
line that is neither becomes a HostDataError in the list handed back beside what was read, so
discovery can say "unknown, with a warning" about the one mapping it needed and go on.
"""

from __future__ import annotations

from xputune.errors import HostDataError
from xputune.host.values import format_cpulist, parse_cpulist, unescape_octal
from xputune.tuples import NamedTuple

#: numa_maps keys that carry a page count (task_mmu.c show_numa_map, in its order).
COUNT_KEYS = ("anon", "dirty", "mapped", "mapmax", "swapcache", "active", "writeback")
#: Words that stand alone after the policy: where the mapping comes from, or hugetlbfs.
MARKS = ("heap", "stack", "huge")
#: The policy modes mm/mempolicy.c names (policy_modes[]); a later kernel may add one.
POLICY_MODES = ("default", "prefer", "bind", "interleave", "weighted interleave", "local",
                "prefer (many)")  # fmt: skip
#: Most digits a count or an address may have: 2^64 is 20 decimal, 16 hex digits.
_MAX_DIGITS = 20


class Policy(NamedTuple):
    """A mapping's NUMA memory policy as numa_maps prints it."""

    mode: str  # one of POLICY_MODES (or a later kernel's word)
    flags: str  # "static", "relative", "balancing" or several joined by "|"; "" when none
    nodes: tuple[int, ...]  # the nodelist; () for default and local

    def __str__(self) -> str:
        flags = f"={self.flags}" if self.flags else ""
        if not self.nodes:
            return f"{self.mode}{flags}"
        return f"{self.mode}{flags}:{format_cpulist(self.nodes)}"


class NumaMapsLine(NamedTuple):
    """One line of /proc/PID/numa_maps."""

    start: int
    policy: Policy
    file: str | None  # the backing file, unescaped; None for anonymous memory
    marks: tuple[str, ...]  # of MARKS
    counts: dict[str, int]  # COUNT_KEYS present
    pages: dict[int, int]  # pages present per node (N<node>=)
    page_kb: int | None  # kernelpagesize_kB (present only when pages are)

    @property
    def bytes_per_node(self) -> dict[int, int]:
        """Resident bytes per node (pages times the mapping's kernel page size)."""
        size = (self.page_kb or 4) * 1024
        return {node: count * size for node, count in self.pages.items()}


def _count(text: str, path: str, line: str) -> int:
    if not text.isdigit() or len(text) > _MAX_DIGITS:
        raise HostDataError(path, line, "expected a page count")
    return int(text)


def parse_policy(text: str, path: str) -> Policy:
    """A policy as mpol_to_str prints it: `<mode>[=<flags>][:<nodelist>]`."""
    head, colon, nodelist = text.partition(":")
    mode, _, flags = head.partition("=")
    words = mode.split(" ")
    if not mode or not all(w and all(c.isalpha() or c in "()-_" for c in w) for w in words):
        raise HostDataError(path, text, "expected a memory policy like bind:0 or default")
    if flags and not all(f.isalpha() for f in flags.split("|")):
        raise HostDataError(path, text, "expected policy flags like =static")
    try:
        nodes = parse_cpulist(nodelist, path) if colon else ()
    except HostDataError:
        nodes = ()
    if colon and not nodes:
        raise HostDataError(path, text, "expected a node list like bind:0-3 after ':'")
    return Policy(mode, flags, nodes)


#: The words of POLICY_MODES: `bind=static:0` is a policy with flags, not a field `bind`.
_MODE_WORDS = frozenset(word for mode in POLICY_MODES for word in mode.split())


def _is_field(token: str) -> bool:
    """Whether `token` starts the part after the policy: a mark, or key=value whose key is no
    policy word (so a field a later kernel adds is still told from the policy)."""
    if token in MARKS:
        return True
    key, eq, _ = token.partition("=")
    return bool(eq) and key not in _MODE_WORDS and key.isidentifier()


def parse_numa_maps_line(line: str, path: str = "numa_maps") -> NumaMapsLine:
    """One numa_maps line; HostDataError naming it when it is not one the kernel writes."""
    start_text, _, rest = line.strip().partition(" ")
    if not start_text or len(start_text) > 16 or any(c not in "0123456789abcdef" for c in
                                                     start_text):  # fmt: skip
        raise HostDataError(path, line, "expected a numa_maps line starting with a hex address")
    start, tail = int(start_text, 16), parse_numa_fields(rest, path, line)
    return NumaMapsLine(start, *tail)


#: What follows a numa_maps address: policy, file, marks, counts, pages per node, page kB.
NumaFields = tuple[Policy, "str | None", tuple[str, ...], dict[str, int], dict[int, int],
                   "int | None"]  # fmt: skip


def parse_numa_fields(rest: str, path: str = "numa_maps", line: str | None = None) -> NumaFields:
    """What follows the address: (policy, file, marks, counts, pages per node, page kB)."""
    line = rest if line is None else line
    tokens = rest.split(" ")
    split = next((i for i, t in enumerate(tokens) if _is_field(t)), len(tokens))
    policy_text = " ".join(tokens[:split]).strip()
    if not policy_text:
        raise HostDataError(path, line, "expected a memory policy after the address")
    policy = parse_policy(policy_text, path)
    file: str | None = None
    marks: list[str] = []
    counts: dict[str, int] = {}
    pages: dict[int, int] = {}
    page_kb: int | None = None
    for token in tokens[split:]:
        if not token:
            continue
        if token in MARKS:
            marks.append(token)
            continue
        key, eq, value = token.partition("=")
        if not eq:
            raise HostDataError(path, line, f"expected key=value fields, found {token!r}")
        if key == "file":
            file = unescape_octal(value)
        elif key == "kernelpagesize_kB":
            page_kb = _count(value, path, line)
        elif key in COUNT_KEYS:
            counts[key] = _count(value, path, line)
        elif len(key) > 1 and key[0] == "N" and key[1:].isdigit():
            pages[int(key[1:])] = _count(value, path, line)
        # a key a later kernel adds (key=value) is not ours to judge
    if page_kb is not None and page_kb <= 0:
        raise HostDataError(path, line, "expected kernelpagesize_kB > 0")
    return policy, file, tuple(marks), counts, pages, page_kb


def parse_numa_maps(text: str, path: str = "numa_maps") -> tuple[dict[int, NumaMapsLine],
                                                                  list[HostDataError]]:  # fmt: skip
    """Every line by start address, and what was wrong with the lines that are not lines."""
    lines: dict[int, NumaMapsLine] = {}
    bad: list[HostDataError] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            entry = parse_numa_maps_line(raw, path)
        except HostDataError as exc:
            bad.append(exc)
            continue
        lines[entry.start] = entry
    return lines, bad


class SmapsEntry(NamedTuple):
    """One mapping of /proc/PID/smaps (sizes in bytes)."""

    start: int
    end: int
    perms: str  # "rw-p" (private) or "rw-s" (shared)
    inode: int
    name: str  # "" for anonymous memory; "[heap]", "/dev/shm/#12 (deleted)", ...
    sizes: dict[str, int]  # every "Key: N kB" line, in bytes
    thp_eligible: bool | None
    vm_flags: tuple[str, ...]

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def shared(self) -> bool:
        return self.perms[3:4] == "s"

    def get(self, key: str) -> int:
        return self.sizes.get(key, 0)

    @property
    def hugetlb(self) -> int:
        """hugetlbfs bytes, which Rss leaves out."""
        return self.get("Shared_Hugetlb") + self.get("Private_Hugetlb")

    @property
    def resident(self) -> int:
        return self.get("Rss") + self.hugetlb

    @property
    def huge(self) -> int:
        """Resident bytes on huge pages of any kind (THP anon, THP shmem or file, hugetlb)."""
        return (
            self.get("AnonHugePages")
            + self.get("ShmemPmdMapped")
            + self.get("FilePmdMapped")
            + self.hugetlb
        )


def _header(line: str, path: str) -> tuple[int, int, str, int, str] | None:
    """(start, end, perms, inode, name) of a maps header line; None when the line is not one."""
    fields = line.split(None, 5)
    span = fields[0] if fields else ""
    lo, dash, hi = span.partition("-")
    hexdigits = "0123456789abcdef"
    if not dash or not lo or not hi or len(lo) > 16 or len(hi) > 16:
        return None
    if any(c not in hexdigits for c in lo + hi):
        return None
    if len(fields) < 5 or len(fields[1]) != 4 or ":" not in fields[3] or not fields[4].isdigit():
        raise HostDataError(path, line, "expected a maps header: start-end perms offset dev inode")
    start, end = int(lo, 16), int(hi, 16)
    if end < start:
        raise HostDataError(path, line, "expected a mapping whose end is past its start")
    return start, end, fields[1], int(fields[4]), fields[5].strip() if len(fields) > 5 else ""


def parse_smaps(text: str, path: str = "smaps") -> tuple[list[SmapsEntry], list[HostDataError]]:
    """Every mapping in order, and what was wrong with lines no kernel writes.

    A bad line inside a block costs that line only; a header that is garbage drops its block
    (its lines cannot be told from the one before).
    """
    entries: list[SmapsEntry] = []
    bad: list[HostDataError] = []
    head: tuple[int, int, str, int, str] | None = None
    sizes: dict[str, int] = {}
    thp: bool | None = None
    flags: tuple[str, ...] = ()
    skipping = False

    def close() -> None:
        if head is not None:
            entries.append(SmapsEntry(*head, sizes, thp, flags))

    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            found = _header(line, path)
        except HostDataError as exc:
            bad.append(exc)
            close()
            head, skipping = None, True
            continue
        if found is not None:
            close()
            head, sizes, thp, flags, skipping = found, {}, None, (), False
            continue
        if skipping:
            continue
        key, colon, value = line.partition(":")
        fields = value.split()
        if head is None or not colon or not key or " " in key:
            bad.append(HostDataError(path, line, "expected 'Key: value' inside a mapping"))
            continue
        if key == "VmFlags":
            flags = tuple(fields)
        elif key == "THPeligible":
            if fields not in (["0"], ["1"]):
                bad.append(HostDataError(path, line, "expected THPeligible: 0 or 1"))
            else:
                thp = fields == ["1"]
        elif len(fields) == 2 and fields[1] == "kB":
            if not fields[0].isdigit() or len(fields[0]) > _MAX_DIGITS:
                bad.append(HostDataError(path, line, "expected a size in kB"))
            else:
                sizes[key] = int(fields[0]) * 1024
        # other keys (ProtectionKey: 0, later kernels' lines) are not ours to judge
    close()
    return entries, bad


def covering(entries: list[SmapsEntry], address: int) -> SmapsEntry | None:
    """The mapping whose range holds `address`."""
    for entry in entries:
        if entry.start <= address < entry.end:
            return entry
    return None


__all__ = [
    "COUNT_KEYS",
    "POLICY_MODES",
    "NumaMapsLine",
    "Policy",
    "SmapsEntry",
    "covering",
    "parse_numa_fields",
    "parse_numa_maps",
    "parse_numa_maps_line",
    "parse_policy",
    "parse_smaps",
]
