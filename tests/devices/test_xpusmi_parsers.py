"""xpu-smi parsers on the modelled samples (data/xpusmi), their variants and their breakage."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.devices.conftest import DATA
from xputune.devices.xpusmi import SmiParseError, detect, parse, parse_bytes

SEED_BUS_IDS = [f"0000:{b}:00.0" for b in ("23", "24", "63", "64", "a3", "a4", "e3", "e4")]
SAMPLES = {
    "list": "list.txt",
    "query": "query.txt",
    "xml": "query.xml",
    "monitor": "monitor.txt",
    "topo": "topo.txt",
}


def sample(form: str) -> str:
    return (DATA / SAMPLES[form]).read_text()


def colour(text: str) -> str:
    """What a terminal-attached run writes: keys bold, numbers green, resets everywhere."""
    text = re.sub(r"(?m)^(\s*)([A-Z][A-Za-z ]+?)(\s*:)", "\\1\x1b[1m\\2\x1b[0m\\3", text)
    return re.sub(r"\b(\d+)\b", "\x1b[32m\\1\x1b[0m", text)


@pytest.mark.parametrize("form", SAMPLES)
def test_detects_each_form(form: str) -> None:
    assert detect(sample(form)) == form
    report = parse(sample(form))
    assert report.form == form and len(report.cards) == 8
    doc = json.loads(json.dumps(report.as_json()))
    assert doc["schema_version"] == 1 and doc["form"] == form


def test_query_text() -> None:
    report = parse(sample("query"))
    assert report.driver_version == "5.0.21.26"
    assert [c.bus_id for c in report.cards] == SEED_BUS_IDS
    xpu1 = report.cards[1]
    assert (xpu1.name, xpu1.minor, xpu1.firmware) == ("Kunlunxin P800", 1, "1.48.0.13")
    assert (xpu1.memory_total_mib, xpu1.memory_used_mib, xpu1.memory_free_mib) == (
        98304,
        1024,
        97280,
    )
    assert (xpu1.utilization_pct, xpu1.memory_utilization_pct) == (10, 3)
    assert (xpu1.temperature_c, xpu1.power_w) == (42, 81.5)
    assert report.cards[6].serial is None and report.cards[7].power_w is None  # N/A


def test_xml_says_what_the_text_says() -> None:
    text, xml = parse(sample("query")), parse(sample("xml"))
    assert xml.cards == text.cards and xml.driver_version == text.driver_version


def test_monitor_line() -> None:
    cards = parse(sample("monitor")).cards
    assert [c.bus_id for c in cards] == SEED_BUS_IDS
    assert cards[3].name == "Kunlunxin P800"  # quoted, with a space
    assert (cards[3].minor, cards[3].memory_used_mib, cards[3].memory_total_mib) == (3, 3072, 98304)
    assert (cards[3].utilization_pct, cards[3].firmware) == (30, "1.48.0.13")
    assert cards[6].utilization_pct is None  # N/A


def test_list() -> None:
    cards = parse(sample("list")).cards
    assert [c.index for c in cards] == list(range(8))
    assert cards[2].uuid == "XPU-5f0c2a1e-8d3b-4c6a-9e71-000000000002"
    assert all(c.bus_id is None for c in cards)


def test_list_with_bus_id_and_partitions() -> None:
    text = (
        "XPU 0: Kunlunxin P800 (UUID: XPU-a, Bus Id: 00000000:23:00.0)\n"
        "  Partition 0: (UUID: XPU-a-0)\n"
        "XPU 1: Kunlunxin P800\n"
    )
    cards = parse(text).cards
    assert cards[0].bus_id == "0000:23:00.0" and cards[1].uuid is None and len(cards) == 2


def test_topo_matrix() -> None:
    report = parse(sample("topo"))
    topo = report.topology
    assert topo is not None and topo.devices[:2] == ("XPU0", "XPU1")
    assert topo.relations["XPU0"]["XPU1"] == "PIX" and topo.relations["XPU0"]["XPU2"] == "SYS"
    assert topo.relations["NIC0"]["XPU1"] == "PIX" and topo.nics["NIC3"] == "mlx5_3"
    assert topo.legend["XL"] == "Connection traversing XPU Link"
    assert [(c.cpu_affinity, c.numa_affinity) for c in report.cards][::2] == [
        ("16-31,144-159", 1),
        ("48-63,176-191", 3),
        ("80-95,208-223", 5),
        ("112-127,240-255", 7),
    ]


def test_topo_with_xpu_link_and_na() -> None:
    text = (
        "        XPU0    XPU1    CPU Affinity    NUMA Affinity\n"
        "XPU0     X      XL8     0-31            N/A\n"
        "XPU1    XL8      X      0-31            N/A\n"
    )
    report = parse(text)
    assert report.topology.relations["XPU1"]["XPU0"] == "XL8"
    assert report.cards[0].numa_affinity is None


@pytest.mark.parametrize("form", SAMPLES)
def test_ansi_colour_and_crlf_read_the_same(form: str) -> None:
    plain = parse(sample(form))
    assert parse(colour(sample(form))) == plain
    assert parse(sample(form).replace("\n", "\r\n")) == plain


def test_column_widths_do_not_matter() -> None:
    squeezed = re.sub(r"[ \t]+", " ", sample("monitor"))
    assert parse(squeezed) == parse(sample("monitor"))
    spaced = sample("topo").replace("\t", "      ")
    assert parse(spaced) == parse(sample("topo"))
    query = "\n".join(re.sub(r"\s+:", " :", line) for line in sample("query").splitlines())
    assert parse(query) == parse(sample("query"))


@pytest.mark.parametrize(
    ("form", "marker", "message"),
    [
        ("query", "83.50 W\n", "Attached XPUs says 8 but 4 card(s) follow (cut off?)"),
        ("query", "XPU 0000:A3:00.0", "card 0000:A3:00.0 has no details (cut off?)"),
        (
            "query",
            "    Utilization\n        XPU                               : 40",
            "says 8 but 5",
        ),
        ("xml", '<xpu id="0000:A3:00.0">', "malformed or cut-off XML"),
        ("xml", "<total>98304 M", "malformed or cut-off XML"),
        ("topo", "208-223\t5\t\tN/A\n", "no row for XPU5, XPU6, XPU7, NIC0"),
        ("topo", "\nXPU5\t", "row XPU5 has 0 cells for 12 devices (line 7)"),
        ("monitor", "0000:a3:00.0 4  0", "must end with the quoted model name"),
        ("list", "XPU 5: Kunlunxin P800 (UUID: XPU-5f", "not a card line"),
    ],
)
def test_truncated_output_is_one_clear_error(form: str, marker: str, message: str) -> None:
    text = sample(form)
    with pytest.raises(SmiParseError) as caught:
        parse(text[: text.index(marker) + len(marker)])
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty input"),
        ("hello world\n", "not a known form"),
        ("<nvidia_smi_log></nvidia_smi_log>", "expected <xpu_smi_log>"),
        (
            "<xpu_smi_log><xpu><product_name>P800</product_name></xpu></xpu_smi_log>",
            "without its id",
        ),
        ('<xpu_smi_log><xpu id="zz">x</xpu></xpu_smi_log>', "not a PCI bus id"),
        ("<xpu_smi_log><attached_xpus>2</attached_xpus></xpu_smi_log>", "says 2 but 0"),
        (
            "Attached XPUs : 1\nXPU 0000:23:00.0\n    Memory Usage\n        Total : lots MiB\n",
            "memory total",
        ),
        ("Attached XPUs : 1\nXPU 0000:23:00.0\n", "has no details"),
        ('0000:23:00.0 0 0 0 abc 98304 10 1.0 "P800"\n', "memory used"),
        ('0000:23:00.9 0 0 0 1 98304 10 1.0 "P800"\n', "bus id: not a PCI bus id"),
        ('0000:23:00.0 0 0 "P800"\n', "need at least 6"),
        ("\tXPU0\tCPU Affinity\nXPU0\tFOO\t0-3\n", "unknown relation 'FOO'"),
        ("\tXPU0\tCPU Affinity\nXPU9\tX\t0-3\n", "not a device of the header"),
        ("XPU 0: P800\nXPU 0: P800\n", "listed twice"),
    ],
)
def test_malformed_input_is_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(SmiParseError) as caught:
        parse(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_monitor_errors_name_the_line() -> None:
    lines = sample("monitor").splitlines()
    lines[4] = lines[4].replace("98304", "9x304")
    with pytest.raises(SmiParseError, match=r"memory total: .*\(line 5\)$"):
        parse("\n".join(lines))


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE xpu_smi_log [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
]>
<xpu_smi_log><driver_version>&lol2;</driver_version></xpu_smi_log>
"""
EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE xpu_smi_log [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<xpu_smi_log><driver_version>&secret;</driver_version></xpu_smi_log>
"""


@pytest.mark.parametrize("text", [BILLION_LAUGHS, EXTERNAL])
def test_xml_entities_are_refused(text: str) -> None:
    with pytest.raises(SmiParseError, match="entity declarations are not allowed"):
        parse(text)


def test_xml_nesting_is_capped() -> None:
    deep = "<xpu_smi_log>" + "<a>" * 100 + "</a>" * 100 + "</xpu_smi_log>"
    with pytest.raises(SmiParseError, match="nested too deep"):
        parse(deep)


def test_undecodable_bytes_do_not_escape() -> None:
    data = (DATA / "query.xml").read_bytes().replace(b"Kunlunxin", b"Kunlun\xff\xfe")
    assert parse_bytes(data).cards[0].name == "Kunlun\ufffd\ufffd P800"


def test_forced_form_mismatch_is_a_parse_error() -> None:
    with pytest.raises(SmiParseError):
        parse(sample("query"), form="monitor")
    with pytest.raises(SmiParseError, match="unknown form"):
        parse(sample("query"), form="csv")


@pytest.mark.parametrize(
    "text",
    [
        "XPU 0: " + " " * 200_000 + "x(",
        "=" * 200_000,
        "0000:23:00.0 " + " " * 200_000 + 'x"',
        "Key" + " " * 200_000 + "x",
        "\tXPU0\tCPU Affinity\nXPU0\tX\t0-3\nLegend:\n  X" + " " * 200_000 + "y",
    ],
)
def test_long_lines_cost_linear_time(text: str) -> None:
    """No regular expression here backtracks quadratically on a hostile line."""
    start = time.perf_counter()
    with pytest.raises(SmiParseError):
        parse(text)
    assert time.perf_counter() - start < 2.0
