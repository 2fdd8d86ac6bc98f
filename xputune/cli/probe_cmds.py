"""probe, record and examples: the host picture, and recordings of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from xputune.cli.checks import given
from xputune.cli.common import ExampleOpt, Format, FormatOpt, RootOpt, host_from
from xputune.cli.probe_run import run_probe

if TYPE_CHECKING:
    from xputune.topology.model import Topology


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
            callback=given,
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
    vendor_topo: Annotated[
        str | None,
        typer.Option(
            "--vendor-topo",
            metavar="FILE",
            help="A saved `nvidia-smi topo -m` or `xpu-smi topo -m` of this host: its NV# "
            "(NVLink) and XL (XPU Link) relations between cards go into the relation matrix "
            "(for recordings made before `record` saved them; '-' reads stdin).",
            callback=given,
        ),
    ] = None,
) -> None:
    """Show cards, NUMA nodes, PCIe switches (uplinks), NICs and host settings in one picture.

    Cards are Kunlunxin XPUs, NVIDIA GPUs or other accelerators. The relation matrix uses the
    legend of `nvidia-smi topo -m`; uplink groups are cards sharing a switch upstream port; the
    settings table says what helps or hurts the host-to-device KV path.

    Links between cards that PCIe cannot show come from the vendor: NV# (NVLink, from NVML on a
    live NVIDIA host) and XL (XPU Link, from `xpu-smi topo -m` on a live Kunlunxin host), or,
    for a recording, from the vendor outputs `record` saved in it, or from --vendor-topo FILE.
    Cards are matched by bus id where the vendor gives one, else by card order. Where the
    vendor and PCIe disagree on a PCIe-level relation, PCIe is kept with a warning. The
    matrix's title says what it is made of, e.g. "PCIe (sysfs) + nvidia-smi topo -m".

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
        xputune probe --root old-box.tar.gz --vendor-topo nvidia-smi-topo-m.txt
    """
    run_probe(root, example, fmt, fallback_example, strict, vendor_topo)


def record(
    out: Annotated[
        str,
        typer.Argument(
            help="Tarball to write: .tar.gz, .tar.bz2 or .tar.xz (or .tgz, .tbz2, .txz, .tar).",
            metavar="OUT",
            callback=given,
        ),
    ],
    no_scrub: Annotated[
        bool, typer.Option("--no-scrub", help="Keep MAC addresses, serials and GUIDs.")
    ] = False,
    root: RootOpt = None,
) -> None:
    """Record what `probe` reads into a tarball that `probe --root` replays.

    The layout is hwloc-gather-topology's (one top folder acting as /, symlinks kept), so
    `lstopo --input` reads it too. MAC addresses, serial numbers, GUIDs and host names are
    scrubbed unless --no-scrub. Send the file with a bug report or plan on a laptop.

    On a live host with NVIDIA or Kunlunxin cards, what the vendor tool prints is saved too:
    `nvidia-smi topo -m` and `nvidia-smi -q -x`, or `xpu-smi topo -m` and `xpu-smi -q -x`
    (where the tool is installed), under xputune/vendor/ in the recording, so that probe of
    the recording shows the NV# / XL links between cards. Serials and UUIDs in the -q -x
    document are scrubbed like the rest. A tool that is missing or fails costs only its file
    (a note on stderr says so).

    Example:

        xputune record box.tar.gz && xputune probe --root box.tar.gz
    """
    from xputune.devices.vendor_files import capture
    from xputune.topology.recording import record as record_host

    _check_out(out)
    view = host_from(root, None)
    notes: list[str] = []

    def vendor_outputs(topo: Topology) -> dict[str, bytes]:
        files, said = capture(view, topo, scrub=not no_scrub)
        notes.extend(said)
        return files

    topo, count = record_host(view, out, scrub=not no_scrub, extra=vendor_outputs)
    from xputune.userfiles import printable

    for note in notes:  # what a vendor tool said: data
        typer.echo(f"note: {printable(note)}", err=True)
    typer.echo(f"recorded {count} entries of {topo.source} to {out}", err=True)


def _check_out(out: str) -> None:
    """Refuse, before reading anything, a path that probe --root could not read back."""
    import os

    from xputune.errors import XputuneError
    from xputune.host.open import TARBALL_SUFFIXES

    if not out.endswith(TARBALL_SUFFIXES) or os.path.basename(out) in TARBALL_SUFFIXES:
        raise XputuneError(
            f"{out}: a recording is a tarball that probe --root reads back; name it "
            f"NAME.tar.gz, NAME.tar.bz2 or NAME.tar.xz (also {', '.join(TARBALL_SUFFIXES)})"
        )
    folder = os.path.dirname(out) or "."
    if not os.path.isdir(folder):
        raise XputuneError(f"{out}: no such directory {folder}")


def examples() -> None:
    """List the recordings shipped with xputune, for --example NAME."""
    from xputune.host.open import example_names

    for name in example_names():
        typer.echo(name)


def register(app: typer.Typer) -> None:
    app.command()(probe)
    app.command()(record)
    app.command()(examples)
