"""record then probe --root gives what the probe saw when recording."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from tests.conftest import NVIDIA_BOX, SEED_BOX
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


# --- vendor outputs saved in the recording (xputune/vendor/, see devices/vendor_files.py) -------

XL_TOPO = Path(__file__).resolve().parents[1] / "devices" / "data" / "xpusmi" / "topo-xl.txt"


def test_extra_files_are_added_outside_sys_and_proc(tmp_path: Path, run_cli) -> None:
    """What a live host's tools printed goes in at <top>/xputune/vendor/; probe reads it back."""
    out = tmp_path / "seed.tar.gz"
    saved = {"/xputune/vendor/xpu-smi-topo-m.txt": XL_TOPO.read_bytes()}
    seen: list[str] = []

    def extra(topo) -> dict[str, bytes]:
        seen.extend(c.name for c in topo.cards)
        return saved

    topo, count = record(open_host(str(SEED_BOX)), str(out), extra=extra)
    assert seen == [c.name for c in topo.cards] and len(seen) == 8
    with tarfile.open(out) as tar:
        names = {m.name: m for m in tar.getmembers()}
        member = names["seed/xputune/vendor/xpu-smi-topo-m.txt"]
        assert member.isfile() and tar.extractfile(member).read() == XL_TOPO.read_bytes()
    assert names["seed/xputune"].isdir() and names["seed/xputune/vendor"].isdir()
    assert count == len(names)  # the count covers the added members too
    assert to_dict(discover(open_host(str(out)))) == to_dict(topo)
    code, probed, _ = run_cli("probe", "--root", str(out), "-f", "json")
    doc = json.loads(probed)
    assert code == 0 and doc["relation_source"] == "PCIe (sysfs) + xpu-smi topo -m"
    assert doc["relations"]["xpu0"]["xpu4"] == "XL" and doc["relations"]["xpu0"]["xpu5"] == "SYS"


def test_recording_a_recording_keeps_its_vendor_outputs(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "hgx.tar.xz"
    code, _, err = run_cli("record", str(out), "--root", str(NVIDIA_BOX))
    assert code == 0 and "note:" not in err
    with tarfile.open(out) as tar:
        assert "hgx/xputune/vendor/nvidia-smi-topo-m.txt" in tar.getnames()
    code, probed, _ = run_cli("probe", "--root", str(out), "-f", "json")
    doc = json.loads(probed)
    assert code == 0 and doc["relation_source"] == "PCIe (sysfs) + nvidia-smi topo -m"
    assert {doc["relations"]["gpu0"][f"gpu{i}"] for i in range(1, 8)} == {"NV18"}


def test_record_on_a_live_host_saves_what_the_tools_print(
    tmp_path: Path, run_cli, monkeypatch
) -> None:
    """`xputune record` on "/" with stand-in tools on PATH; the host is made to look like the
    HGX box (this machine has no card, and record asks only the tools of vendors present)."""
    from xputune.devices.xpusmi import run
    from xputune.topology import recording

    hgx = discover(open_host(str(NVIDIA_BOX)))
    monkeypatch.setattr(recording, "discover", lambda view: hgx._replace(source=view.label))
    saved = Path(str(NVIDIA_BOX)) / "xputune/vendor/nvidia-smi-topo-m.txt"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\n[ "$*" = "topo -m" ] && exec cat {saved}\nexit 6\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(run, "KNOWN_PATHS", ())
    out = tmp_path / "live.tar.gz"
    code, _, err = run_cli("record", str(out))
    assert code == 0
    assert err.splitlines()[0] == (
        f"note: {tool} -q -x: exit 6: no output; nvidia-smi -q -x not saved"
    )
    with tarfile.open(out) as tar:
        member = tar.getmember("live/xputune/vendor/nvidia-smi-topo-m.txt")
        assert tar.extractfile(member).read() == saved.read_bytes()
