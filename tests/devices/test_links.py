"""NV# and XL in the probe's relation matrix: the merge rules, then every source end to end."""

from __future__ import annotations

import ctypes
import json
import shutil
import stat
from pathlib import Path

import pytest

from tests.conftest import NVIDIA_BOX, SEED_BOX
from tests.devices.conftest import DATA
from xputune.devices import link_sources, links, nvml
from xputune.devices.xpusmi import parse, parse_file
from xputune.devices.xpusmi.links import relation_matrix
from xputune.host import open_host
from xputune.topology.discover import discover
from xputune.topology.model import RELATION_HELP
from xputune.topology.serialize import to_dict

XL_TOPO = DATA / "topo-xl.txt"
REAL = DATA.parent / "real"
CAT = shutil.which("cat")
# The XPU Link pairs of topo-xl.txt: two fully linked groups of four, card i to card i + 4.
XL_PAIRS = {
    (a, b) for a in range(8) for b in range(8) if a != b and (a // 4 == b // 4 or abs(a - b) == 4)
}


@pytest.fixture(scope="module")
def seed():
    return discover(open_host(str(SEED_BOX)))


@pytest.fixture(scope="module")
def hgx():
    return discover(open_host(str(NVIDIA_BOX)))


def _xl(topo) -> set[tuple[int, int]]:
    return {
        (int(a[3:]), int(b[3:]))
        for a, row in topo.relations.items()
        for b, code in row.items()
        if code == "XL"
    }


# --- the merge ---------------------------------------------------------------------------------


def test_order_fallback_takes_xl_and_keeps_pcie_elsewhere(seed) -> None:
    merged = links.with_vendor_links(seed, relation_matrix(parse(XL_TOPO.read_text())), "t")
    assert _xl(merged) == XL_PAIRS
    assert merged.relations["xpu0"]["xpu5"] == "SYS" == seed.relations["xpu0"]["xpu5"]
    nics = [n.name for n in seed.nics]
    for card in seed.cards:  # card-to-NIC relations are never touched
        assert {n: merged.relations[card.name][n] for n in nics} == {
            n: seed.relations[card.name][n] for n in nics
        }
    assert merged.warnings == seed.warnings and merged.cards == seed.cards


def test_bus_ids_win_over_order(seed) -> None:
    """With a -q -x of the same host the matrix is keyed by bus id, and so is the join."""
    report, ids = parse(XL_TOPO.read_text()), parse_file((DATA / "query.xml").open("rb"))
    matrix = relation_matrix(report, ids)
    assert "0000:23:00.0" in matrix
    assert _xl(links.with_vendor_links(seed, matrix, "t")) == XL_PAIRS
    # Bus ids in the opposite order: the links follow the bus ids, not the card numbers.
    reverse = {c.bdf: seed.cards[7 - i].bdf for i, c in enumerate(seed.cards)}
    flipped = {
        reverse[a]: {reverse.get(b, b): v for b, v in row.items()} for a, row in matrix.items()
    }
    assert _xl(links.with_vendor_links(seed, flipped, "t")) == {(7 - a, 7 - b) for a, b in XL_PAIRS}
    merged = links.with_vendor_links(seed, {"0000:e4:00.0": {"0000:e3:00.0": "XL8"}}, "t")
    assert merged.relations["xpu7"]["xpu6"] == "XL8" == merged.relations["xpu6"]["xpu7"]
    assert merged.relations["xpu0"]["xpu1"] == "PIX"


def test_disagreement_keeps_pcie_and_warns_once(seed) -> None:
    matrix = {f"xpu{i}": {} for i in range(8)} | {
        "xpu0": {"xpu1": "PIX", "xpu2": "NODE", "xpu3": "SOC"},
        "xpu2": {"xpu0": "NODE"},
        "xpu4": {"xpu6": "PHB", "xpu5": "NV4"},
    }
    merged = links.with_vendor_links(seed, matrix, "xpu-smi topo -m (saved.txt)")
    assert merged.relations["xpu0"]["xpu2"] == "SYS" and merged.relations["xpu4"]["xpu6"] == "SYS"
    assert merged.relations["xpu4"]["xpu5"] == "NV4"  # a link code wins
    (warning,) = set(merged.warnings) - set(seed.warnings)
    assert warning == (
        "relation matrix: xpu-smi topo -m (saved.txt) and PCIe (sysfs) disagree on 2 card "
        "pair(s), PCIe kept: xpu0-xpu2 (NODE there, SYS in sysfs), "
        "xpu4-xpu6 (PHB there, SYS in sysfs)"
    )  # SOC is the old spelling of SYS: no disagreement


def test_unknown_cards_and_count_mismatch_are_named(seed) -> None:
    matrix = {
        "xpu0": {"xpu1": "XL", "xpu9": "XL"},
        "xpu9": {"xpu0": "XL"},
        "mlx5_0": {"xpu0": "PIX"},
    }
    merged = links.with_vendor_links(seed, matrix, "m")
    assert merged.relations["xpu0"]["xpu1"] == "XL"
    new = [w for w in merged.warnings if w not in seed.warnings]
    assert new == [
        "relation matrix: m names card(s) probe did not find: xpu9; their links are left out",
        "relation matrix: m lists 3 card(s) and probe found 8; they were matched by card order "
        "(no bus ids), which may pair them wrongly",
    ]


def test_nothing_to_merge_is_the_same_topology(seed) -> None:
    assert links.with_vendor_links(seed, {}, "m") is seed
    assert links.merge_links(seed, {"gpu0": {"gpu1": "NV18"}}, "m")[1] is False


def test_legend_and_json_are_additive(run_cli) -> None:
    assert {"NV#", "XL"} <= RELATION_HELP.keys()
    code, out, _ = run_cli("probe", "--root", str(SEED_BOX), "-f", "json")
    doc = json.loads(out)
    assert code == 0 and doc["schema_version"] == 1
    assert doc["relation_source"] == "PCIe (sysfs)"
    assert doc == to_dict(discover(open_host(str(SEED_BOX))))


# --- NVML --------------------------------------------------------------------------------------


def test_nvml_stand_in_reports_nv18_through_nvswitches(
    fake_nvml: ctypes.CDLL, fake_nvml_path: Path
) -> None:
    fake_nvml.fake_nvml_lose(-1)
    cards, found = nvml.read(str(fake_nvml_path))
    assert len(cards) == 8 and set(found) == set(cards)
    assert all(row == {b: "NV18" for b in cards if b != a} for a, row in found.items())


def test_nvml_direct_bridges_and_no_nvlink(fake_nvml: ctypes.CDLL, fake_nvml_path: Path) -> None:
    fake_nvml.fake_nvml_lose(-1)
    fake_nvml.fake_nvml_nvlink(1)
    found = nvml.read(str(fake_nvml_path))[1]
    assert found["0000:18:00.0"] == {"0000:19:00.0": "NV4"}
    assert found["0000:bc:00.0"] == {"0000:bb:00.0": "NV4"}
    fake_nvml.fake_nvml_nvlink(2)
    assert nvml.read(str(fake_nvml_path))[1] == {}


def _without_saved_outputs(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The HGX tree as a recording made before `record` saved vendor outputs."""
    monkeypatch.setattr(link_sources, "read_saved", lambda _view, _path: None)
    return Path(str(NVIDIA_BOX))


def test_probe_with_nvml_shows_nv18_and_says_so(run_cli, fake_nvml, monkeypatch) -> None:
    """Index 3 is lost in the stand-in: its row keeps PCIe, the seven others are NV18."""
    tree = _without_saved_outputs(monkeypatch)
    code, out, _ = run_cli("probe", "--root", str(tree), "-f", "json")
    doc = json.loads(out)
    assert code == 0 and doc["relation_source"] == "PCIe (sysfs) + NVLink (NVML)"
    rel = doc["relations"]
    assert rel["gpu0"]["gpu7"] == "NV18" and rel["gpu1"]["gpu0"] == "NV18"
    assert rel["gpu3"]["gpu2"] == "PIX" and rel["gpu0"]["gpu3"] == "NODE"
    fake_nvml.fake_nvml_lose(-1)
    nvml.forget_library()
    code, out, _ = run_cli("probe", "--root", str(tree))
    assert code == 0 and "Relations from PCIe (sysfs) + NVLink (NVML)" in out
    matrix = out[out.index("Relations from") : out.index("  X    = self")]
    rows = [line for line in matrix.splitlines() if line.startswith("│ gpu")]
    assert len(rows) == 8 and all(row.count("NV18") == 7 for row in rows)


def test_nvml_without_nvlink_is_pcie_only(run_cli, fake_nvml, monkeypatch) -> None:
    fake_nvml.fake_nvml_nvlink(2)
    code, out, _ = run_cli(
        "probe", "--root", str(_without_saved_outputs(monkeypatch)), "-f", "json"
    )
    doc = json.loads(out)
    assert (
        code == 0
        and doc["relation_source"] == "PCIe (sysfs)"
        and doc["relations"]["gpu0"]["gpu1"] == "PIX"
    )


# --- the bundled HGX example and recordings ----------------------------------------------------


def test_hgx_example_shows_nv18_from_its_saved_matrix(run_cli) -> None:
    code, out, err = run_cli("probe", "--example", "nvidia-hgx-h100", "-f", "json")
    doc = json.loads(out)
    assert (code, err) == (0, "") and doc["warnings"] == []  # PCIe cells agree with sysfs
    assert doc["relation_source"] == "PCIe (sysfs) + nvidia-smi topo -m"
    gpus = [f"gpu{i}" for i in range(8)]
    assert all(doc["relations"][a][b] == "NV18" for a in gpus for b in gpus if a != b)
    assert doc["relations"]["gpu0"]["ibs1"] == "PIX" and doc["relations"]["gpu0"]["ibs3"] == "SYS"
    code, table, _ = run_cli("probe", "--example", "nvidia-hgx-h100")
    assert "Relations from PCIe (sysfs) + nvidia-smi topo -m" in table
    assert "NV#  = a bonded set of # NVLinks" in table


def test_saved_matrix_is_the_real_form(hgx) -> None:
    """The example's nvidia-smi topo -m reads like the real H100 one, NIC legend included."""
    saved = (Path(str(NVIDIA_BOX)) / "xputune/vendor/nvidia-smi-topo-m.txt").read_text()
    report, real = parse(saved), parse((REAL / "nvsmi-topo-h100-nv18-nic-rows.txt").read_text())
    assert report.vendor == real.vendor == "nvidia" and report.warnings == ()
    assert report.topology.legend == real.topology.legend
    assert report.topology.nics == {f"NIC{k}": f"mlx5_{k}" for k in range(4)}
    assert [n.rdma for n in hgx.nics] == [f"mlx5_{k}" for k in range(4)]
    assert [c.numa_affinity for c in report.cards] == [c.numa_node for c in hgx.cards]


def test_smi_and_probe_name_the_same_cards(run_cli) -> None:
    """One join: smi's card names for the saved matrix and for -q -x are probe's names."""
    saved = Path(str(NVIDIA_BOX)) / "xputune/vendor/nvidia-smi-topo-m.txt"
    code, out, _ = run_cli("smi", "--input", str(saved), "-f", "json")
    probe = json.loads(run_cli("probe", "--example", "nvidia-hgx-h100", "-f", "json")[1])
    assert code == 0
    assert [c["card"] for c in json.loads(out)["cards"]] == [c["name"] for c in probe["cards"]]
    code, out, _ = run_cli("smi", "--input", str(DATA / "query.xml"), "-f", "json")
    seed = json.loads(run_cli("probe", "--root", str(SEED_BOX), "-f", "json")[1])
    assert [(c["card"], c["bus_id"]) for c in json.loads(out)["cards"]] == [
        (c["name"], c["bdf"]) for c in seed["cards"]
    ]


def test_recording_never_runs_vendor_tools(run_cli, tmp_path: Path, monkeypatch) -> None:
    marker = tmp_path / "ran"
    for tool in ("xpu-smi", "nvidia-smi"):
        script = tmp_path / tool
        script.write_text(f"#!/bin/sh\necho ran > {marker}\nexec {CAT} {XL_TOPO}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    code, out, _ = run_cli("probe", "--root", str(SEED_BOX), "-f", "json")
    assert code == 0 and json.loads(out)["relation_source"] == "PCIe (sysfs)"
    assert not marker.exists()


def test_live_kunlunxin_host_runs_xpu_smi_topo(seed, tmp_path: Path, monkeypatch) -> None:
    """libxpuml has no link call: on a live host, xpu-smi topo -m is asked (a stand-in here)."""
    script = tmp_path / "xpu-smi"
    script.write_text(f'#!/bin/sh\n[ "$*" = "topo -m" ] && exec {CAT} {XL_TOPO}\nexit 3\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    live = open_host("/")
    assert live.live
    linked = link_sources.vendor_links(seed, live)
    assert linked.source == "PCIe (sysfs) + xpu-smi topo -m" and _xl(linked.topo) == XL_PAIRS
    monkeypatch.setenv("XPUTUNE_VENDOR_LIBRARIES", "off")
    assert link_sources.vendor_links(seed, live).source == "PCIe (sysfs)"


# --- --vendor-topo -----------------------------------------------------------------------------


def test_vendor_topo_gives_the_seed_box_xl(run_cli) -> None:
    code, out, err = run_cli("probe", "--root", str(SEED_BOX), "--vendor-topo", str(XL_TOPO))
    assert code == 0 and err == ""
    assert "Relations from PCIe (sysfs) + xpu-smi topo -m" in out
    assert "XL   = XPU Link between Kunlunxin cards" in out
    row = next(line for line in out.splitlines() if line.startswith("│ xpu0 "))
    assert row.split("│")[2:10] == [
        f" {c:^4} " for c in ("X", "XL", "XL", "XL", "XL", "SYS", "SYS", "SYS")
    ]


def test_vendor_topo_of_another_vendor_changes_nothing(run_cli) -> None:
    nv = REAL / "nvsmi-topo-h100-nv18-nic-rows.txt"
    code, out, _ = run_cli("probe", "--root", str(SEED_BOX), "--vendor-topo", str(nv), "-f", "json")
    doc = json.loads(out)
    assert code == 0 and doc["relation_source"] == "PCIe (sysfs)"
    assert "names card(s) probe did not find: gpu0, gpu1" in doc["warnings"][-1]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("query.xml", "{path}: not a topo -m matrix (it reads as xpu-smi -q -x output)"),
        ("missing.txt", "smi output not found: {path}"),
    ],
)
def test_bad_vendor_topo_is_one_line(run_cli, name: str, message: str) -> None:
    path = DATA / name
    code, out, err = run_cli("probe", "--root", str(SEED_BOX), "--vendor-topo", str(path))
    assert code == 2 and out == "" and err == f"xputune: error: {message.format(path=path)}\n"
