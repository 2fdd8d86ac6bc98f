"""Four nvidia-smi forms that were misread, held to real captures (data/real, see its README).

MIG instances read as cards, the driver-610 banner and `-q` note, Windows process rows, and the
`--query-gpu --format=csv` form. Each is checked on the values the capture really holds, through
the parser and through the CLI (table and JSON, the JSON against the shipped schema).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from tests.devices.test_real_outputs import REAL, report
from xputune.cli.schema_cmds import schema_text
from xputune.devices.xpusmi import SmiMig, SmiParseError, parse, parse_bytes
from xputune.devices.xpusmi.table import _process
from xputune.devices.xpusmi.values import Notes

MIG_OLD = "nvsmi-table-mig-a100x8-450.80.02.txt"
MIG_NEW = "nvsmi-table-mig-a100-80gb-570.148.08.txt"
TABLE_610 = "nvsmi-table-kmd-610.57.04-gtx1650.txt"
QUERY_610 = "nvsmi-q-temperature-610.57.04-deprecated-note.txt"
WIN_546 = "nvsmi-table-windows-wddm-546.33.txt"
WIN_616 = "nvsmi-table-windows-kmd-616.92.txt"
WSL = "nvsmi-table-wsl-smi-615.71.08-kmd-616.92.txt"
CSV_580 = "nvsmi-query-gpu-csv-580.173.02.txt"
CSV_HAMI = "nvsmi-query-gpu-csv-hami-610.43.02.txt"
CSV_NA = "nvsmi-query-gpu-csv-595.84-na.txt"


def json_doc(run_cli, name: str) -> dict:
    code, out, err = run_cli("smi", "--input", str(REAL / name), "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    errors = [
        e.message for e in Draft202012Validator(json.loads(schema_text("smi"))).iter_errors(doc)
    ]
    assert errors == []
    return doc


# --- 8: MIG devices are slices of their GPU, not cards -------------------------------------


def test_mig_old_layout_stays_eight_cards() -> None:
    r = report(MIG_OLD)
    assert [c.index for c in r.cards] == list(range(8)) and r.warnings == ()
    assert all(c.bus_id for c in r.cards)
    assert [len(c.mig_devices) for c in r.cards] == [0] * 7 + [1]
    assert r.cards[7].mig_devices == (SmiMig(0, 13, 0, 3, 4864, 14),)
    assert (r.cards[7].memory_used_mib, r.cards[7].memory_total_mib) == (3, 40537)


def test_mig_new_layout_four_slices_under_one_gpu() -> None:
    r = report(MIG_NEW)
    (card,) = r.cards
    assert (card.bus_id, card.memory_total_mib, card.utilization_pct) == (
        "0000:b6:00.0",
        81920,
        None,
    )
    assert [(m.index, m.gpu_instance, m.compute_instance) for m in card.mig_devices] == [
        (0, 1, 0),
        (1, 5, 0),
        (2, 13, 0),
        (3, 14, 0),
    ]
    assert [(m.memory_used_mib, m.memory_total_mib, m.sm_count) for m in card.mig_devices] == [
        (107, 40192, 42),
        (71, 19968, 28),
        (36, 9728, 14),
        (36, 9728, 14),
    ]
    # the BAR1 aperture (65535, 32767, 16383 MiB) is never anyone's memory
    assert not {65535, 32767, 16383} & {m.memory_total_mib for m in card.mig_devices}
    assert r.warnings == () and r.processes == ()


def test_mig_json_and_table(run_cli) -> None:
    doc = json_doc(run_cli, MIG_NEW)
    (card,) = doc["cards"]
    assert card["card"] == "gpu0" and len(card["mig_devices"]) == 4
    assert card["mig_devices"][2] == {
        "index": 2,
        "gpu_instance": 13,
        "compute_instance": 0,
        "memory_used_mib": 36,
        "memory_total_mib": 9728,
        "sm_count": 14,
    }
    code, out, _ = run_cli("smi", "--input", str(REAL / MIG_OLD))
    assert code == 0 and "MIG devices" in out and out.count("A100-SXM4-40GB") == 8
    assert "4864" in out and "8191" not in out  # the slice's memory, not its BAR1


def test_mig_device_of_an_unlisted_gpu_is_a_warning() -> None:
    text = (REAL / MIG_OLD).read_text().replace("|  7   13   0   0  |", "|  9   13   0   0  |")
    r = parse(text)
    assert len(r.cards) == 8 and not any(c.mig_devices for c in r.cards)
    assert r.warnings == (
        "smi table: MIG device 0 of GPU 9, which the table does not list, left out",
    )


# --- 9: driver 610 banner and -q note -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "driver"),
    [(TABLE_610, "610.57.04"), (WIN_616, "616.92"), (WSL, "616.92")],
)
def test_kmd_banner_is_a_table_with_its_driver(name: str, driver: str) -> None:
    r = report(name)
    assert (r.form, r.vendor, r.driver_version, r.warnings) == ("table", "nvidia", driver, ())
    assert r.cards[0].bus_id in ("0000:01:00.0", "0000:02:00.0")


def test_610_table_values() -> None:
    (card,) = report(TABLE_610).cards
    assert (card.name, card.memory_used_mib, card.memory_total_mib) == (
        "NVIDIA GeForce GTX 1650",
        580,
        4096,
    )
    assert (card.utilization_pct, card.temperature_c, card.power_w) == (39, 51, None)


def test_610_query_driver_is_just_the_number(run_cli) -> None:
    r = report(QUERY_610)
    assert (r.form, r.driver_version, len(r.cards)) == ("query", "610.57.04", 2)
    doc = json_doc(run_cli, QUERY_610)
    assert doc["driver_version"] == "610.57.04"


def test_deprecated_driver_key_alone_still_reads_the_number() -> None:
    """Without the KMD Version line (derived from the real capture): the note is dropped."""
    text = (REAL / QUERY_610).read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("KMD Version"))
    assert parse(text).driver_version == "610.57.04"


def test_xml_driver_version_note_is_dropped() -> None:
    """The P100 XML with a 610-style note in driver_version (derived from the real capture)."""
    data = (REAL / "nvsmi-q-x-hadoop-p100x2.xml").read_bytes()
    noted = data.replace(
        b"<driver_version>375.66</driver_version>",
        b"<driver_version>375.66 [Deprecated; Use KMD Version instead]</driver_version>",
    )
    assert noted != data and parse_bytes(noted).driver_version == "375.66"


def test_a_driver_version_that_is_no_number_is_unknown_with_a_warning() -> None:
    text = (REAL / TABLE_610).read_text().replace("KMD Version: 610.57.04", "KMD Version: abc")
    r = parse(text)
    assert r.driver_version is None and len(r.cards) == 1
    assert r.warnings == (
        "smi (default table) output: driver version: not a version number: 'abc'",
    )


# --- 10: Windows process rows ---------------------------------------------------------------


def test_windows_process_names_keep_spaces_and_memory_is_unknown() -> None:
    r = report(WIN_546)
    assert r.warnings == () and len(r.processes) == 9
    assert [p.memory_mib for p in r.processes] == [None] * 9
    assert {p.type for p in r.processes} == {"C+G"}
    assert r.processes[3].name == "...Programs\\Microsoft VS Code\\Code.exe"
    assert (r.processes[4].pid, r.processes[4].name) == (5204, "C:\\Windows\\explorer.exe")
    assert r.cards[0].utilization_pct == 5  # GPU-Util, not the fan's 0%


def test_windows_short_process_row(run_cli) -> None:
    (p,) = report(WIN_616).processes
    assert (p.index, p.pid, p.type, p.name, p.memory_mib) == (
        0,
        19504,
        "C+G",
        "...al\\Programs\\Cursor.exe",
        None,
    )
    doc = json_doc(run_cli, WIN_616)
    assert doc["processes"][0]["name"] == "...al\\Programs\\Cursor.exe"
    code, out, _ = run_cli("smi", "--input", str(REAL / WIN_546))
    assert code == 0 and "C:\\Windows\\explorer.exe N/A" not in out


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        # a MIG process row: GI and CI ids, memory in MiB
        ("|    0    1    0      12345      C   python train.py            500MiB |",
         (0, 12345, "C", "python train.py", 500, 1, 0)),
        # the pre-MIG layout: no GI/CI columns
        ("|    1      4242      G   /usr/lib/xorg/Xorg                   12MiB |",
         (1, 4242, "G", "/usr/lib/xorg/Xorg", 12, None, None)),
    ],
)  # fmt: skip
def test_process_row_layouts(row: str, expected: tuple) -> None:
    notes = Notes()
    p = _process(row, 1, notes)
    assert p is not None and notes.done() == ()
    assert (p.index, p.pid, p.type, p.name, p.memory_mib, p.gpu_instance, p.compute_instance) == (
        expected
    )


def test_process_memory_unreadable_is_a_warning() -> None:
    notes = Notes()
    p = _process("|    0   N/A  N/A      5204    C+G   C:\\x.exe     12GB?   |", 7, notes)
    assert p is not None and p.memory_mib is None and p.name == "C:\\x.exe"
    assert notes.done() == ("smi table: process memory not read: '12GB?' (line 7)",)


NAME_CHARS = st.sampled_from(list("abcXYZ019._-() \\:"))


@settings(max_examples=150, deadline=None)
@given(
    st.text(NAME_CHARS, min_size=1, max_size=40).map(str.strip).filter(bool),
    st.integers(0, 99_999_999),
    st.sampled_from(["C", "G", "C+G", "M+C"]),
    st.sampled_from(["N/A", "0MiB", "12345MiB"]),
)
def test_windows_process_row_round_trip(name: str, pid: int, kind: str, memory: str) -> None:
    """Any name (spaces, backslashes, parentheses) comes back whole, the memory column apart."""
    row = f"|    0   N/A  N/A  {pid:>12}  {kind:>5}   {name:<40}  {memory:>8}      |"
    notes = Notes()
    p = _process(row, 1, notes)
    assert p is not None and notes.done() == ()
    assert (p.pid, p.type, p.name) == (pid, kind, name)
    assert p.memory_mib == (None if memory == "N/A" else int(memory[:-3]))


# --- 11: --query-gpu --format=csv -----------------------------------------------------------


def test_csv_with_bus_ids(run_cli) -> None:
    r = report(CSV_580)
    assert (r.form, r.vendor, r.driver_version, r.warnings) == ("csv", "nvidia", "580.173.02", ())
    assert [(c.card, c.bus_id, c.name, c.memory_total_mib) for c in r.cards] == [
        ("gpu0", "0000:01:00.0", "NVIDIA GeForce RTX 5060 Ti", 16311),
        ("gpu1", "0000:07:00.0", "NVIDIA GeForce RTX 5060", 8151),
    ]
    doc = json_doc(run_cli, CSV_580)
    assert doc["tool"] == "nvidia-smi --query-gpu --format=csv" and len(doc["cards"]) == 2


def test_csv_unknown_columns_ignored() -> None:
    r = report(CSV_HAMI)
    assert (r.driver_version, r.warnings, len(r.cards)) == ("610.43.02", (), 8)
    assert r.cards[7].uuid == "GPU-f4c61521-240a-da09-2787-e576034e197e"
    assert {(c.name, c.memory_total_mib) for c in r.cards} == {
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887)
    }


def test_csv_without_index_has_no_card_name(run_cli) -> None:
    (card,) = report(CSV_NA).cards
    assert (card.index, card.card, card.name, card.memory_total_mib) == (
        None,
        None,
        "NVIDIA GeForce RTX 5070 Ti",
        16303,
    )
    assert json_doc(run_cli, CSV_NA)["driver_version"] == "595.84"


def test_csv_placeholders_are_unknown_without_warnings() -> None:
    """Derived from the real 580 capture: nvidia-smi's [N/A] and [Not Supported] placeholders."""
    text = (
        (REAL / CSV_580)
        .read_text()
        .replace("16311 MiB", "[N/A]")
        .replace("8151 MiB", "[Not Supported]")
    )
    r = parse(text)
    assert [c.memory_total_mib for c in r.cards] == [None, None] and r.warnings == ()


