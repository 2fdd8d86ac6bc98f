"""The probe itself, free of typer, plus a fast path that runs it without building the CLI.

Probe start-up time is a product feature (DESIGN: as fast as `lstopo --input`). Importing typer
costs over 100 ms, so `xputune probe` with only its own plain options is parsed here; anything
else (help, a typo, another command) goes to typer, which explains. A test checks that both
paths print the same bytes.
"""

from __future__ import annotations

import os
import sys

from xputune.cli.output import Format, console, emit_data
from xputune.host import open_host

_OPTIONS = {"--root", "--example", "--format", "--fallback-example", "--vendor-topo"}
_FLAGS = {"--strict"}
_ALIASES = {"-f": "--format"}


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
    for note in vendor.notes:
        sys.stderr.write(f"note: {note}\n")
    topo, source = vendor_links(topo, host, vendor, vendor_topo)
    if fmt is Format.table:
        from xputune.cli.probe_render import render

        render(topo, console(), vendor.cards, source)
    else:
        from xputune.topology.serialize import to_dict

        emit_data(to_dict(topo, vendor.as_json(), relation_source=source), fmt)


def parse_fast(argv: list[str]) -> dict[str, str] | None:
    """probe's options when argv is a plain probe call, else None (typer then handles it)."""
    if not argv or argv[0] != "probe" or os.environ.get("XPUTUNE_NO_FASTPATH"):
        return None
    opts: dict[str, str] = {}
    i = 1
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        name = _ALIASES.get(name, name)
        if name in _FLAGS and not eq and name not in opts:
            opts[name] = "yes"
            i += 1
            continue
        if name not in _OPTIONS or name in opts:
            return None
        if not eq:
            i += 1
            if i >= len(argv) or argv[i].startswith("-"):
                return None
            value = argv[i]
        opts[name] = value
        i += 1
    if opts.get("--format", "table") not in Format.__members__:
        return None
    return opts


def fast_probe(argv: list[str]) -> bool:
    """Run probe when argv allows the fast path; False means "use typer"."""
    opts = parse_fast(argv)
    if opts is None:
        return False
    run_probe(
        opts.get("--root"),
        opts.get("--example"),
        Format(opts.get("--format", "table")),
        opts.get("--fallback-example"),
        "--strict" in opts,
        opts.get("--vendor-topo"),
    )
    return True
