"""The kernel's cpulist format ("0-15,128-143"), read and written."""

from __future__ import annotations

from xputune.errors import HostDataError


def parse_cpulist(text: str, path: str = "cpulist") -> tuple[int, ...]:
    """CPUs named by a cpulist, sorted and unique; "" (a node with no CPUs) gives ()."""
    text = text.strip()
    if not text:
        return ()
    cpus: set[int] = set()
    for chunk in text.split(","):
        lo, sep, hi = chunk.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise HostDataError(path, text, "expected a cpulist like 0-15,128-143") from None
        if first < 0 or last < first:
            raise HostDataError(path, text, "expected a cpulist like 0-15,128-143")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: tuple[int, ...] | list[int] | set[int]) -> str:
    """The shortest cpulist for a set of CPUs, as the kernel prints it."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)
