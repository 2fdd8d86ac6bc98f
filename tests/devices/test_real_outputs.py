"""Every vendor tool output from the field (data/real, sources in its README), read for its values.

Each file is checked on the values it really contains: card count, bus ids, names, memory,
UUIDs, relations; and through the CLI, which must answer each with exit 0 and a JSON document.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xputune.devices.xpusmi import parse_bytes
from xputune.devices.xpusmi.links import relation_matrix

REAL = Path(__file__).resolve().parent / "data" / "real"
FILES = sorted(p.name for p in REAL.iterdir() if p.name != "README.md")
TELEGRAF_BUSES = ["03", "05", "63", "65", "83", "85", "a3", "a5"]


def report(name: str):
    return parse_bytes((REAL / name).read_bytes())


def test_every_file_is_in_the_readme() -> None:
    readme = (REAL / "README.md").read_text()
    assert FILES and all(f"`{name}`" in readme for name in FILES)


@pytest.mark.parametrize("name", FILES)
def test_cli_reads_each_file(run_cli, name: str) -> None:
    code, out, err = run_cli("smi", "--input", str(REAL / name), "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["schema_version"] == 1 and doc["cards"] and isinstance(doc["warnings"], list)


def test_default_table_ernie() -> None:
    r = report("xpusmi-table-ernie-5.0.21.21.txt")
    assert (r.vendor, r.form, r.driver_version, r.warnings) == (
        "kunlunxin",
        "table",
        "5.0.21.21",
        (),
    )
    assert [c.bus_id for c in r.cards] == [f"0000:{b}:00.0" for b in TELEGRAF_BUSES]
    assert [c.card for c in r.cards] == [f"xpu{i}" for i in range(8)]
    assert {c.name for c in r.cards} == {"P800 OAM"}
    assert {(c.memory_used_mib, c.memory_total_mib) for c in r.cards} == {(0, 98304)}
    assert [c.temperature_c for c in r.cards] == [37, 41, 36, 36, 40, 40, 39, 40]
    assert [c.power_w for c in r.cards] == [88, 90, 89, 89, 88, 90, 90, 87]
    assert r.processes == ()


def test_default_table_with_a_partial_card_list() -> None:
    r = report("xpusmi-table-yunion-5.19.0.0.txt")
    assert r.driver_version == "5.19.0.0"
    assert [(c.index, c.card, c.bus_id) for c in r.cards] == [
        (0, "xpu0", "0000:03:00.0"),
        (1, "xpu1", "0000:05:00.0"),
        (7, "xpu7", "0000:a5:00.0"),
    ]


def test_query_one_card_under_attached_two() -> None:
    r = report("xpusmi-q-zstack-attached2-one-card.txt")
    (card,) = r.cards
    assert (card.bus_id, card.name, card.serial) == (
        "0000:01:00.0",
        "P800 PCIe",
        "02K0MA0258D0007R",
    )
    assert (card.memory_total_mib, card.memory_used_mib, card.utilization_pct) == (98304, 0, 0)
    assert (card.temperature_c, card.power_w, r.driver_version) == (46, 76.0, "5.0.21.26")
    assert len(r.warnings) == 1 and "'Attached' says 2 but 1" in r.warnings[0]


def test_query_by_id_as_quoted_in_a_docstring() -> None:
    r = report("xpusmi-q-id-zstack-docstring.txt")
    (card,) = r.cards
    assert card.bus_id == "0000:21:00.0" and card.uuid == "GPU-8412bfa1-c3b9-50e6-86b5-065b83a1537c"
    assert (card.minor, card.firmware, card.memory_free_mib) == (0, "1.0.2.14.1.54", 98304)
    assert (card.temperature_c, card.power_w, r.warnings) == (40, 75.0, ())


def test_xml_eight_p800() -> None:
    r = report("xpusmi-q-x-telegraf-p800-oam-8.xml")
    assert (r.vendor, r.form, r.driver_version, r.warnings) == ("kunlunxin", "xml", "5.19.0.0", ())
    assert [c.bus_id for c in r.cards] == [f"0000:{b}:00.0" for b in TELEGRAF_BUSES]
    assert r.cards[0].uuid == "GPU-a0ac042a-5a14-5481-bf7e-dd8e523792cd"
    assert r.cards[7].serial == "02K15K6252V0007V" and r.cards[7].minor == 7
    assert [c.power_w for c in r.cards] == [87, 84, 86, 86, 84, 83, 84, 85]
    assert {(c.memory_total_mib, c.firmware) for c in r.cards} == {(98304, "1.0.2.14.1.48")}


def test_xml_invalid_argument_is_a_null_with_a_warning() -> None:
    r = report("xpusmi-q-x-telegraf-invalid-argument.xml")
    (card,) = r.cards
    assert (card.utilization_pct, card.memory_used_mib, card.power_w) == (None, None, None)
    assert (card.memory_total_mib, card.temperature_c, card.minor) == (98304, 36, 0)
    assert r.warnings == (
        "smi -q -x output: 0000:03:00.0: utilization: not a number in %: 'Invalid Argument'",
    )


def test_list_with_the_uuid_as_a_field() -> None:
    r = report("xpusmi-L-uuid-field.txt")
    assert [c.name for c in r.cards] == ["P800 OAM"] * 8
    assert r.cards[4].uuid == "GPU-b7942319-362e-5a53-a8eb-a2d06fbe84f6"
    assert [c.card for c in r.cards] == [f"xpu{i}" for i in range(8)] and r.warnings == ()


def test_monitor_documented_columns() -> None:
    r = report("xpusmi-m-minimax.txt")
    first = r.cards[0]
    assert (first.bus_id, first.index, first.minor, first.serial) == (
        "0000:03:00.0",
        0,
        0,
        "02K15K624CV00304",
    )
    assert (first.memory_used_mib, first.memory_total_mib, first.utilization_pct) == (
        90440,
        98304,
        0,
    )
    assert (first.temperature_c, first.power_w, first.firmware, first.name) == (
        36,
        86.0,
        "1.0:2.6:1.39.1.7",
        "P800 OAM",
    )
    assert r.cards[1].card == "xpu1" and r.warnings == ()


def test_xpu_topo_with_nic_columns_but_no_nic_rows() -> None:
    r = report("xpusmi-topo-envinit-nic-legend.txt")
    topo = r.topology
    assert topo.relations["XPU0"]["XPU1"] == "XL" and topo.relations["XPU0"]["NIC1"] == "PIX"
    assert "NIC0" not in topo.relations and topo.nics["NIC4"] == "mlx5_4"
    assert [(c.cpu_affinity, c.numa_affinity) for c in r.cards][3:5] == [
        ("0-51,104-155", 0),
        ("52-103,156-207", 1),
    ]
    assert r.warnings == ()


def test_xpu_topo_with_rdma_devices_as_heads() -> None:
    r = report("xpusmi-topo-envinit-direct-mlx5.txt")
    matrix = relation_matrix(r)
    assert matrix["xpu0"]["mlx5_1"] == "PIX" and matrix["mlx5_3"]["xpu4"] == "PIX"
    assert r.topology.nics == {f"mlx5_{i}": f"mlx5_{i}" for i in range(5)}


def test_nvidia_topo_h100_nv18() -> None:
    r = report("nvsmi-topo-h100-nv18-nic-rows.txt")
    assert r.vendor == "nvidia" and [c.card for c in r.cards] == [f"gpu{i}" for i in range(8)]
    relations = r.topology.relations
    assert {relations["GPU0"][f"GPU{i}"] for i in range(1, 8)} == {"NV18"}
    assert relations["NIC5"]["GPU5"] == "PIX" and r.topology.nics["NIC0"] == "mlx5_1"
    assert (r.cards[4].cpu_affinity, r.cards[4].numa_affinity) == ("48-95,144-191", 1)
    assert r.warnings == ()


@pytest.mark.parametrize(
    ("name", "pair", "relation", "numa"),
    [
        ("nvsmi-topo-traverse-v100-nv3-mlx5-heads.txt", ("GPU2", "GPU3"), "NV3", [0, 0, 8, 8]),
        ("nvsmi-topo-della-2gpu-mlx5-heads.txt", ("GPU0", "mlx5_0"), "NODE", [0, 1]),
        ("nvsmi-topo-a10x4-nic-rows.txt", ("NIC1", "NIC0"), "PIX", [0, 0, 0, 0]),
        ("nvsmi-topo-1080ti-x2-phb.txt", ("GPU0", "GPU1"), "PHB", [None, None]),
    ],
)
def test_other_nvidia_matrices(name: str, pair: tuple[str, str], relation: str, numa: list) -> None:
    r = report(name)
    assert r.topology.relations[pair[0]][pair[1]] == relation
    assert [c.numa_affinity for c in r.cards] == numa and r.warnings == ()


def test_nvidia_xml_p100() -> None:
    r = report("nvsmi-q-x-hadoop-p100x2.xml")
    assert (r.vendor, r.driver_version) == ("nvidia", "375.66")
    assert [(c.card, c.bus_id) for c in r.cards] == [
        ("gpu0", "0000:04:00.0"),
        ("gpu1", "0000:82:00.0"),
    ]
    assert [c.uuid for c in r.cards] == [
        "GPU-28604e81-21ec-cc48-6759-bf2648b22e16",
        "GPU-46915a82-3fd2-8e11-ae26-a80b607c04f3",
    ]
    assert [(c.memory_total_mib, c.utilization_pct, c.power_w) for c in r.cards] == [
        (11567, 33.4, 24.84),
        (12290, 10.3, 25.54),
    ]


def test_matrix_keys_join_by_bus_id_when_a_report_gives_them() -> None:
    topo = report("xpusmi-topo-envinit-nic-legend.txt")
    ids = report("xpusmi-q-x-telegraf-p800-oam-8.xml")
    matrix = relation_matrix(topo, ids)
    assert matrix["0000:03:00.0"]["0000:05:00.0"] == "XL"
    assert matrix["0000:03:00.0"]["mlx5_1"] == "PIX"
