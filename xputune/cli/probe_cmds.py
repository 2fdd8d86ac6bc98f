"""probe, record and examples: the host picture, and recordings of it."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.common import ExampleOpt, Format, FormatOpt, RootOpt, host_from
from xputune.cli.probe_run import run_probe


def probe(
    root: RootOpt = None,
    example: ExampleOpt = None,
    fmt: FormatOpt = Format.table,
    fallback_example: Annotated[
        str | None,
        typer.Option(
            "--fallback-example",
            metavar="NAME",
            help="When the host has no accelerator, probe this shipped example instead "
            "(a note on stderr says so). Handy for a first look on a laptop.",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Fail on the first missing, unreadable or odd value instead of reporting it "
            "as unknown with a warning (for checking recordings).",
        ),
    ] = False,
) -> None:
    """Show cards, NUMA nodes, PCIe switches (uplinks), NICs and host settings in one picture.

    Cards are Kunlunxin XPUs, NVIDIA GPUs or other accelerators. The relation matrix uses the
    legend of `nvidia-smi topo -m`; uplink groups are cards sharing a switch upstream port; the
    settings table says what helps or hurts the host-to-device KV path.

    Where the vendor library is installed (Kunlunxin libxpuml.so, NVIDIA NVML), each card's
    product name, memory and driver version are added (JSON: vendor_info). A recording uses
    only a library named by XPUTUNE_XPUML_LIBRARY or XPUTUNE_NVML_LIBRARY, since a library on
    this machine describes this machine. XPUTUNE_VENDOR_LIBRARIES=off skips them all (NVML can
    take seconds to start where persistence mode is off).

    A value that is missing, unreadable or odd (a garbled attribute, a link that leads
    nowhere) is shown as unknown and named in a warning under the tables (JSON: warnings);
    the probe goes on. Only a tree that is not a host at all, a path escaping the root or a
    symlink loop stop it. --strict stops at the first odd value instead.

    Examples:

        xputune probe
        xputune probe --example h3c-hygon-p800
        xputune probe --root box.tar.gz --format json | jq '.cards[].numa_node'
        xputune probe --fallback-example h3c-hygon-p800
        xputune probe --root box.tar.gz --strict
    """
    run_probe(root, example, fmt, fallback_example, strict)


def record(
    out: Annotated[str, typer.Argument(help="Tarball to write: .tar.gz, .tar.bz2 or .tar.xz.")],
    no_scrub: Annotated[
        bool, typer.Option("--no-scrub", help="Keep MAC addresses, serials and GUIDs.")
    ] = False,
    root: RootOpt = None,
) -> None:
    """Record what `probe` reads into a tarball that `probe --root` replays.

    The layout is hwloc-gather-topology's (one top folder acting as /, symlinks kept), so
    `lstopo --input` reads it too. MAC addresses, serial numbers, GUIDs and host names are
    scrubbed unless --no-scrub. Send the file with a bug report or plan on a laptop.

    Example:

        xputune record box.tar.gz && xputune probe --root box.tar.gz
    """
    from xputune.topology.recording import record as record_host

    topo, count = record_host(host_from(root, None), out, scrub=not no_scrub)
    typer.echo(f"recorded {count} entries of {topo.source} to {out}", err=True)


def examples() -> None:
    """List the recordings shipped with xputune, for --example NAME."""
    from xputune.host.open import example_names

    for name in example_names():
        typer.echo(name)


def register(app: typer.Typer) -> None:
    app.command()(probe)
    app.command()(record)
    app.command()(examples)
