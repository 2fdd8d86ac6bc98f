"""metrics, labels and fleet report on the seed example (8 P800 on NUMA 1 1 3 3 5 5 7 7, xpu5
at 16 GT/s of 32, IDO off) and the small recordings."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from xputune.fleet.labels import parse_feature_file, valid_label

SEED = ["--example", "h3c-hygon-p800"]
RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"


def _samples(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _by(samples, key: str) -> dict[str, float]:
    return {s.labels[key]: s.value for s in samples}


def test_metrics_of_the_seed_parse_with_prometheus(run_cli) -> None:
    code, out, _ = run_cli("metrics", *SEED)
    assert code == 0
    fams = _samples(out)
    assert all(name.startswith("xputune_") for name in fams)
    assert not any(name.endswith("_total") for name in fams)
    for fam in text_string_to_metric_families(out):
        assert fam.type == "gauge"
    numa = _by(fams["xputune_card_numa_node"], "card")
    assert [numa[f"xpu{i}"] for i in range(8)] == [1, 1, 3, 3, 5, 5, 7, 7]
    group = _by(fams["xputune_card_uplink_group"], "card")
    assert [group[f"xpu{i}"] for i in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    speed = _by(fams["xputune_card_pcie_current_link_transfers_per_second"], "card")
    top = _by(fams["xputune_card_pcie_max_link_transfers_per_second"], "card")
    assert speed["xpu5"] == 16e9 and top["xpu5"] == 32e9 and speed["xpu4"] == 32e9
    assert _by(fams["xputune_card_pcie_current_link_width"], "card")["xpu5"] == 16
    degraded = _by(fams["xputune_card_pcie_link_degraded"], "card")
    assert degraded == {f"xpu{i}": float(i == 5) for i in range(8)}
    ido = fams["xputune_pcie_ido_enabled"]
    assert len(ido) == 8 * 4 * 2 and {s.value for s in ido} == {0.0}  # 4 ports, 2 directions
    assert {s.labels["port"] for s in ido} == {
        "root port", "switch upstream", "switch downstream", "endpoint"}  # fmt: skip
    info = fams["xputune_card_info"]
    assert len(info) == 8 and {s.labels["model"] for s in info} == {"P800"}
    assert {s.value for s in info} == {1.0}
    assert fams["xputune_host_info"][0].labels["host"] == "h3c-hygon-p800"
    assert fams["xputune_cards"][0].value == 8
    drift = _by(fams["xputune_knob_drift"], "knob")
    assert drift["pcie.ido"] == 24 and drift["numa.balancing"] == 1 and drift["thp.enabled"] == 0
    assert _by(fams["xputune_knob_holds"], "knob")["thp.enabled"] == 1
    assert fams["xputune_profile_holds"][0].value == 0
    assert fams["xputune_profile_info"][0].labels == {
        "profile": "hygon-p800", "choice": "recommended"}  # fmt: skip
    assert _by(fams["xputune_numa_node_cards"], "node")["0"] == 0


def test_metrics_textfile_is_written_atomically(run_cli, tmp_path: Path) -> None:
    (tmp_path / "xputune.prom").write_text("old\n")
    code, out, err = run_cli("metrics", *SEED, "--textfile", str(tmp_path))
    assert code == 0 and out == "" and "xputune.prom" in err
    assert os.listdir(tmp_path) == ["xputune.prom"]  # no temporary left behind
    text = (tmp_path / "xputune.prom").read_text()
    assert _samples(text)["xputune_cards"][0].value == 8
    assert oct((tmp_path / "xputune.prom").stat().st_mode & 0o777) == "0o644"


def test_metrics_textfile_into_a_missing_folder_is_one_line(run_cli, tmp_path: Path) -> None:
    code, out, err = run_cli("metrics", *SEED, "--textfile", str(tmp_path / "nope"))
    assert code == 2 and out == ""
    assert err == f"xputune: error: {tmp_path / 'nope'}: no such directory\n"


def test_metrics_with_a_profile_and_unknown_ordering(run_cli) -> None:
    root = str(RECORDINGS / "small-nonroot-config.tar.xz")
    code, out, _ = run_cli("metrics", "--root", root, "--profile", "generic")
    assert code == 0
    fams = _samples(out)
    assert "xputune_pcie_ido_enabled" not in fams  # unknown is no sample, not a guess
    assert {s.value for s in fams["xputune_pcie_ordering_readable"]} == {0.0}
    assert fams["xputune_profile_info"][0].labels["profile"] == "generic"


def test_labels_of_the_seed(run_cli, tmp_path: Path) -> None:
    code, _, err = run_cli("labels", "--nfd", str(tmp_path), *SEED)
    assert code == 0 and "wrote" in err
    assert os.listdir(tmp_path) == ["xputune"]
    text = (tmp_path / "xputune").read_text()
    lines = text.splitlines()
    assert lines[1].startswith("# +expiry-time=")  # before every label, as NFD needs
    expiry = datetime.fromisoformat(lines[1].split("=", 1)[1])
    assert timedelta(minutes=59) < expiry - datetime.now(UTC) <= timedelta(minutes=60)
    labels = parse_feature_file(text)
    assert labels == {
        "xputune.io/card-count": "8",
        "xputune.io/card-model": "P800",
        "xputune.io/card-vendor": "kunlunxin",
        "xputune.io/card-numa-nodes": "1-1-3-3-5-5-7-7",
        "xputune.io/numa-nodes-with-cards": "4",
        "xputune.io/cards-per-numa-node": "2",
        "xputune.io/uplinks": "4",
        "xputune.io/uplink-shared": "true",
        "xputune.io/cards-per-uplink": "2",
        "xputune.io/degraded-links": "1",
        "xputune.io/ido": "off",
        "xputune.io/strategy": "local",
        "xputune.io/profile": "hygon-p800",
        "xputune.io/profile-holds": "false",
    }
    assert all(valid_label(k, v) is None for k, v in labels.items())
    assert parse_feature_file(text, now=expiry + timedelta(seconds=1)) == {}


def test_labels_without_expiry_and_on_stdout(run_cli) -> None:
    code, out, _ = run_cli("labels", "--nfd", "-", "--expiry", "0",
                           "--example", "nvidia-hgx-h100")  # fmt: skip
    assert code == 0 and "+expiry-time" not in out
    labels = parse_feature_file(out)
    assert labels["xputune.io/card-model"] == "H100-SXM5-80GB"
    assert labels["xputune.io/card-numa-nodes"] == "0-0-0-0-1-1-1-1"


def test_strategy_comes_from_plan_and_follows_ido() -> None:
    from xputune.fleet.labels import recommended_strategy
    from xputune.host import open_host
    from xputune.topology.discover import discover
    from xputune.topology.model import Ordering

    topo = discover(open_host(None, "h3c-hygon-p800"))
    assert recommended_strategy(topo) == "local"  # IDO off: plan refuses all-nodes
    on = Ordering(True, True, False)
    tuned = topo._replace(pci={b: f._replace(ordering=on) for b, f in topo.pci.items()})
    assert recommended_strategy(tuned) == "all-nodes"  # 8 cards, 8 nodes: every node used


@pytest.mark.parametrize(
    ("key", "value", "ok"),
    [
        ("xputune.io/ido", "off", True),
        ("ido", "off", False),
        ("kubernetes.io/ido", "off", False),
        ("xputune.io/" + "a" * 64, "x", False),
        ("xputune.io/numa", "1,1", False),
        ("xputune.io/numa", "", True),
        ("xputune.io/numa", "-1", False),
    ],
)
def test_label_rules(key: str, value: str, ok: bool) -> None:
    assert (valid_label(key, value) is None) is ok


def _probe(run_cli, tmp: Path, name: str, *where: str, check: bool = False) -> None:
    code, out, _ = run_cli("probe", *where, "--format", "json")
    assert code == 0
    (tmp / f"{name}.probe.json").write_text(out)
    if check:
        code, out, _ = run_cli("check", *where, "--format", "json")
        (tmp / f"{name}.check.json").write_text(out)


@pytest.fixture
def fleet(run_cli, tmp_path: Path) -> Path:
    for i in range(3):
        _probe(run_cli, tmp_path, f"p800-{i}", *SEED, check=i == 0)
    _probe(run_cli, tmp_path, "h100", "--example", "nvidia-hgx-h100", check=True)
    _probe(run_cli, tmp_path, "small", "--root", str(RECORDINGS / "small-base.tar.xz"))
    return tmp_path


def test_fleet_report_json(run_cli, fleet: Path) -> None:
    files = sorted(str(p) for p in fleet.iterdir())
    code, out, _ = run_cli("fleet", "report", "--format", "json", *files)
    assert code == 1
    doc = json.loads(out)
    assert doc["schema_version"] == 1
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert sorted(hosts) == ["h100", "p800-0", "p800-1", "p800-2", "small"]
    assert doc["drifting_hosts"] == ["h100", "p800-0"]
    assert doc["unchecked_hosts"] == ["p800-1", "p800-2", "small"]
    assert sorted(doc["layout_outliers"]) == ["h100", "small"]
    assert doc["majority_layout"] == {"cards": "8x P800",
                                      "cards_per_numa_node": "1:2 3:2 5:2 7:2",
                                      "cards_per_uplink": "2 2 2 2"}  # fmt: skip
    degraded = {(d["host"], d["card"]) for d in doc["degraded_links"]}
    assert degraded == {("p800-0", "xpu5"), ("p800-1", "xpu5"), ("p800-2", "xpu5")}
    assert hosts["p800-0"]["check"]["not_holding"]["pcie.ido"] == 24
    assert hosts["h100"]["layout_differs"]["cards_per_numa_node"]["host"] == "0:4 1:4"


def test_fleet_report_table(run_cli, fleet: Path, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    code, out, _ = run_cli("fleet", "report", *sorted(str(p) for p in fleet.iterdir()))
    assert code == 1
    assert "degraded: p800-1 xpu5 (0000:a4:00.0) at 16 GT/s x16 of 32 GT/s x16" in out
    assert "5 hosts: 2 drift (h100, p800-0); 2 differ in layout (h100, small)" in out


def test_fleet_report_quiet_fleet_exits_0(run_cli, tmp_path: Path) -> None:
    for i in range(2):
        _probe(run_cli, tmp_path, f"n{i}", "--example", "nvidia-hgx-h100")
    code, out, _ = run_cli("fleet", "report", *sorted(str(p) for p in tmp_path.iterdir()))
    assert code == 0 and "2 hosts: 2 without a check file" in out


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a probe or check document (a JSON list)"),
        ('{"hello": 1}', "neither a probe document"),
        ('{"schema_version": 1, "cards": [{"name": "xpu0"}]}', "without cards[0].model"),
        ('{"schema_version": 1, "cards": "x", "uplinks": []}', "cards is str"),
        ('{"schema_version": "1", "cards": []}', "not a probe document"),
        ('{"schema_version": 1, "profile": "p", "ok": true, "rows": [3]}', "not knob/verdict"),
    ],
)
def test_fleet_report_refuses_a_bad_file(run_cli, fleet: Path, content: str, says: str) -> None:
    bad = fleet / "bad.json"
    bad.write_bytes(content.encode())
    code, out, err = run_cli("fleet", "report", str(fleet / "h100.probe.json"), str(bad))
    assert code == 2 and out == ""
    assert err.startswith(f"xputune: error: {bad}: ") and says in err
    assert len(err.splitlines()) == 1


def test_fleet_report_refuses_a_newer_schema(run_cli, fleet: Path) -> None:
    doc = json.loads((fleet / "h100.probe.json").read_text())
    doc["schema_version"] = 2
    newer = fleet / "future.json"
    newer.write_text(json.dumps(doc))
    code, _, err = run_cli("fleet", "report", str(newer))
    assert code == 2
    assert err == (f"xputune: error: {newer}: probe document of schema_version 2, newer than "
                   "this xputune reads (1); upgrade xputune to read it\n")  # fmt: skip


def test_fleet_report_missing_file_and_duplicate_host(run_cli, fleet: Path) -> None:
    code, _, err = run_cli("fleet", "report", str(fleet / "nope.json"))
    assert code == 2 and "nope.json: cannot read: No such file or directory" in err
    copy = fleet / "h100.json"
    copy.write_text((fleet / "h100.probe.json").read_text())
    code, _, err = run_cli("fleet", "report", str(fleet / "h100.probe.json"), str(copy))
    assert code == 2 and "a second probe document for host h100" in err
    (fleet / "bin.json").write_bytes(b"\xff\xfe")
    code, _, err = run_cli("fleet", "report", str(fleet / "bin.json"))
    assert code == 2 and "not UTF-8" in err
