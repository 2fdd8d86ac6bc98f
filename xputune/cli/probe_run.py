"""The probe itself, free of typer, plus a fast path that runs it without building the CLI.

Probe start-up time is a product feature (DESIGN: as fast as `lstopo --input`). Importing typer
costs over 100 ms, so `xputune probe` with only its own plain options is parsed by
cli/fastpath.py from SPEC; anything else (help, a typo, another command) goes to typer, which
explains. Tests check that both paths print the same bytes.
"""

from __future__ import annotations

import sys

from xputune.cli.checks import given
from xputune.cli.fastpath import EXAMPLE, ROOT, Opt, Spec, format_opt
from xputune.cli.output import Format, console, emit_data
from xputune.host import open_host

SPEC = Spec(
    ("probe",),
    (
        ROOT,
        EXAMPLE,
        format_opt(),
        Opt("fallback_example", ("--fallback-example",), check=given),
        Opt("strict", ("--strict",), bool, False),
        Opt("vendor_topo", ("--vendor-topo",), check=given),
    ),
    "run_probe",
)


def run_probe(
    root: str | None,
    example: str | None,
    fmt: Format,
    fallback_example: str | None,
    strict: bool = False,
    vendor_topo: str | None = None,
) -> None:
    from xputune.devices.enrich import vendor_info
    from xputune.devices.link_sources import vendor_links
    from xputune.topology.discover import discover

    host = open_host(root, example)
    topo = discover(host, strict)
    if fallback_example and not topo.cards and not example:
        sys.stderr.write(
            f"note: {topo.source} has no accelerator; showing example {fallback_example}\n"
        )
        host = open_host(None, fallback_example)
        topo = discover(host, strict)
    vendor = vendor_info(topo, live=host.live)
    from xputune.userfiles import printable

    for note in vendor.notes:  # what a vendor library or tool said: data
        sys.stderr.write(f"note: {printable(note)}\n")
    topo, source = vendor_links(topo, host, vendor, vendor_topo)
    if fmt is Format.table:
        from xputune.cli.probe_render import render

        render(topo, console(), vendor.cards, source)
    else:
        from xputune.topology.serialize import to_dict

        emit_data(to_dict(topo, vendor.as_json(), relation_source=source), fmt)
