"""The operator's experience: layouts that fit, one error voice, recordings that read back,
man pages that install, progress that stays quiet."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from rich.console import Console

from xputune.cli import output
from xputune.cli.output import ID, fit, new_table, progress

ROOT = Path(__file__).resolve().parents[2]


def _lines_fit(text: str, width: int) -> None:
    assert "…" not in text
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, too_wide[:3]


@pytest.mark.parametrize("example", ["h3c-hygon-p800", "nvidia-hgx-h100"])
@pytest.mark.parametrize("width", [80, 100, 120])
def test_probe_fits_the_width_and_cuts_no_identifier(
    run_cli, monkeypatch, example: str, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, _ = run_cli("probe", "--example", example)
    assert code == 0
    _lines_fit(out, width)
    code, doc, _ = run_cli("probe", "--example", example, "-f", "json")
    data = json.loads(doc)
    for ident in [c["bdf"] for c in data["cards"]] + [n["bdf"] for n in data["nics"]]:
        assert ident in out
    for nic in data["nics"]:
        assert re.search(rf"\b{re.escape(nic['name'])}\b", out)
    cpulists = [n["cpus"] for n in data["numa_nodes"]] + [c["local_cpus"] for c in data["cards"]]
    for cpus in filter(None, cpulists):  # every CPU list whole, on one line
        assert re.search(rf"(?<![\d,-]){re.escape(cpus)}(?![\d,-])", out), cpus


def test_piped_output_is_80_columns_without_columns(run_cli, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = run_cli("probe", "--example", "h3c-hygon-p800")
    assert code == 0 and max(map(len, out.splitlines())) <= output.PIPE_WIDTH
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli("probe", "--example", "h3c-hygon-p800")
    assert max(map(len, out.splitlines())) > 120  # the whole matrix on one table


def test_wide_output_keeps_one_matrix(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    _, out, _ = run_cli("probe", "--example", "h3c-hygon-p800")
    assert "Relations from PCIe (sysfs)\n" in out.replace(" \n", "\n") or re.search(
        r"Relations from PCIe \(sysfs\) *\n", out
    )
    assert "nic0 =" not in out


def test_narrow_output_splits_the_matrix_with_a_legend(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = run_cli("probe", "--example", "h3c-hygon-p800")
    assert "Relations from PCIe (sysfs): cards" in out
    assert "nic1 = ens1np0" in out


def test_smi_fits_and_keeps_uuids(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    real = ROOT / "tests/devices/data/real/nvsmi-q-x-hadoop-p100x2.xml"
    code, out, _ = run_cli("smi", "--input", str(real))
    assert code == 0
    _lines_fit(out, 80)
    assert "GPU-28604e81-21ec-cc48-6759-bf2648b22e16" in out


def test_fit_splits_in_column_blocks_repeating_the_key() -> None:
    table = new_table("wide", [("name", ID)] + [(f"col{i}", ID) for i in range(20)])
    table.add_row("row0", *(f"0000:{i:02x}:00.0" for i in range(20)))
    out = Console(width=80, file=io.StringIO())
    parts = fit(out, table)
    assert len(parts) > 1
    assert all(p.columns[0].header == "name" for p in parts)
    assert sum(len(p.columns) - 1 for p in parts) == 20
    assert parts[0].title == "wide (columns 1-4 of 20)"
    out.print(*parts)
    text = out.file.getvalue()
    _lines_fit(text, 80)
    assert all(f"0000:{i:02x}:00.0" in text for i in range(20))


def test_bullets_hang_under_their_first_word() -> None:
    """A long reason wraps under its own text, not under the dash; data stays data."""
    from xputune.cli.output import bullets

    buf = io.StringIO()
    Console(file=buf, width=40, color_system=None).print(
        bullets(["one two three four five six seven eight nine ten", "[red]x[/red]"])
    )
    lines = [line.rstrip() for line in buf.getvalue().splitlines()]
    assert lines[0].startswith("  - one two") and lines[1].startswith("    ") and lines[1][4] != " "
    assert lines[-1] == "  - [red]x[/red]"


def test_fit_leaves_a_fitting_table_alone() -> None:
    table = new_table("narrow", [("card", ID), "why"])
    table.add_row("xpu0", "a long reason " * 10)
    out = Console(width=80, file=io.StringIO())
    assert fit(out, table) == [table]


def test_console_width_follows_columns(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "97")
    assert output.console().width == 97
    monkeypatch.delenv("COLUMNS")
    assert output.output_width(io.StringIO()) == 80


# --- one error voice ---------------------------------------------------------------------------

USAGE_ERRORS = [
    (["probe", "--format", "xml"], "invalid value for '--format': 'xml' is not one of"),
    (["tiers", "--tp", "0"], "invalid value for '--tp': must be from 1 to 1024"),
    (["record"], "missing argument 'OUT'"),
    (["probe", "--bogus"], "no such option: --bogus"),
    (["frobnicate"], "no such command 'frobnicate'"),
    (["probe", "--example"], "option '--example' requires an argument"),
]


@pytest.mark.parametrize(("argv", "says"), USAGE_ERRORS)
def test_usage_errors_are_one_line_exit_2(run_cli, argv: list[str], says: str) -> None:
    code, out, err = run_cli(*argv)
    assert code == 2 and out == ""
    assert err.startswith(f"xputune: error: {says}"), err
    assert len(err.splitlines()) == 1
    assert "pydantic" not in err and "Input should" not in err and "╭" not in err


def test_help_is_plain_text_that_cuts_nothing(run_cli, monkeypatch) -> None:
    """At 80 columns every option's spelling and value stay whole, on one line."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli("launch", "sglang", "--help")
    assert code == 0 and out.startswith("Usage: xputune launch sglang [OPTIONS] -- SGLANG_ARGS")
    assert "╭" not in out and "…" not in out
    assert "--write-policy write_through|write_back|write_through_selective" in out
    assert "--l3-prefetch best_effort|wait_complete|timeout" in out
    assert "Exit status:" in out and "XPUTUNE_HICACHE_LIFO" in out


