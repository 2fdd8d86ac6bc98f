"""bench host: the cost of pinning a host KV buffer with 4 KB pages vs transparent huge pages."""

from __future__ import annotations

from xputune.cli.options import FORMAT, MAX_NODE
from xputune.cli.output import Format, console, emit_data
from xputune.cli.spec import Command, Opt, Request

BENCH_HOST = Command(
    ("bench", "host"),
    "xputune.cli.bench_host_cmds:host",
    (
        Opt("size", ("--size",), "Buffer size (1G, 512MiB, bytes). Default 1 GiB, capped to "
            "half the free memory.", metavar="SIZE"),
        Opt("node", ("--node",), "Bind the buffer to this NUMA node (mbind) and run on its "
            "CPUs. Default: first touch on the node this command runs on.", kind="int", min=0,
            max=MAX_NODE, metavar="N"),
        Opt("pin", ("--pin",), "auto (device runtime if present, else mlock), mlock, or "
            "runtime.", kind="choice", choices=("auto", "mlock", "runtime"), default="auto"),
        FORMAT,
    ),
)  # fmt: skip


def host(req: Request) -> None:
    """Measure what 4 KB pages cost a pinned host KV buffer, against MADV_HUGEPAGE.

    HiCache's L2 pool is host memory registered with the card (cudaHostRegister,
    xpu_host_register). Registration pins pages. With 4 KB pages a 100 GB pool needs ~26M
    translation entries in the CPU page tables, the IOMMU and the card's DMA engine, and huge
    pages must be asked for before pinning: THP cannot merge pages once they are pinned.

    This builds the same buffer twice (4 KB pages, then MADV_HUGEPAGE), faults it in, pins it
    (device runtime when present, mlock otherwise) and shows fault and pin times, the huge
    pages the kernel granted, page-table growth, and whether the pages sit on the expected
    NUMA node (asked with move_pages, not assumed).

    Example:

        xputune bench host --size 4G --node 1
    """
    from xputune.hicache.hostbench import bench_host, parse_size

    data = bench_host(parse_size(req.size) if req.size else None, req.node, req.pin)
    if req.fmt is Format.table:
        _render(data)
    else:
        emit_data(data, req.fmt)


def _render(data: dict) -> None:
    from rich.table import Table

    from xputune.cli.output import text
    from xputune.hicache.hostbench import human_bytes

    size = data["size_bytes"]
    title = (
        f"Pinning {human_bytes(size)} with {data['pin_method']} "
        f"(THP enabled={data['thp_enabled']}, defrag={data['thp_defrag']})"
    )
    table = Table(title=text(title))  # the THP modes are what the host's files say
    for col in ("pages", "fault in", "pin", "huge", "VmPTE+", "entries", "placement"):
        table.add_column(col, justify="left" if col in ("pages", "placement") else "right")
    for run in data["runs"]:
        placement = run["placement"]
        sampled = sum(placement["pages_per_node"].values()) or 1
        spread = " ".join(
            f"N{k}:{100 * v / sampled:.0f}%" for k, v in placement["pages_per_node"].items()
        )
        verdict = "ok" if placement["ok"] else "[red]MISPLACED[/red]"
        table.add_row(
            "4 KB" if run["pages"] == "4k" else "THP",
            f"{run['populate_s'] * 1e3:.0f} ms",
            f"{run['pin_s'] * 1e3:.1f} ms",
            f"{100 * run['anon_huge_bytes'] / size:.0f}%",
            human_bytes(run["page_table_bytes"]),
            f"{run['translation_entries']:,}",
            f"{spread} {verdict}",
        )
    out = console()
    out.print(table)
    if data["capped"]:
        out.print("[yellow]size capped to half the available memory[/yellow]")
    speed = data["pin_speedup"]
    out.print(
        f"THP: pin {speed:.1f}x faster, {data['translation_ratio']:.0f}x fewer entries for the "
        f"IOMMU/device MMU to map; pages expected on node {data['home_node']}."
        if speed
        else "no pin time measured"
    )
    if data["runs"][1]["anon_huge_bytes"] == 0:
        out.print(
            "[yellow]no huge pages granted: check /sys/kernel/mm/transparent_hugepage/enabled "
            "(madvise or always) and memory fragmentation[/yellow]"
        )
    out.print(
        "VmPTE counts page-table memory; on x86 the kernel keeps one spare page table per huge "
        "page (to split it later), so it may not shrink even when the entries do."
    )
