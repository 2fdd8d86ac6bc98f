"""smi: the cards as the vendor tools report them (xpu-smi, nvidia-smi, NVML), live or saved."""

from __future__ import annotations

from xputune.cli.options import FORMAT
from xputune.cli.output import Format, console, emit_data
from xputune.cli.spec import Command, Opt, Request

SMI = Command(
    ("smi",),
    "xputune.cli.smi_cmds:smi",
    (
        Opt(
            "input_file", ("--input", "-i"),
            "A saved output of xpu-smi or nvidia-smi (default table, -L, -q, -q -x, -m, topo -m, "
            "or nvidia-smi --query-gpu=... --format=csv with its header line; form and vendor "
            "are detected; '-' reads stdin) instead of asking the host.",
            kind="path", metavar="FILE",
        ),
        FORMAT,
    ),
)  # fmt: skip


def smi(req: Request) -> None:
    """Show cards as xpu-smi reports them: name, memory, utilisation, firmware, affinity.

    The same for nvidia-smi's outputs. Without --input, runs `xpu-smi -q -x` (falling back
    to `xpu-smi -q`) with a timeout, or on a host without xpu-smi reads NVIDIA cards through
    NVML. Cards carry probe's names (xpu0..,
    gpu0..) and bus ids, so the two commands join. A value the tool printed but that cannot be
    read is shown as unknown with a warning; a file in which nothing is recognisable is refused.
    NUMA and PCIe placement come from `xputune probe`, which reads sysfs; this command shows
    what only the vendor tool knows.

    A GPU split into MIG instances stays one card, with its instances listed under it (GPU
    and compute instance ids, memory, SMs; JSON: mig_devices). The driver's version is the
    number alone: driver 610's `KMD Version` where the tool prints one, without the notes
    newer tools add beside it.

    Examples:

        xputune smi
        xputune smi --input saved-xpu-smi-q.txt --format json
        nvidia-smi topo -m | xputune smi --input -
        nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total --format=csv \\
            | xputune smi -i -
    """
    from xputune.devices.xpusmi.source import load

    report = load(req.input_file)
    if req.fmt is Format.table:
        from xputune.cli.smi_render import render

        render(report, console())
    else:
        emit_data(report.as_json(), req.fmt)
