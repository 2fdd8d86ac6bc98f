"""The text of /proc/PID files as Linux writes them, for recordings of SGLang servers.

Modelled field by field on real kernel output, each shape from a named source:
  - status and smaps: this project's CI host, kernel 6.18 (`cat /proc/self/status`, and the
    smaps block of a 64 MiB MADV_HUGEPAGE anonymous mapping: every key in the kernel's order,
    AnonHugePages = Rss when THP backs it, THPeligible 1, VmFlags "rd wr mr mw me ac hg");
  - numa_maps: the same host ("7f2e33200000 default anon=16384 dirty=16384 active=0 N0=16384
    kernelpagesize_kB=4" for that THP mapping: counts are 4 KB pages even on huge pages), LKML
    (Yi Wang, "Re: [PATCH] bitmap: fix a unproper remap when mpol_rebind_nodemask()",
    2022-06-14: "7ff77e200000 bind:3 anon=262144 dirty=262144 active=0 N1=262144
    kernelpagesize_kB=4", a bound range whose pages sit on another node after a cpuset
    change) and the hwloc-devel list ("Re: [hwloc-devel] Memory affinity", 2011: "bind:1 anon=...
    N0=256407 N1=1594468", a bound range split over two nodes), checked against
    fs/proc/task_mmu.c show_numa_map (field order, mapped= only when it differs from anon and
    dirty, N<node>= only for nodes holding pages, kernelpagesize_kB last) and mm/mempolicy.c
    mpol_to_str (policy words, "=static" flags, octal escapes in file=);
  - stat: proc(5) (52 fields; comm in parentheses, 15 bytes: "sglang::schedul");
  - cmdline and environ of a setproctitle'd scheduler: measured here (the title, then NULs to
    the old argv's length; environ all NULs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

KB = 1024
PAGE = 4 * KB
MIB = 1 << 20
GIB = 1 << 30

_SMAPS_KEYS = (
    "Size", "KernelPageSize", "MMUPageSize", "Rss", "Pss", "Pss_Dirty", "Shared_Clean",
    "Shared_Dirty", "Private_Clean", "Private_Dirty", "Referenced", "Anonymous", "KSM",
    "LazyFree", "AnonHugePages", "ShmemPmdMapped", "FilePmdMapped", "Shared_Hugetlb",
    "Private_Hugetlb", "Swap", "SwapPss", "Locked",
)  # fmt: skip


def cpumask(cpus: set[int] | list[int] | tuple[int, ...], bits: int) -> str:
    """A kernel bitmap ("%*pb"): 32-bit hex words, most significant first."""
    mask = 0
    for cpu in cpus:
        mask |= 1 << cpu
    words = [(mask >> (32 * i)) & 0xFFFFFFFF for i in range(max(1, bits // 32))]
    return ",".join(f"{w:08x}" for w in reversed(words))


def cpulist(cpus: set[int] | list[int] | tuple[int, ...]) -> str:
    from xputune.host.values import format_cpulist

    return format_cpulist(tuple(cpus))


@dataclass
class Mapping:
    """One VMA: its smaps block and numa_maps line come from the same figures."""

    start: int
    size: int
    perms: str = "rw-p"
    name: str = ""
    dev: str = "00:00"
    inode: int = 0
    offset: int = 0
    policy: str = "default"
    pages: dict[int, int] = field(default_factory=dict)  # 4 KB pages per node (or huge pages)
    huge: int = 0  # bytes on THP (AnonHugePages / ShmemPmdMapped)
    page_kb: int = 4
    flags: str = "rd wr mr mw me ac"
    thp_eligible: int = 0
    mapmax: int = 1
    anon: bool = True  # anonymous pages (private writable memory)
    dirty: bool = True
    hugetlb: bool = False
    swapped: int = 0

    @property
    def resident(self) -> int:
        return sum(self.pages.values()) * self.page_kb * KB

    def smaps(self) -> str:
        head = (f"{self.start:x}-{self.start + self.size:x} {self.perms} {self.offset:08x} "
                f"{self.dev} {self.inode}")  # fmt: skip
        if self.name:
            head = f"{head:<72} {self.name}" if len(head) < 72 else f"{head} {self.name}"
        else:
            head += " "
        rss = 0 if self.hugetlb else self.resident
        shared = self.perms[3] == "s"
        v = dict.fromkeys(_SMAPS_KEYS, 0)
        v["Size"] = self.size
        v["KernelPageSize"] = v["MMUPageSize"] = self.page_kb * KB
        v["Rss"] = rss
        v["Pss"] = rss // self.mapmax
        if self.dirty:
            v["Pss_Dirty"] = rss // self.mapmax
            v["Shared_Dirty" if shared and self.mapmax > 1 else "Private_Dirty"] = rss
        else:
            v["Shared_Clean" if self.mapmax > 1 else "Private_Clean"] = rss
        v["Referenced"] = rss
        v["Anonymous"] = rss if self.anon and not shared else 0
        if shared:
            v["ShmemPmdMapped"] = self.huge
        else:
            v["AnonHugePages"] = self.huge
        if self.hugetlb:
            v["Shared_Hugetlb" if shared else "Private_Hugetlb"] = self.resident
        v["Swap"] = self.swapped
        lines = [head]
        lines += [f"{k + ':':<16}{v[k] // KB:>8} kB" for k in _SMAPS_KEYS]
        lines.append(f"{'THPeligible:':<16}{self.thp_eligible:>8}")
        lines.append(f"VmFlags: {self.flags} ")
        return "\n".join(lines) + "\n"

    def numa_line(self) -> str:
        out = f"{self.start:x} {self.policy}"
        if self.name.startswith("["):
            mark = self.name.strip("[]")
            out += f" {mark}" if mark in ("heap", "stack") else ""
        elif self.name and not self.name.startswith("[anon"):
            out += " file=" + self.name.replace(" ", "\\040")
        if self.hugetlb:
            out += " huge"
        pages = sum(self.pages.values())
        if not pages:
            return out + "\n"
        anon = pages if self.anon and self.perms[3] == "p" else 0
        dirty = pages if self.dirty else 0
        if anon:
            out += f" anon={anon}"
        if dirty:
            out += f" dirty={dirty}"
        if pages not in (anon, dirty):
            out += f" mapped={pages}"
        if self.mapmax > 1:
            out += f" mapmax={self.mapmax}"
        if not self.hugetlb:
            out += " active=0"
        for node in sorted(self.pages):
            if self.pages[node]:
                out += f" N{node}={self.pages[node]}"
        return out + f" kernelpagesize_kB={self.page_kb}\n"


def library(start: int, path: str, inode: int, node: int, sizes=(0x2E000, 0x2A4000, 0x10C000)):
    """A shared object's read-only, text and data mappings (file pages, mapped by many)."""
    out, at = [], start
    for i, (size, perms) in enumerate(zip(sizes, ("r--p", "r-xp", "r--p"), strict=False)):
        pages = {node: size // PAGE // (3 if i == 1 else 1)}
        out.append(Mapping(at, size, perms, path, "fd:01", inode, at - start, pages=pages,
                           anon=False, dirty=False, mapmax=9,
                           flags="rd mr mw me" + (" ex" if "x" in perms else "")))  # fmt: skip
        at += size
    data = Mapping(at, 0x3000, "rw-p", path, "fd:01", inode, at - start, pages={node: 3},
                   flags="rd wr mr mw me ac")  # fmt: skip
    return [*out, data]


def status(name: str, pid: int, ppid: int, cpus: tuple[int, ...], mems: tuple[int, ...],
           threads: int, rss_kb: int, ncpus: int = 256) -> str:  # fmt: skip
    """/proc/PID/status of a process (fields and order of Linux 6.18)."""
    mems_mask = cpumask(mems, 1024)
    return (
        f"Name:\t{name[:15]}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\nNgid:\t0\n"
        f"Pid:\t{pid}\nPPid:\t{ppid}\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n"
        f"FDSize:\t256\nGroups:\t \nNStgid:\t{pid}\nNSpid:\t{pid}\nNSpgid:\t4100\n"
        f"NSsid:\t3990\nKthread:\t0\nVmPeak:\t{rss_kb + 9_000_000:>8} kB\n"
        f"VmSize:\t{rss_kb + 8_800_000:>8} kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\n"
        f"VmHWM:\t{rss_kb:>8} kB\nVmRSS:\t{rss_kb:>8} kB\nRssAnon:\t{rss_kb - 400_000:>8} kB\n"
        f"RssFile:\t  398112 kB\nRssShmem:\t    1888 kB\nVmData:\t{rss_kb + 2_100_000:>8} kB\n"
        "VmStk:\t     132 kB\nVmExe:\t    2908 kB\nVmLib:\t  912464 kB\n"
        f"VmPTE:\t{max(64, rss_kb // 500):>8} kB\nVmSwap:\t       0 kB\n"
        "HugetlbPages:\t       0 kB\nCoreDumping:\t0\nTHP_enabled:\t1\n"
        f"untag_mask:\t0xffffffffffffffff\nThreads:\t{threads}\nSigQ:\t0/3095040\n"
        "SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n"
        "SigIgn:\t0000000001001000\nSigCgt:\t0000000108004a02\nCapInh:\t0000000000000000\n"
        "CapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\n"
        "CapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n"
        "Speculation_Store_Bypass:\tthread vulnerable\n"
        "SpeculationIndirectBranch:\tconditional enabled\n"
        f"Cpus_allowed:\t{cpumask(cpus, ncpus)}\nCpus_allowed_list:\t{cpulist(cpus)}\n"
        f"Mems_allowed:\t{mems_mask}\nMems_allowed_list:\t{cpulist(mems)}\n"
        "voluntary_ctxt_switches:\t48213\nnonvoluntary_ctxt_switches:\t9120\n"
    )


def stat(pid: int, comm: str, ppid: int, pgrp: int, threads: int, rss_pages: int,
         cpu: int) -> str:  # fmt: skip
    """/proc/PID/stat: 52 fields, comm cut to 15 bytes (TASK_COMM_LEN - 1)."""
    fields = [
        str(pid), f"({comm[:15]})", "S", str(ppid), str(pgrp), "3990", "34816", str(pgrp),
        "4194560", "2218011", "0", "1893", "0", "91482", "20117", "0", "0", "20", "0",
        str(threads), "0", "8811234", "98304000000", str(rss_pages), "18446744073709551615",
        "94613094731776", "94613097687453", "140724905148912", "0", "0", "0", "0",
        "16781312", "134234626", "0", "0", "0", "17", str(cpu), "0", "0", "0", "0", "0",
        "94613098430512", "94613098786584", "94613126139904", "140724905156283",
        "140724905156402", "140724905156402", "140724905160677", "0",
    ]  # fmt: skip
    return " ".join(fields) + "\n"


def nul_joined(parts: list[str], pad_to: int = 0) -> bytes:
    data = b"".join(p.encode() + b"\0" for p in parts)
    return data + b"\0" * max(0, pad_to - len(data))


def titled(title: str, old_argv_len: int) -> bytes:
    """cmdline of a process that setproctitle'd itself: the title, NULs to the old length."""
    data = title.encode()
    return data + b"\0" * max(1, old_argv_len - len(data))


def net_tcp(rows: list[tuple[str, str, str, int]]) -> str:
    """/proc/net/tcp: (local hex ip:port, remote, state, inode) per socket."""
    head = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid "
            " timeout inode")  # fmt: skip
    lines = [head]
    for i, (local, remote, state, inode) in enumerate(rows):
        lines.append(
            f"{i:>4}: {local} {remote} {state} 00000000:00000000 00:00000000 00000000     0  "
            f"      0 {inode} 1 0000000000000000 100 0 0 10 0"
        )
    return "\n".join(lines) + "\n"
