"""metrics, labels and fleet report on the seed example (8 P800 on NUMA 1 1 3 3 5 5 7 7, xpu5
at 16 GT/s of 32, IDO off) and the small recordings."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.emoji import Emoji

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
    gone = fleet / "nope.json"
    assert code == 2 and err == f"xputune: error: probe or check document not found: {gone}\n"
    copy = fleet / "h100.json"
    copy.write_text((fleet / "h100.probe.json").read_text())
    code, _, err = run_cli("fleet", "report", str(fleet / "h100.probe.json"), str(copy))
    assert code == 2 and "a second probe document for host h100" in err
    (fleet / "bin.json").write_bytes(b"\xff\xfe")
    code, _, err = run_cli("fleet", "report", str(fleet / "bin.json"))
    assert code == 2 and "not UTF-8" in err


# --------------------------------------------------------------- hostile documents and names


def _mutated(fleet: Path, change) -> str:
    """h100's real probe document, changed by `change(doc)`, as JSON text."""
    doc = json.loads((fleet / "h100.probe.json").read_text())
    change(doc)
    return json.dumps(doc)


def _set(path: str, value):
    def change(doc) -> None:
        *parents, last = path.split(".")
        target = doc
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[last] = value

    return change


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        ("cards.0.link.current_speed_gts", float("nan"), "NaN is not a number JSON allows"),
        ("cards.0.link.max_speed_gts", float("inf"), "Infinity is not a number JSON allows"),
        ("cards.0.link.max_speed_gts", 1e9, "cards[0].link.max_speed_gts is 1000000000.0, out"),
        ("cards.0.link.current_width", -16, "cards[0].link.current_width is -16, out of range"),
        ("cards.0.link.max_width", 10**30, "cards[0].link.max_width is 1000000000000000000000"),
        ("cards.0.numa_node", -1, "cards[0].numa_node is -1, out of range (0..1023)"),
        ("cards.2.model", "H100" * 1000, "cards[2].model is 4,000 characters long"),
        ("uplinks.0.link.current_speed_gts", "fast", "uplinks[0].link.current_speed_gts is str"),
        ("cards.1.link.degraded", True, "degraded without the speeds"),
    ],
)
def test_fleet_report_refuses_values_no_probe_writes(
    run_cli, fleet: Path, where: str, value, says: str
) -> None:
    bad = fleet / "bad.json"
    change = _set(where, value)
    if where == "cards.1.link.degraded":
        change = lambda doc: (_set(where, True)(doc),  # noqa: E731
                              _set("cards.1.link.max_speed_gts", None)(doc))  # fmt: skip
    bad.write_text(_mutated(fleet, change))
    code, out, err = run_cli("fleet", "report", "-f", "json", str(bad))
    assert code == 2 and out == ""
    assert err.startswith(f"xputune: error: {bad}: ") and says in err, err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"schema_version": 1, "cards": [], "x": ' + "7" * 5000 + "}", "thousands of digits"),
        ('{"schema_version": 1, "cards": [], "x": 1e999}', "1e999 is beyond the range"),
        ('{"schema_version": 1, "cards": [], "x": -Infinity}', "-Infinity is not a number"),
    ],
)
def test_fleet_report_refuses_what_is_not_strict_json(
    run_cli, tmp_path: Path, content: str, says: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, out, err = run_cli("fleet", "report", str(bad))
    assert code == 2 and out == "" and says in err and len(err.splitlines()) == 1, err


@pytest.mark.timeout(30)
def test_fleet_report_refuses_fifos_devices_and_huge_files_before_reading(
    run_cli, tmp_path: Path
) -> None:
    from xputune.userfiles import DOCUMENT_MAX

    fifo = tmp_path / "node1.json"
    os.mkfifo(fifo)  # nobody writes: a read would block forever
    huge = tmp_path / "node2.json"
    with huge.open("wb") as fh:
        fh.truncate(DOCUMENT_MAX + 1)  # sparse: costs no disk
    cases = {
        str(fifo): f"probe or check document is a FIFO, not a regular file: {fifo}",
        "/dev/zero": "probe or check document is a character device, not a regular file: /dev/zero",
        str(tmp_path): f"probe or check document is a directory: {tmp_path}",
        str(huge): f"probe or check document too large: {huge} (more than 4 MiB)",
    }
    for path, says in cases.items():
        code, out, err = run_cli("fleet", "report", path)
        assert code == 2 and out == "" and err == f"xputune: error: {says}\n", err


HOSTILE = "[/red][bold]x\x1b[2J\x1b]0;pwned\x07:ab:\u202e"
SHOWN = "[/red][bold]x\\x1b[2J\\x1b]0;pwned\\x07:ab:\\u202e"  # as it must be printed
FILE = "[red]x\x1b[2J:ab:\u202e"  # what a file name can hold of it (no /)


def test_fleet_report_prints_names_from_data_as_text(run_cli, fleet: Path, monkeypatch) -> None:
    """Markup, escape sequences, emoji codes and bidi overrides in names from the documents
    (and in file names) reach the terminal as visible text, never as what they would do."""
    monkeypatch.setenv("COLUMNS", "400")
    evil = fleet / f"n{FILE}.probe.json"

    def change(doc) -> None:
        for card in doc["cards"]:
            card["model"] = HOSTILE
        doc["cards"][0]["name"] = "gpu" + HOSTILE

    evil.write_text(_mutated(fleet, change))
    check = json.loads((fleet / "h100.check.json").read_text())
    check["ok"] = False
    check["profile"] = HOSTILE
    check["rows"][0].update(knob="k" + HOSTILE, verdict="drift")
    (fleet / f"n{FILE}.check.json").write_text(json.dumps(check))
    files = [str(fleet / "h100.probe.json"), str(evil), str(fleet / f"n{FILE}.check.json")]
    code, out, err = run_cli("fleet", "report", *files)
    assert code == 1 and err == ""
    assert "n[red]x\\x1b[2J:ab:\\u202e" in out  # the host, named by its file
    assert f"8x {SHOWN}" in out  # the layout, from the card models
    assert f"{SHOWN}: k{SHOWN}" in out  # the check's profile and knob
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert Emoji.replace(":ab:") not in out
    code, out, _ = run_cli("fleet", "report", "-f", "json", *files)
    doc = json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert doc["hosts"][1]["host"] == f"n{FILE}"  # JSON carries the name as it is
    assert doc["hosts"][1]["check"]["profile"] == HOSTILE


def test_fleet_report_reads_odd_port_orderings_as_unknown(run_cli, fleet: Path) -> None:
    """A port whose ordering is no object, or whose bits are no booleans, is unknown (the
    probe writes null there): no traceback, and the host's IDO says so."""

    def change(doc) -> None:
        doc["cards"][0]["path"][0]["ordering"] = 5
        doc["cards"][1]["path"][0]["ordering"] = {"request": "yes", "completion": [1]}
        doc["cards"][2]["path"] = ["port", None]

    odd = fleet / "odd.probe.json"
    odd.write_text(_mutated(fleet, change))
    code, out, err = run_cli("fleet", "report", "-f", "json", str(odd))
    assert code in (0, 1) and err == ""
    assert json.loads(out)["hosts"][0]["ido"] in ("unknown", "partial")
