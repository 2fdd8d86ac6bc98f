"""record and examples: recordings of a host, and the ones shipped (probe: cli/probe_run.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xputune.cli.options import ROOT
from xputune.cli.output import note
from xputune.cli.spec import Arg, Command, Opt, Request
from xputune.host import open_host

if TYPE_CHECKING:
    from xputune.topology.model import Topology

RECORD = Command(
    ("record",),
    "xputune.cli.probe_cmds:record",
    (
        Opt(
            "no_scrub",
            ("--no-scrub",),
            "Keep MAC addresses, serials and GUIDs.",
            kind="flag",
            default=False,
        ),
        ROOT,
    ),
    args=(
        Arg(
            "out",
            "OUT",
            "Tarball to write: .tar.gz, .tar.bz2 or .tar.xz (or .tgz, .tbz2, .txz, .tar).",
        ),
    ),
)
EXAMPLES = Command(("examples",), "xputune.cli.probe_cmds:examples")


def record(req: Request) -> None:
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

    _check_out(req.out)
    view = open_host(req.root, None)
    notes: list[str] = []

    def vendor_outputs(topo: Topology) -> dict[str, bytes]:
        files, said = capture(view, topo, scrub=not req.no_scrub)
        notes.extend(said)
        return files

    topo, count = record_host(view, req.out, scrub=not req.no_scrub, extra=vendor_outputs)
    for said in notes:  # what a vendor tool said: data
        note(f"note: {said}")
    note(f"recorded {count} entries of {topo.source} to {req.out}")


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


def examples(req: Request) -> None:
    """List the recordings shipped with xputune, for --example NAME."""
    from xputune.host.open import example_names

    for name in example_names():
        print(name)
