"""`xputune probe`: its table and the probe itself.

Probe start-up time is a product feature (docs/benchmarks.md: within 2x of the native
`lstopo --input`): this module imports nothing heavy before the probe needs it.
"""

from __future__ import annotations

import gc

from xputune.cli.options import EXAMPLE, FORMAT, ROOT
from xputune.cli.output import Format, console, emit_data, note
from xputune.cli.spec import Command, Opt, Request
from xputune.host import open_host

PROBE = Command(
    ("probe",),
    "xputune.cli.probe_run:run_probe",
    (
        ROOT,
        EXAMPLE,
        FORMAT,
        Opt(
            "fallback_example",
            ("--fallback-example",),
            "When the host has no accelerator, probe this shipped example instead (a note on "
            "stderr says so). Handy for a first look on a laptop.",
            kind="name",
            metavar="NAME",
            complete="complete_examples",
        ),
        Opt(
            "strict",
            ("--strict",),
            "Fail on the first missing, unreadable or odd value instead of reporting it as "
            "unknown with a warning (for checking recordings).",
            kind="flag",
            default=False,
        ),
        Opt(
            "vendor_topo",
            ("--vendor-topo",),
            "A saved `nvidia-smi topo -m` or `xpu-smi topo -m` of this host: its NV# (NVLink) "
            "and XL (XPU Link) relations between cards go into the relation matrix (for "
            "recordings made before `record` saved them; '-' reads stdin).",
            kind="path",
            metavar="FILE",
        ),
    ),
)


def run_probe(req: Request) -> None:
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
    collecting = gc.isenabled()
    gc.disable()  # see _probe
    _spare_the_last_collections()
    try:
        _probe(req.root, req.example, req.fmt, req.fallback_example, req.strict, req.vendor_topo)
    finally:
        if collecting:
            gc.enable()


def _spare_the_last_collections() -> None:
    """Freeze the heap when the process exits (after the atexit handlers registered later,
    which run first): the interpreter's shutdown then skips its full collections over every
    object left, about 2 ms of a probe's ~28 ms on the 2-core VM (and of `python -c pass`).
    What they would find is nothing a probe leaves: it makes no cycles worth collecting (see
    _probe) and holds no file open across them. Once per process, however often a test runs
    the probe in it."""
    global _FREEZE_AT_EXIT
    if not _FREEZE_AT_EXIT:
        import atexit

        atexit.register(gc.freeze)
        _FREEZE_AT_EXIT = True


_FREEZE_AT_EXIT = False


def _probe(
    root: str | None,
    example: str | None,
    fmt: Format,
    fallback_example: str | None,
    strict: bool,
    vendor_topo: str | None,
) -> None:
    """The probe, run without the cyclic garbage collector: it makes no cycles worth
    collecting, and the ~40 modules it imports and the tables it builds made the collector
    pass over them again and again (~2 ms of a 60 ms start-up)."""
    from xputune.devices.enrich import vendor_info
    from xputune.devices.link_sources import vendor_links
    from xputune.topology.discover import discover

    host = open_host(root, example)
    topo = discover(host, strict)
    if fallback_example and not topo.cards and not example:
        note(f"note: {topo.source} has no accelerator; showing example {fallback_example}")
        host = open_host(None, fallback_example)
        topo = discover(host, strict)
    vendor = vendor_info(topo, live=host.live)
    for said in vendor.notes:  # what a vendor library or tool said: data
        note(f"note: {said}")
    topo, source = vendor_links(topo, host, vendor, vendor_topo)
    if fmt is Format.table:
        from xputune.cli.probe_render import render

        render(topo, console(), vendor.cards, source)
    else:
        from xputune.topology.serialize import to_dict

        emit_data(to_dict(topo, vendor.as_json(), relation_source=source), fmt)