def test_csv_nounits_and_garbled_values() -> None:
    """Derived from the real 580 capture: bare numbers read; a garbled one is unknown, warned."""
    text = (REAL / CSV_580).read_text().replace("16311 MiB", "16311").replace("8151 MiB", "lots")
    r = parse(text)
    assert [c.memory_total_mib for c in r.cards] == [16311, None]
    assert len(r.warnings) == 1 and "memory.total (line 3)" in r.warnings[0]


def test_csv_short_row_is_skipped_with_a_warning() -> None:
    text = (REAL / CSV_580).read_text() + "2, NVIDIA GeForce RTX 5060\n"
    r = parse(text)
    assert len(r.cards) == 2 and "row skipped" in r.warnings[0] and "(line 4)" in r.warnings[0]


def test_csv_noheader_is_refused_with_one_line(run_cli, tmp_path) -> None:
    """The real 580 rows without their header line, as --format=csv,noheader prints them."""
    rows = (REAL / CSV_580).read_text().splitlines()[1:]
    saved = tmp_path / "noheader.csv"
    saved.write_text("\n".join(rows) + "\n")
    code, out, err = run_cli("smi", "--input", str(saved))
    assert code != 0 and out == "" and len(err.strip().splitlines()) == 1
    assert "--format=csv,noheader" in err and "without noheader" in err
    assert "Traceback" not in err
    with pytest.raises(SmiParseError, match="noheader"):
        parse("0, 12.0\n1, 8.6\n")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(st.sampled_from(list("0123456789 ,.[]/NAMiB-x")), max_size=40), max_size=6))
def test_csv_rows_under_a_real_header_never_raise(rows: list[str]) -> None:
    header = (REAL / CSV_580).read_text().splitlines()[0]
    r = parse("\n".join([header, *rows]), "csv")
    assert r.form == "csv" and all("\n" not in w for w in r.warnings)
    r.as_json()
