"""CPU packages where the kernel does not know them.

The kernel writes physical_package_id = -1 when the platform does not say which package a CPU
sits in. Third-party data showing it: two of hwloc's recordings of real machines
(tests/data/hwloc, BSD-3-Clause, source in its README), an IBM POWER7 (256ppc-8n8s4t) and an
IBM Z (20s390-2g6s4c), whose every CPU says -1 and whose cpuinfo has no "physical id". It was
read as package 0: one package of 256 CPUs on an 8-socket POWER7. It is now unknown: no
package, one warning naming the path and the CPUs.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import host_tree
from xputune.host.view import DirView, TarView
from xputune.topology.discover import discover

HWLOC = Path(__file__).resolve().parents[1] / "data" / "hwloc"
PACKAGE_ID = "physical_package_id"


def package_warnings(topo) -> list[str]:
    return [w for w in topo.warnings if PACKAGE_ID in w]


@pytest.mark.parametrize(("name", "cpus"), [("256ppc-8n8s4t", "0-255"), ("20s390-2g6s4c", "0-19")])
def test_minus_one_on_every_cpu_is_no_package(name: str, cpus: str) -> None:
    topo = discover(TarView(str(HWLOC / f"{name}.tar.bz2")))
    assert topo.cpu.packages == ()
    (warning,) = package_warnings(topo)
    assert warning.startswith(f"/sys/devices/system/cpu/cpu0/topology/{PACKAGE_ID}: read '-1'")
    count = len(range(int(cpus.split("-")[0]), int(cpus.split("-")[1]) + 1))
    assert f"the package of {count} CPU(s) ({cpus}) is unknown" in warning


def test_the_probe_summary_says_unknown(run_cli) -> None:
    code, out, err = run_cli("probe", "--root", str(HWLOC / "256ppc-8n8s4t.tar.bz2"))
    assert code == 0, err
    assert re.search(r"unknown package\(s\), 256 CPUs", " ".join(out.split()))


def _tree(tmp_path: Path) -> Path:
    """small-base without cpuinfo's "physical id", so sysfs says where each CPU is."""
    tree = tmp_path / "box"
    shutil.copytree(host_tree("small-base"), tree, symlinks=True)
    cpuinfo = tree / "proc" / "cpuinfo"
    lines = cpuinfo.read_text().splitlines(keepends=True)
    cpuinfo.write_text("".join(ln for ln in lines if not ln.startswith("physical id")))
    return tree


def _package_file(tree: Path, cpu: int) -> Path:
    return tree / f"sys/devices/system/cpu/cpu{cpu}/topology/{PACKAGE_ID}"


def test_one_cpu_of_unknown_package_is_left_out_not_put_in_package_0(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    (before,) = discover(DirView(str(tree))).cpu.packages
    assert 3 in before.cpus
    _package_file(tree, 3).write_text("-1\n")
    topo = discover(DirView(str(tree)))
    (after,) = topo.cpu.packages
    assert after.id == before.id and after.cpus == tuple(c for c in before.cpus if c != 3)
    (warning,) = package_warnings(topo)
    assert "cpu3/topology" in warning and "the package of 1 CPU(s) (3) is unknown" in warning


def test_no_package_file_anywhere_is_still_one_package(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    for cpu in range(64):
        _package_file(tree, cpu).unlink(missing_ok=True)
    topo = discover(DirView(str(tree)))
    assert [p.id for p in topo.cpu.packages] == [0]
    assert topo.cpu.packages[0].cpus == tuple(range(topo.cpu.logical_cpus))
    assert package_warnings(topo) == []


def test_a_cpu_without_the_file_beside_cpus_with_it_is_unknown(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    _package_file(tree, 5).unlink()
    topo = discover(DirView(str(tree)))
    assert 5 not in {cpu for p in topo.cpu.packages for cpu in p.cpus}
    (warning,) = package_warnings(topo)
    assert "cpu5/topology" in warning and "missing" in warning
