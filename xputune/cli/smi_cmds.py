"""smi: the cards as the vendor tools report them (xpu-smi, nvidia-smi, NVML), live or saved."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.checks import given
from xputune.cli.common import Format, FormatOpt, console, emit_data


def smi(
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input",
            "-i",
            metavar="FILE",
            help="A saved output of xpu-smi or nvidia-smi (default table, -L, -q, -q -x, -m "
            "or topo -m; form and vendor are detected; '-' reads stdin) instead of asking "
            "the host.",
            callback=given,
        ),
    ] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Show cards as xpu-smi reports them: name, memory, utilisation, firmware, affinity.

    The same for nvidia-smi's outputs. Without --input, runs `xpu-smi -q -x` (falling back
    to `xpu-smi -q`) with a timeout, or on a host without xpu-smi reads NVIDIA cards through
    NVML. Cards carry probe's names (xpu0..,
    gpu0..) and bus ids, so the two commands join. A value the tool printed but that cannot be
    read is shown as unknown with a warning; a file in which nothing is recognisable is refused.
    NUMA and PCIe placement come from `xputune probe`, which reads sysfs; this command shows
    what only the vendor tool knows.

    Examples:

        xputune smi
        xputune smi --input saved-xpu-smi-q.txt --format json
        nvidia-smi topo -m | xputune smi --input -
    """
    from xputune.devices.xpusmi.source import load

    report = load(input_file)
    if fmt is Format.table:
        from xputune.cli.smi_render import render

        render(report, console())
    else:
        emit_data(report.as_json(), fmt)


def register(app: typer.Typer) -> None:
    app.command()(smi)
