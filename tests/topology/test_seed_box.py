"""The seed's box: 2 Hygon sockets, 8 NUMA nodes, 8 P800 on nodes 1 1 3 3 5 5 7 7."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SEED_BOX
from xputune.host import open_host
from xputune.topology.discover import discover
from xputune.topology.model import Topology


@pytest.fixture(scope="module")
def topo() -> Topology:
    return discover(open_host(str(SEED_BOX)))


def test_cards_and_numa_nodes(topo: Topology) -> None:
    assert [c.name for c in topo.cards] == [f"xpu{i}" for i in range(8)]
    assert [c.numa_node for c in topo.cards] == [1, 1, 3, 3, 5, 5, 7, 7]
    assert {c.model for c in topo.cards} == {"P800"}
    assert len(topo.numa_nodes) == 8
    total = sum(n.memory_total_bytes for n in topo.numa_nodes)
    assert 1.4e12 < total < 1.7e12  # about 1.5 TB
    assert topo.cpu.vendor == "HygonGenuine" and len(topo.cpu.packages) == 2


def test_switch_management_endpoints_are_not_cards(topo: Topology) -> None:
    mgmt = [fn for fn in topo.pci.values() if (fn.vendor_id, fn.device_id) == (0x1000, 0x02B2)]
    assert mgmt, "the fixture models the PEX890xx management endpoint"
    assert not {fn.bdf for fn in mgmt} & {c.bdf for c in topo.cards}


def test_four_uplinks_of_two_each_with_one_nic(topo: Topology) -> None:
    assert len(topo.uplinks) == 4
    for uplink, cards in zip(
        topo.uplinks,
        (("xpu0", "xpu1"), ("xpu2", "xpu3"), ("xpu4", "xpu5"), ("xpu6", "xpu7")),
        strict=True,
    ):
        assert uplink.cards == cards
        assert len(uplink.nics) == 1
        assert topo.pci[uplink.bdf].kind == "switch upstream"
    for card in topo.cards:
        uplink = next(u for u in topo.uplinks if card.name in u.cards)
        assert card.uplink == uplink.bdf
        assert card.nearest_nic == uplink.nics[0]


def test_relations_pix_within_switch_sys_across_sockets(topo: Topology) -> None:
    rel = topo.relations
    assert rel["xpu0"]["xpu1"] == "PIX"
    assert rel["xpu0"]["xpu0"] == "X"
    assert rel["xpu0"]["xpu7"] == "SYS"  # socket 0 vs socket 1
    assert rel["xpu0"][topo.card("xpu0").nearest_nic] == "PIX"
    for a in rel:
        for b in rel:
            assert rel[a][b] == rel[b][a]


def test_ido_bits_of_every_port_on_each_path(topo: Topology) -> None:
    for card in topo.cards:
        path = topo.ports_on_path(card)
        kinds = [fn.kind for fn in path]
        assert kinds == ["root port", "switch upstream", "switch downstream", "endpoint"]
        for fn in path:
            assert fn.ordering.ido_request is False and fn.ordering.ido_completion is False


def test_degraded_link_is_warned(topo: Topology) -> None:
    degraded = [c.name for c in topo.cards if topo.pci[c.bdf].link.degraded]
    assert degraded == ["xpu5"]
    assert any("0000:a4:00.0" in w and "Gen4 x16" in w for w in topo.warnings)
    assert len(topo.warnings) == 1  # a slow NIC on a fast root port is not a warning


def test_json_contract(run_cli, monkeypatch) -> None:
    monkeypatch.delenv("XPUTUNE_XPUML_LIBRARY", raising=False)
    code, out, _ = run_cli("probe", "--root", str(SEED_BOX), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    assert {"id", "cpus", "memory_total_bytes", "distances"} <= doc["numa_nodes"][0].keys()
    card = doc["cards"][0]
    assert card["bdf"] == "0000:23:00.0" and card["vendor_id"] == "0x1d22"
    assert card["ido"] == {"request": False, "completion": False}
    assert card["uplink"] == "0000:21:00.0" and card["nearest_nic"] == "ens1np0"
    assert card["vendor"] == "kunlunxin" and card["vendor_info"] is None  # no library: a recording
    assert {"name", "bdf", "rdma", "numa_node"} <= doc["nics"][0].keys()
    assert doc["relations"]["xpu0"]["xpu1"] == "PIX"
    assert {"thp_enabled", "thp_defrag", "thp_shmem_enabled", "shm_huge", "numa_balancing"} <= (
        doc["settings"].keys()
    )


def test_same_root_same_bytes_and_example_matches_tree(run_cli) -> None:
    outs = [run_cli("probe", "--root", str(SEED_BOX), "-f", "json")[1] for _ in range(2)]
    assert outs[0] == outs[1]
    assert run_cli("probe", "--example", "h3c-hygon-p800", "-f", "json")[1] == outs[0]


def test_table_shows_the_picture(run_cli) -> None:
    code, out, _ = run_cli("probe", "--root", str(SEED_BOX))
    assert code == 0
    for needle in (
        "Relations",
        "xpu7",
        "PIX",
        "Uplinks",
        "NUMA nodes",
        "Host settings",
        "0000:21:00.0",
        "numa balancing",
    ):
        assert needle in out


def test_fast_path_prints_what_typer_prints(run_cli, monkeypatch) -> None:
    args = ("probe", "--root", str(SEED_BOX), "--format=yaml")
    fast = run_cli(*args)
    monkeypatch.setenv("XPUTUNE_NO_FASTPATH", "1")
    slow = run_cli(*args)
    assert fast == slow and fast[0] == 0
