"""What the probe's start-up no longer pays for stays out (figures from
tests/bench/bench_probe.py): hashlib loads OpenSSL (~3 ms), pathlib brings urllib and
ipaddress (~4 ms), dataclasses and inspect compile source, and typing (160 KB of bytecode)
is for type checkers; its modules import none of them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: What the probe imports of its own layers (host, topology, devices) and of the CLI's output.
PROBE_MODULES = (
    "xputune.host.tarcache",
    "xputune.topology.discover",
    "xputune.topology.serialize",
    "xputune.devices.enrich",
    "xputune.devices.link_sources",
    "xputune.cli.jsontext",
)
NEVER = ("hashlib", "_hashlib", "pathlib", "dataclasses", "inspect", "typing")


def _modules(code: str) -> set[str]:
    """The modules `code` imports beyond what this Python's start-up imported already (an
    editable install's finder imports pathlib at every start: not the probe's doing)."""
    report = "\nimport sys\nprint('\\nMODULES ' + __import__('json').dumps(sorted(sys.modules)))"
    found = []
    for text in ("", code):
        done = subprocess.run(
            [sys.executable, "-c", text + report],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        found.append(set(json.loads(done.stdout.rsplit("\nMODULES ", 1)[1])))
    return found[1] - found[0] - {"json", "json.decoder", "json.encoder", "json.scanner"}


def test_the_probe_layers_import_nothing_heavy() -> None:
    modules = _modules("".join(f"import {m}\n" for m in PROBE_MODULES))
    assert sorted(modules & set(NEVER)) == []


@pytest.mark.parametrize("source", [["--example", "h3c-hygon-p800"], ["--root", "TREE"]])
def test_a_json_probe_loads_no_openssl_pathlib_or_source_compiler(source, tmp_path) -> None:
    if source[0] == "--root":
        from tests.fixtures.trees import host_tree

        source = ["--root", str(host_tree("small-base"))]
    argv = ["probe", *source, "-f", "json"]
    modules = _modules(f"from xputune.cli.entry import main\nrc = main({argv!r})\n")
    assert sorted(modules & set(NEVER)) == []
