"""A node short of memory, written the way the kernel writes node meminfo.

The seed box's nodes are idle (about 200 GB free each). A real box often is not: another
process (a previous server's pools, a training job) holds anonymous memory on one node. This
rewrites one node's /sys/devices/system/node/nodeN/meminfo of a copied recording with that
node's lines (drivers/base/node.c: "Node %d %-16s%8lu kB", the rows in the kernel's order),
consistent with each other: MemUsed = MemTotal - MemFree; the held memory is anon, 2 MiB THP
where it can be; page cache and slab are what an idle node of the recording shows.
"""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.build_fixtures import meminfo_line

KB = 1024


def node_meminfo(node: int, total_kb: int, held_kb: int, file_kb: int = 4_993_997) -> str:
    """A node's meminfo where `held_kb` of anonymous memory is in use beside a small page cache
    (`file_kb`) and the kernel's own slab; the rest is free."""
    slab_reclaimable = 499_399
    slab = 832_332
    kernel = 18_432 + held_kb // 512  # stacks, and the page tables of what is held
    used = held_kb + file_kb + slab + kernel
    free = total_kb - used
    if free < 0:
        raise ValueError(f"node {node}: {used} kB used exceeds its {total_kb} kB")
    active_file, inactive_file = file_kb // 3, file_kb - file_kb // 3
    rows = [
        ("MemTotal", total_kb),
        ("MemFree", free),
        ("MemUsed", used),
        ("SwapCached", 0),
        ("Active", held_kb // 2 + active_file),
        ("Inactive", held_kb - held_kb // 2 + inactive_file),
        ("Active(anon)", held_kb // 2),
        ("Inactive(anon)", held_kb - held_kb // 2),
        ("Active(file)", active_file),
        ("Inactive(file)", inactive_file),
        ("Unevictable", 0),
        ("Mlocked", 0),
        ("Dirty", 112),
        ("Writeback", 0),
        ("FilePages", file_kb),
        ("Mapped", file_kb // 40),
        ("AnonPages", held_kb),
        ("Shmem", 8192),
        ("KernelStack", 18_432),
        ("PageTables", held_kb // 512),
        ("NFS_Unstable", 0),
        ("Bounce", 0),
        ("WritebackTmp", 0),
        ("KReclaimable", slab_reclaimable),
        ("Slab", slab),
        ("SReclaimable", slab_reclaimable),
        ("SUnreclaim", slab - slab_reclaimable),
        ("AnonHugePages", held_kb // 2048 * 2048),
        ("ShmemHugePages", 0),
        ("ShmemPmdMapped", 0),
        ("FileHugePages", 0),
        ("FilePmdMapped", 0),
    ]
    lines = [f"Node {node} {meminfo_line(k, v)}" for k, v in rows]
    lines += [
        f"Node {node} HugePages_Total: {0:5d}",
        f"Node {node} HugePages_Free:  {0:5d}",
        f"Node {node} HugePages_Surp:  {0:5d}",
    ]
    return "\n".join(lines) + "\n"


def make_busy(root: Path, node: int, held_gb: float) -> Path:
    """Rewrite node `node` of the copied tree at `root` to hold `held_gb` GB of anon memory."""
    path = root / "sys" / "devices" / "system" / "node" / f"node{node}" / "meminfo"
    total = next(
        int(line.split()[3]) for line in path.read_text().splitlines() if "MemTotal:" in line
    )
    path.write_text(node_meminfo(node, total, int(held_gb * 1e9) // KB))
    return path
