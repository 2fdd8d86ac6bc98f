"""xpu-smi parsers on the modelled samples (data/xpusmi), their variants and their breakage.

The real outputs are held to in test_real_outputs.py; these samples cover variants the field
outputs lack (every section present, N/A in chosen places, modelled on nvidia-smi).
"""

from __future__ import annotations

import contextlib
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
    assert (cards[3].index, cards[3].memory_used_mib, cards[3].memory_total_mib) == (3, 3072, 98304)
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
    ("form", "marker", "cards", "warning"),
    [
        ("query", "83.50 W\n", 4, "'Attached' says 8 but 4 card block(s) follow"),
        ("query", "XPU 0000:A3:00.0", 5, "card 0000:A3:00.0 has no details (cut off?)"),
        ("xml", '<xpu id="0000:A3:00.0">', 4, "kept the 4 complete card(s)"),
        ("topo", "208-223\t5\t\tN/A\n", 5, "no row for XPU5 (cut off?)"),
        ("topo", "\nXPU5\t", 5, "row XPU5 has 0 cells for 12 devices"),
        ("monitor", "0000:a3:00.0 4  0", 4, "not a card line, skipped"),
        ("list", "XPU 5: Kunlunxin P800 (UUID: XPU-5f", 5, "not a card line, skipped"),
    ],
)
def test_truncated_output_keeps_what_it_read(
    form: str, marker: str, cards: int, warning: str
) -> None:
    text = sample(form)
    report = parse(text[: text.index(marker) + len(marker)])
    assert len([c for c in report.cards if c.bus_id or c.uuid or c.cpu_affinity]) == cards
    assert any(warning in w for w in report.warnings), report.warnings


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty input"),
        ("hello world\n", "not a known form"),
        ("<html></html>", "expected <xpu_smi_log> or <nvidia_smi_log>"),
        ('<xpu_smi_log><xpu id="0000:23:00.0">', "malformed or cut-off XML"),
        ("Attached : 1\n", "no card block"),
        ('0000:23:00.0 0 0 "P800"\n', "no card line"),
        ("\tXPU0\tXPU0\tCPU Affinity\nXPU0\tX\tX\t0-3\n", "appears twice in the header"),
        (
            "XPU 0000:23:00.0\n    Product Name : a\nXPU 0000:23:00.0\n    Product Name : b\n",
            "bus id 0000:23:00.0 appears twice",
        ),
    ],
)
def test_unrecognisable_input_is_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(SmiParseError) as caught:
        parse(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "field", "warning"),
    [
        (
            "<xpu_smi_log><xpu><product_name>P800</product_name></xpu></xpu_smi_log>",
            "bus_id",
            "without its id",
        ),
        ('<xpu_smi_log><xpu id="zz"><a>x</a></xpu></xpu_smi_log>', "bus_id", "not a PCI bus id"),
        (
            "Attached XPUs : 1\nXPU 0000:23:00.0\n    Memory Usage\n        Total : lots MiB\n",
            "memory_total_mib",
            "memory total",
        ),
        ('0000:23:00.0 0 0 0 abc 98304 10 1.0 "P800"\n', "memory_used_mib", "memory used"),
        ('0000:23:00.9 0 0 0 1 98304 10 1.0 "P800"\n', "bus_id", "not a PCI bus id"),
        ("\tXPU0\tCPU Affinity\tNUMA Affinity\nXPU0\tX\t0-3\tmany\n", "numa_affinity", "NUMA"),
    ],
)
def test_a_garbled_field_is_null_with_a_warning(text: str, field: str, warning: str) -> None:
    report = parse(text)
    assert getattr(report.cards[0], field) is None
    assert any(warning in w for w in report.warnings), report.warnings
    assert all("\n" not in w for w in report.warnings)


def test_odd_rows_cost_the_row_not_the_matrix() -> None:
    report = parse("\tXPU0\tXPU1\tCPU Affinity\nXPU0\tX\tFOO\t0-3\nXPU9\tX\tX\t0-3\n")
    assert report.topology.relations["XPU0"] == {"XPU0": "X", "XPU1": None}
    assert any("unknown relation 'FOO'" in w for w in report.warnings)
    assert any("not a header device" in w for w in report.warnings)
    assert any("no row for XPU1" in w for w in report.warnings)


def test_attached_count_is_not_trusted() -> None:
    text = "Attached XPUs : 2\nXPU 0000:23:00.0\n    Product Name : P800\n"
    report = parse(text)
    assert len(report.cards) == 1 and "says 2 but 1" in report.warnings[0]


def test_monitor_warnings_name_the_line() -> None:
    lines = sample("monitor").splitlines()
    lines[4] = lines[4].replace("98304", "9x304")
    report = parse("\n".join(lines))
    assert report.cards[4].memory_total_mib is None
    assert any(w.endswith("(line 5)") and "memory total" in w for w in report.warnings)


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
        parse(sample("query"), form="json")  # "csv" is a form now: --query-gpu --format=csv


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
    with contextlib.suppress(SmiParseError):
        parse(text)
    assert time.perf_counter() - start < 2.0
