"""Text from data is printed as text, and machine output is valid JSON.

Names and values read from a host tree, a vendor tool's output or a user's file reach the
terminal with what is not printable escaped (\\x1b, never an ESC), as literal text (rich
markup such as [/red] is shown, not obeyed, and never crashes a command), and without emoji
(`0000:ab:00.0` is a bus id, not `0000🆎00.0`). JSON and YAML documents never hold NaN or
an infinity.
"""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path

import pytest
from rich.console import Console
from rich.emoji import Emoji

from tests.conftest import copy_tree
from xputune.cli.output import (
    Format,
    add_row,
    console,
    emit_data,
    fit,
    new_table,
    print_fitted,
    text,
    text_lines,
)
from xputune.errors import XputuneError

HOSTILE = "[/red][bold]x\x1b[2J\x1b]0;pwned\x07:ab:\u202e"
SHOWN = "[/red][bold]x\\x1b[2J\\x1b]0;pwned\\x07:ab:\\u202e"
AB = Emoji.replace(":ab:")


def _clean(out: str) -> None:
    """Nothing in `out` a terminal would act on, and no emoji made of a name."""
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert AB not in out


def _render(*parts, width: int = 200) -> str:
    out = Console(file=io.StringIO(), width=width, emoji=False)
    print_fitted(out, *parts)
    return out.file.getvalue()


def test_text_is_literal_escaped_and_keeps_its_style() -> None:
    cell = text(HOSTILE, "red")
    assert cell.plain == SHOWN and str(cell.style) == "red"
    assert text(7).plain == "7" and text("0000:ab:00.0").plain == "0000:ab:00.0"
    lines = text_lines([HOSTILE, "b\nc"], "dim")
    assert lines.plain == f"{SHOWN}\nb\\nc"  # one line per item: a newline in data is shown


def test_a_table_of_hostile_cells_prints_them_as_text() -> None:
    table = new_table(text(f"Cards {HOSTILE}"), [("card", {"no_wrap": True}), text(HOSTILE)])
    add_row(table, HOSTILE, "0000:ab:00.0")
    add_row(table, "[red]", text("ok", "green"))
    out = _render(table)
    _clean(out)
    assert out.count(SHOWN) == 3  # the title, a header and a cell
    assert "0000:ab:00.0" in out and "[red]" in out


def test_a_split_table_keeps_a_data_title_literal() -> None:
    table = new_table(text(f"[bold]{HOSTILE}"), [("key", {"no_wrap": True})])
    for i in range(8):
        table.add_column(f"column {i} " + "w" * 20, no_wrap=True)
    add_row(table, "k", *["v" * 20] * 8)
    parts = fit(Console(file=io.StringIO(), width=80), table)
    assert len(parts) > 1
    titles = [p.title.plain for p in parts]
    assert all(t.startswith(f"[bold]{SHOWN} (column") and t.endswith(" of 8)") for t in titles)
    _clean(_render(*parts, width=80))


def test_the_console_makes_no_emoji(capsys) -> None:
    console().print("bus 0000:ab:00.0 :smile:")
    assert capsys.readouterr().out == "bus 0000:ab:00.0 :smile:\n"


# ------------------------------------------------------------------------- JSON and YAML


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("fmt", [Format.json, Format.yaml])
def test_a_document_with_a_non_finite_number_is_refused_whole(bad, fmt, capsys) -> None:
    doc = {"schema_version": 1, "fit": {"points": [{"ms": 1.0}, {"ms": bad}]}}
    with pytest.raises(XputuneError) as err:
        emit_data(doc, fmt)
    assert str(err.value) == (
        "the result holds a number that is not finite at fit.points[1].ms: nothing written "
        "(an input is out of range)"
    )
    assert capsys.readouterr().out == ""


def test_a_finite_document_is_written_as_before(capsys) -> None:
    doc = {"schema_version": 1, "name": HOSTILE, "values": [1.5, 2, None, {"x": 1e308}]}
    emit_data(doc, Format.json)
    out = capsys.readouterr().out
    assert out == json.dumps(doc, indent=2) + "\n"
    assert "\x1b" not in out  # JSON escapes it (\u001b) and the document keeps the name
    assert json.loads(out)["name"] == HOSTILE


# ------------------------------------------------------------------ commands, end to end


def test_probe_prints_a_hostile_cpu_name_and_nic_as_text(run_cli, tmp_path: Path) -> None:
    tree = copy_tree("h3c-hygon-p800", tmp_path / "seed")
    cpuinfo = tree / "proc" / "cpuinfo"
    cpuinfo.write_text(cpuinfo.read_text().replace("Hygon C86-4G 7490", HOSTILE))
    net = tree / "sys" / "class" / "net"
    os.rename(net / "ens1np0", net / "ens1[red]\x1b[2J:ab:")  # a name holds no /
    code, out, err = run_cli("probe", "--root", str(tree))
    assert code == 0, err
    _clean(out)
    assert SHOWN in out  # the CPU model, in the summary line
    assert "ens1[red]\\x1b[2J:ab:" in out  # the NIC, in the matrix and the NIC table
    code, out, _ = run_cli("probe", "--root", str(tree), "-f", "json")
    assert code == 0 and json.loads(out)["cpu"]["model_name"].startswith(HOSTILE)


def test_smi_prints_hostile_names_from_a_saved_output_as_text(
    run_cli, tmp_path: Path, monkeypatch
) -> None:
    from xputune.userfiles import printable

    monkeypatch.setenv("COLUMNS", "400")
    real = Path(__file__).resolve().parents[1] / "devices" / "data" / "real"
    saved = tmp_path / "m.txt"
    saved.write_text((real / "xpusmi-m-minimax.txt").read_text().replace("P800 OAM", HOSTILE))
    code, out, _ = run_cli("smi", "--input", str(saved), "-f", "json")
    name = json.loads(out)["cards"][0]["name"]
    assert "[/red]" in name and "\x07" in name  # what the parser kept of it
    code, out, err = run_cli("smi", "--input", str(saved))
    assert code == 0, err
    _clean(out)
    assert printable(name) in out
