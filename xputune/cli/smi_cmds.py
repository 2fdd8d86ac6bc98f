"""smi: the cards as Kunlunxin's xpu-smi reports them, live or from a saved output."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.common import Format, FormatOpt, console, emit_data


def smi(
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input",
            "-i",
            metavar="FILE",
            help="A saved output of xpu-smi -L, -q, -q -x, -m or topo -m (the form is "
            "detected; '-' reads stdin) instead of running the tool.",
        ),
    ] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Show cards as xpu-smi reports them: name, memory, utilisation, firmware, affinity.

    Without --input, runs `xpu-smi -q -x` (falling back to `xpu-smi -q`) with a timeout.
    NUMA and PCIe placement come from `xputune probe`, which reads sysfs; this command shows
    what only the vendor tool knows.

    Examples:

        xputune smi
        xputune smi --input saved-xpu-smi-q.txt --format json
        xpu-smi topo -m | xputune smi --input -
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
