"""Misreadings found on third-party data, each on the real output that shows it.

Sources and licences of the files are in data/real/README.md.

- `nvidia-smi topo -m` cut off mid-matrix (a copy-paste that stops early) was read as a whole
  matrix without a word: a missing NIC row, or a matrix with no Legend after it, passed as
  complete. The real RTX 6000 Ada output is cut after every line here, as a copy-paste may
  be, and each cut must say "cut off?".
- rich turns `:ab:` into an emoji: the bus id 0000:ab:00.0 of a real H100 box (GPU 5 of
  an 8 x H100 SXM nvidia-smi table) must print as itself.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from rich.emoji import Emoji

from xputune.devices.xpusmi import parse_bytes

REAL = Path(__file__).resolve().parent / "data" / "real"
TOPO = REAL / "nvsmi-topo-rtx6000ada-x4-nic-rows.txt"
TABLE = REAL / "nvsmi-table-h100-sxm-x8-bus-ab.txt"
CUT = "(cut off?)"


def cuts(path: Path) -> list[tuple[int, bytes]]:
    """The output stopped after each of its lines but the last, as a copy-paste may stop:
    (lines kept, text)."""
    lines = path.read_bytes().splitlines(keepends=True)
    return [(n, b"".join(lines[:n])) for n in range(2, len(lines))]


def test_the_whole_output_reads_without_a_warning() -> None:
    r = parse_bytes(TOPO.read_bytes())
    assert r.vendor == "nvidia" and [c.card for c in r.cards] == [f"gpu{i}" for i in range(4)]
    assert [c.numa_affinity for c in r.cards] == [0, 0, 1, 1]
    assert r.topology.relations["NIC3"]["NIC2"] == "PIX"
    assert r.topology.nics == {f"NIC{i}": f"mlx5_{i}" for i in range(4)}
    assert r.warnings == ()


@pytest.mark.parametrize(("kept", "text"), cuts(TOPO), ids=lambda v: str(v)[:12])
def test_every_cut_says_it_is_cut_off(kept: int, text: bytes) -> None:
    r = parse_bytes(text)
    assert any(CUT in w for w in r.warnings), (kept, r.warnings)
    whole = parse_bytes(TOPO.read_bytes()).topology
    for row, cells in r.topology.relations.items():  # what was read is what the output says
        assert all(v is None or v == whole.relations[row][k] for k, v in cells.items())


def test_a_cut_between_nic_rows_names_the_missing_rows() -> None:
    lines = TOPO.read_bytes().splitlines(keepends=True)
    r = parse_bytes(b"".join(lines[:7]))  # header, 4 GPU rows, NIC0 and NIC1
    assert r.warnings == (
        "smi topo -m output: no row for NIC2 (cut off?)",
        "smi topo -m output: no row for NIC3 (cut off?)",
        "smi topo -m output: it ends in the matrix, before its Legend (cut off?)",
    )


def test_a_cut_in_the_nic_legend_names_the_unnamed_nics() -> None:
    lines = TOPO.read_bytes().splitlines(keepends=True)
    r = parse_bytes(b"".join(lines[:-2]))  # NIC2 and NIC3 lines lost
    assert r.warnings == (
        "smi topo -m output: no NIC Legend entry for NIC2, NIC3 (cut off?); which RDMA device "
        "each is, is unknown",
    )
    assert r.topology.nics == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}


def test_the_cli_passes_the_warning_on(run_cli, tmp_path: Path) -> None:
    lines = TOPO.read_bytes().splitlines(keepends=True)
    cut = tmp_path / "topo.txt"
    cut.write_bytes(b"".join(lines[:8]))
    code, out, err = run_cli("smi", "--input", str(cut), "--format", "json")
    assert (code, err) == (0, "")
    assert "smi topo -m output: no row for NIC3 (cut off?)" in json.loads(out)["warnings"]


def test_the_table_shows_the_bus_id_not_an_emoji(run_cli, monkeypatch) -> None:
    shown = io.StringIO()
    Console(file=shown, emoji=True).print("0000:ab:00.0")
    assert Emoji.replace(":ab:") in shown.getvalue()  # the input does show the bug
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli("smi", "--input", str(TABLE))
    assert (code, err) == (0, "")
    assert "0000:ab:00.0" in out and Emoji.replace(":ab:") not in out
    row = next(line for line in out.splitlines() if "gpu5" in line)
    assert "0000:ab:00.0" in row and "NVIDIA H100 80GB HBM3" in row
