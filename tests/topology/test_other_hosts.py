"""The NVIDIA box and the small odd-but-valid trees."""

from __future__ import annotations

from tests.conftest import NVIDIA_BOX, host_tree
from xputune.host import open_host
from xputune.topology.discover import discover
from xputune.topology.verdicts import settings_verdicts


def test_nvidia_box() -> None:
    topo = discover(open_host(str(NVIDIA_BOX)))
    assert [c.name for c in topo.cards] == [f"gpu{i}" for i in range(8)]
    assert [c.numa_node for c in topo.cards] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [u.cards for u in topo.uplinks] == [
        ("gpu0", "gpu1"),
        ("gpu2", "gpu3"),
        ("gpu4", "gpu5"),
        ("gpu6", "gpu7"),
    ]
    assert topo.relations["gpu0"]["gpu1"] == "PIX"
    assert topo.relations["gpu0"]["gpu2"] in ("NODE", "PHB")
    assert topo.relations["gpu0"]["gpu4"] == "SYS"
    assert all(n.rdma for n in topo.nics if n.name.startswith("ib"))
    assert topo.settings.numa_balancing == 0


def test_nonroot_config_is_unknown_not_off() -> None:
    topo = discover(open_host(str(host_tree("small-nonroot-config"))))
    card = topo.cards[0]
    assert card.numa_node is not None
    for fn in topo.ports_on_path(card):
        assert fn.ordering.ido_request is None and fn.ordering.reason == "needs root"
    ido = next(v for v in settings_verdicts(topo) if v.setting == "pcie ido")
    assert ido.verdict == "unknown" and "needs root" in ido.value


def test_numa_unknown_is_null_with_a_warning() -> None:
    topo = discover(open_host(str(host_tree("small-numa-unknown"))))
    assert all(c.numa_node is None for c in topo.cards)
    assert any("NUMA node unknown" in w for w in topo.warnings)


def test_sparse_nodes_and_memory_only_node() -> None:
    topo = discover(open_host(str(host_tree("small-sparse-nodes"))))
    ids = [n.id for n in topo.numa_nodes]
    assert ids == [0, 2]
    memory_only = topo.node(2)
    assert memory_only.cpus == () and memory_only.memory_total_bytes > 0
    assert len(memory_only.distances) == 2
