"""record then probe --root gives what the probe saw when recording."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from tests.conftest import SEED_BOX
from xputune.host import open_host
from xputune.topology.discover import discover
from xputune.topology.recording import record
from xputune.topology.serialize import to_dict


def _record(root: str, out: Path) -> dict:
    topo, count = record(open_host(root), str(out))
    assert count > 100
    return to_dict(topo)


def test_live_host_round_trips(tmp_path: Path) -> None:
    out = tmp_path / "this-host.tar.gz"
    seen = _record("/", out)
    replayed = to_dict(discover(open_host(str(out))))
    assert replayed == seen


def test_fixture_round_trips_and_keeps_symlinks(tmp_path: Path) -> None:
    out = tmp_path / "seed.tar.xz"
    seen = _record(str(SEED_BOX), out)
    assert to_dict(discover(open_host(str(out)))) == seen
    with tarfile.open(out) as tar:
        names = {m.name: m for m in tar.getmembers()}
    link = names["seed/sys/bus/pci/devices/0000:23:00.0"]
    assert link.issym() and link.linkname.startswith("../../../devices/pci")
    assert "seed/sys/devices/system/node/node1/cpumap" in names  # hwloc's files ride along


def test_record_command_scrubs(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "box.tar.gz"
    code, _, err = run_cli("record", str(out), "--root", str(SEED_BOX))
    assert code == 0 and "recorded" in err
    code, probed, _ = run_cli("probe", "--root", str(out), "-f", "json")
    direct = run_cli("probe", "--root", str(SEED_BOX), "-f", "json")[1]
    assert code == 0 and json.loads(probed) == json.loads(direct)