def test_every_command_list_says_whole_sentences(run_cli) -> None:
    """The command lists of `xputune --help` and of each group show a docstring's whole first
    paragraph, not its first wrapped line (status's once stopped at "the boot and watch")."""
    pages = [run_cli("--help")[1]]
    pages += [run_cli(group, "--help")[1] for group in ("kernels", "bench", "launch", "fleet")]
    blocks = [page.split("Commands:\n")[1].split("\n\n")[0] for page in pages]
    entries = [e for block in blocks for e in re.split(r"^  (?=\S)", block, flags=re.M) if e]
    assert len(entries) > 25
    for entry in entries:
        assert " ".join(entry.split()).endswith((".", "?")), entry


def test_console_script_usage_error(tmp_path: Path) -> None:
    """The installed entry point: one line on stderr, exit 2, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "xputune", "probe", "--format", "xml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("xputune: error: ") and len(done.stderr.splitlines()) == 1


# --- record ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["me.zip", "me", "me.gz", "me.tar.zst"])
def test_record_refuses_what_probe_cannot_read_back(run_cli, tmp_path: Path, name: str) -> None:
    target = tmp_path / name
    code, _, err = run_cli("record", str(target), "--root", str(tmp_path))
    assert code == 2 and "probe --root reads back" in err and len(err.splitlines()) == 1
    assert not target.exists()


def test_record_refuses_a_missing_folder(run_cli, tmp_path: Path) -> None:
    code, _, err = run_cli("record", str(tmp_path / "no" / "box.tar.gz"))
    assert code == 2 and "no such directory" in err


# --- man pages ---------------------------------------------------------------------


def test_man_pages_ship_in_the_wheel_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["data-files"]["share/man/man1"]
    assert globs == ["man/*.1"] and (ROOT / "man" / "xputune.1").exists()
    data = config["tool"]["setuptools"]["package-data"]["xputune"]
    assert "data/schemas/*.json" in data


# --- progress ----------------------------------------------------------------------------------


def test_progress_is_silent_when_not_a_terminal(capsys) -> None:
    with progress(1000, "reading") as advance:
        advance(500)
        advance(500)
    with progress(1000, "reading", enabled=False) as advance:
        advance(1)
    assert capsys.readouterr() == ("", "")


def test_counting_reader_reports_every_byte(tmp_path: Path) -> None:
    import gzip

    from xputune.userfiles import CountingReader

    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n' * 1000))
    seen: list[int] = []
    with CountingReader(open(path, "rb"), seen.append) as raw:
        lines = gzip.GzipFile(fileobj=raw).read().splitlines()
    assert len(lines) == 1000 and sum(seen) == path.stat().st_size


@pytest.mark.parametrize("example", ["h3c-hygon-p800", "nvidia-hgx-h100"])
@pytest.mark.parametrize("width", [80, 120])
def test_plan_fits_the_width_and_cuts_no_identifier(
    run_cli, monkeypatch, example: str, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    args = ("plan", "--example", example, "--model", "glm-5", "--tp", "8")
    code, out, _ = run_cli(*args)
    assert code == 0
    # The SGLang command is shell text continued with " \\": pasted, it runs as one command.
    table_part, command = out.split("\nSGLang:\n")
    _lines_fit(table_part, width)
    words = shlex.split(command.replace("\\\n", " "))
    assert words[words.index("-m") + 1] == "sglang.launch_server"
    assert all(len(line) <= width or " " not in line.strip() for line in command.splitlines())
    _, doc, _ = run_cli(*args, "-f", "json")
    for rank in json.loads(doc)["ranks"]:
        for ident in (rank["card"], rank["bdf"], rank["cpus"], rank["nic"], rank["rdma"]):
            if ident:
                assert re.search(rf"(?<![\w:,-]){re.escape(ident)}(?![\w:,-])", table_part)
