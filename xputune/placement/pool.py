"""Which mapping of a rank's address space holds its host KV pool.

The pool is one large allocation (SGLang's host pools allocate their whole buffer at once, one
tensor for K and V together), made one of these ways, each seen in smaps as:
  - an anonymous private mapping (no name; "[anon:NAME]" where a name was set): SGLang's
    torch allocation, 0.5.23's parallel THP prefault, xputune's HostBuffer (hicache/hostbuf.py:
    its 2 MiB-aligned range becomes a mapping of its own once advised and bound);
  - anonymous shared memory, named "/dev/zero (deleted)": 0.5.23's MAP_SHARED|MAP_ANONYMOUS
    prefault;
  - a /dev/shm file ("/dev/shm/#<inode> (deleted)" for xputune's unnamed TP-shared buffer,
    hicache/tpshared.py) or a memfd ("/memfd:NAME (deleted)": SGLang's alloc_shm);
  - hugetlbfs ("/anon_hugepage (deleted)"; numa_maps marks it `huge`): SGLANG_HUGEPAGE_SIZE.

How it is picked. With the expected size (the server's /server_info, or --hicache-size on its
command line; report.py says which): the candidate whose size is within POOL_TOLERANCE of it
(plus up to SLACK bytes for alignment and a shared buffer's header), the nearest first. Without
one: the largest candidate, with a warning that its size could not be checked. When no
candidate fits, the pool is unknown and a warning names the largest mapping there was; that
is discovery's policy (unknown with a warning), never drift.
"""

from __future__ import annotations

from dataclasses import dataclass

from xputune.host.procmaps import NumaMapsLine, SmapsEntry

#: How far a mapping's size may be from the expected pool size and still be the pool: SGLang
#: rounds the pool down to whole tokens and up to whole pages, which is far inside this.
POOL_TOLERANCE = 0.10
#: Bytes a mapping may hold beyond the tolerance: a 2 MiB alignment and a shared header.
SLACK = 4 << 20
SHM_PREFIXES = ("/dev/shm/", "/memfd:", "/dev/zero")
HUGETLB_NAMES = ("/anon_hugepage",)


def kind(entry: SmapsEntry) -> str | None:
    """ "anon", "shmem" or "hugetlb" for a mapping that may hold a pool; None for the rest
    (files, the heap, the stack, the vdso)."""
    name = entry.name
    if name.startswith(HUGETLB_NAMES) or (entry.hugetlb and not entry.get("Rss")):
        return "hugetlb"
    if not name or name.startswith("[anon:"):
        return "shmem" if entry.shared else "anon"
    if name.startswith(SHM_PREFIXES):
        return "shmem"
    return None


@dataclass(frozen=True)
class Pool:
    """The mapping that holds a rank's pool, with its numa_maps line (None: no line)."""

    smaps: SmapsEntry
    numa: NumaMapsLine | None
    kind: str
    how: str  # why this mapping, in words


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def pick(
    entries: list[SmapsEntry],
    numa: dict[int, NumaMapsLine],
    expected: int | None,
    warnings: list[str],
    where: str,
) -> Pool | None:
    """The pool's mapping among `entries`, or None with a warning (see the docstring)."""
    found = [(e, k) for e in entries if (k := kind(e)) is not None]
    largest = max(found, key=lambda item: item[0].size, default=None)
    if expected is not None and expected > 0:
        low, high = expected * (1 - POOL_TOLERANCE), expected * (1 + POOL_TOLERANCE) + SLACK
        fits = [(e, k) for e, k in found if low <= e.size <= high]
        if fits:
            entry, k = min(fits, key=lambda item: (abs(item[0].size - expected),
                                                   -item[0].resident))  # fmt: skip
            how = f"size {gib(entry.size)}, the expected {gib(expected)} within 10%"
            return Pool(entry, numa.get(entry.start), k, how)
        seen = "no such mapping at all"
        if largest is not None:
            seen = f"the largest is {gib(largest[0].size)} at {largest[0].start:#x}"
        warnings.append(
            f"{where}: no anonymous or shared-memory mapping of about {gib(expected)} (the "
            f"expected pool); {seen}; pool taken as unknown"
        )
        return None
    if largest is None:
        warnings.append(f"{where}: no anonymous or shared-memory mapping; pool taken as unknown")
        return None
    entry, k = largest
    warnings.append(
        f"{where}: the pool's size is unknown (no --hicache-size on the server's command line "
        f"and no answer from /server_info): took the largest anonymous or shared-memory "
        f"mapping ({gib(entry.size)} at {entry.start:#x})"
    )
    return Pool(entry, numa.get(entry.start), k, f"the largest candidate, {gib(entry.size)}")


__all__ = ["POOL_TOLERANCE", "Pool", "gib", "kind", "pick"]
