"""Every file a command reads from its arguments is bounded: a FIFO nobody writes
to, a device, a file far over the size of its kind, JSON that is not strict, numbers out of
range and CSV fields past any real one are each refused with one `xputune: error:` line (exit
2), before anything is printed, and nothing blocks. The hostile files are made here; the
sparse ones cost no disk. Peak memory on such files: tests/bench/bench_hostile_inputs.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SEED = ["--example", "h3c-hygon-p800"]


def _one_line(run_cli, *argv: str) -> str:
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and err.startswith("xputune: error: "), (code, out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err[len("xputune: error: ") : -1]


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as fh:
        fh.truncate(size)
    return path


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "input.json"
    os.mkfifo(path)  # nobody ever writes: a read would block forever
    return path


def _commands(path: str) -> dict[str, list[str]]:
    """(what the error calls the file, argv) of each command reading `path`."""
    return {
        "probe or check document": ["fleet", "report", path],
        "trace": ["tiers", "--trace", path],
        "measured table": ["tiers", "--measured", path],
        "points file": ["model", "--points", path, "--fit-b", "1"],
        "model config": ["plan", *SEED, "--config", path],
        "smi output": ["smi", "--input", path],
    }


@pytest.mark.timeout(60)
def test_a_fifo_is_refused_by_every_command_without_waiting(run_cli, fifo: Path) -> None:
    for what, argv in _commands(str(fifo)).items():
        assert _one_line(run_cli, *argv) == f"{what} is a FIFO, not a regular file: {fifo}"


def test_a_device_is_refused_by_every_command_before_reading(run_cli) -> None:
    for what, argv in _commands("/dev/zero").items():
        said = _one_line(run_cli, *argv)
        assert said == f"{what} is a character device, not a regular file: /dev/zero"


@pytest.mark.parametrize(
    ("what", "argv", "size", "cap"),
    [
        ("probe or check document", ["fleet", "report"], 4 << 20, "4 MiB"),
        ("measured table", ["tiers", "--measured"], 16 << 20, "16 MiB"),
        ("points file", ["model", "--fit-b", "1", "--points"], 16 << 20, "16 MiB"),
        ("model config", ["plan", *SEED, "--config"], 4 << 20, "4 MiB"),
        ("smi output", ["smi", "--input"], 64 << 20, "64 MiB"),
        ("profile", ["check", *SEED, "--profile"], 1 << 20, "1 MiB"),
    ],
)
def test_a_file_over_the_cap_of_its_kind_is_refused_unread(
    run_cli, tmp_path: Path, what: str, argv: list[str], size: int, cap: str
) -> None:
    big = _sparse(tmp_path / "big.yaml", size + 1)  # JSON is YAML too
    assert _one_line(run_cli, *argv, str(big)) == f"{what} too large: {big} (more than {cap})"
    fits = _sparse(tmp_path / "fits.yaml", size)  # at the cap: read, then refused as junk
    assert "too large" not in _one_line(run_cli, *argv, str(fits))


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"num_hidden_layers": float("nan")}, "NaN is not a number JSON allows"),
        ({"num_hidden_layers": 10**30, "kv_lora_rank": 512}, "must be a positive integer up to"),
        ({"num_hidden_layers": -3}, "must be a positive integer up to"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_a_config_out_of_range_is_one_line(run_cli, tmp_path: Path, config, says: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    assert says in _one_line(run_cli, "plan", *SEED, "--config", str(path))


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("capacity_tokens,hit_rate\n1000,nan\n", "line 2: hit_rate is not a finite number"),
        ("capacity_tokens,hit_rate\n1e300,0.5\n", "line 2: capacity is out of range"),
        ("capacity_gb,hit_rate\n-1,0.5\n", "line 2: capacity must be >= 0"),
        ("capacity_tokens,hit_rate,ttft_ms\n1,0.5,inf\n", "line 2: ttft_ms is not a finite"),
        ("capacity_tokens,hit_rate\n1,0.5\n2,\0\n", "line 3: hit_rate is not a number: '\\x00'"),
        ("capacity_tokens,hit_rate\n1,0.5\n2,'" + "9" * 200_000 + "\n", "field larger than"),
    ],
)
def test_a_measured_table_out_of_range_is_one_line(
    run_cli, tmp_path: Path, table: str, says: str
) -> None:
    path = tmp_path / "m.csv"
    path.write_text(table)
    said = _one_line(run_cli, "tiers", "--measured", str(path))
    assert said.startswith(f"{path}: line ") and says in said, said


@pytest.mark.parametrize(
    ("points", "says"),
    [
        ("tokens,ms\n1000,nan\n2000,5\n", "line 2: tokens and ms must be within 0..1e+15"),
        ("1000,5\n2000,-5\n", "line 2: tokens and ms must be within"),
        ("1000,5\ninf,7\n", "line 2: tokens and ms must be within"),
        ("1000,5\n2000,1e300\n", "line 2: tokens and ms must be within"),
    ],
)
def test_points_out_of_range_are_one_line(run_cli, tmp_path: Path, points: str, says: str) -> None:
    path = tmp_path / "p.csv"
    path.write_text(points)
    said = _one_line(run_cli, "model", "--points", str(path), "--recompute-us-per-token", "20")
    assert said.startswith(f"{path}: ") and says in said, said


def test_smi_reads_stdin_within_the_same_cap(run_cli, monkeypatch) -> None:
    import io
    import sys

    from xputune.devices.xpusmi.values import MAX_INPUT

    endless = io.BufferedReader(io.BytesIO(b"x" * (MAX_INPUT + 10)))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(endless))
    assert (
        _one_line(run_cli, "smi", "--input", "-")
        == "smi output too large: stdin (more than 64 MiB)"
    )


@pytest.mark.parametrize(
    ("name", "content"),
    [("deep.yaml", "[" * 50_000 + "]" * 50_000), ("deep.json", "[" * 100_000 + "]" * 100_000)],
)
def test_a_profile_nested_too_deeply_is_one_line(
    run_cli, tmp_path: Path, name: str, content: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    for argv in (["profiles", str(path)], ["check", *SEED, "--profile", str(path)]):
        assert _one_line(run_cli, *argv) == f"{path}: not a profile (nested too deeply)"


def test_smi_numbers_of_thousands_of_digits_read_as_absent(run_cli, tmp_path: Path) -> None:
    """A real default table with a 400-digit power and a 5000-digit memory size: no traceback
    (int() refuses 5000 digits), no infinity in the JSON; the cells read as absent."""
    real = Path(__file__).resolve().parents[1] / "devices" / "data" / "real"
    text = (real / "xpusmi-table-yunion-5.19.0.0.txt").read_text()
    text = text.replace("87W / 400W", "9" * 400 + "W / 400W", 1)
    text = text.replace("0MiB / 98304MiB", "0MiB / " + "9" * 5000 + "MiB", 1)
    saved = tmp_path / "table.txt"
    saved.write_text(text)
    code, out, err = run_cli("smi", "--input", str(saved), "-f", "json")
    assert code == 0 and "Traceback" not in err
    card = json.loads(out, parse_constant=lambda c: pytest.fail(c))["cards"][0]
    assert card["power_w"] is None and card["memory_total_mib"] is None


_LONG = "a" * 10_240  # past PATH_MAX (4,096): stat() fails with ENAMETOOLONG, not ENOENT


def _small_trace(tmp_path: Path) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n'
    )
    return str(path)


@pytest.mark.parametrize("command", ["model", "tiers", "plan"])
def test_a_model_name_too_long_for_a_path_is_one_line(
    run_cli, tmp_path: Path, command: str
) -> None:
    """--model is tried as a config.json path first; a name no file system takes is refused
    as such, in one line that does not echo its 10,240 characters (was OSError: File name
    too long)."""
    argv = {
        "model": ["model"],
        "tiers": ["tiers", "--trace", _small_trace(tmp_path), "--tp", "8"],
        "plan": ["plan", *SEED],
    }[command]
    said = _one_line(run_cli, *argv, "--model", _LONG)
    assert said == (
        "model config not readable: its path is too long (10,240 characters; it starts "
        f"{_LONG[:40]}...)"
    )


@pytest.mark.parametrize(
    ("what", "argv"),
    [("trace", ["tiers", "--trace"]), ("model config", ["plan", *SEED, "--config"])],
)
def test_any_file_name_too_long_is_one_line(run_cli, what: str, argv: list[str]) -> None:
    said = _one_line(run_cli, *argv, "/tmp/" + _LONG)
    assert said.startswith(f"{what} not readable: its path is too long (10,245 characters")


@pytest.mark.parametrize("plot", [False, True])
def test_a_generic_page_size_past_its_bound_is_one_line(
    run_cli, tmp_path: Path, plot: bool
) -> None:
    """A page of 2^62 tokens made the chart's capacities overflow int64 and go negative
    (was ValueError: capacities must be >= 0 tokens); the page size is bounded now."""
    trace = tmp_path / "g.jsonl"
    trace.write_text('{"hashes": [1, 2, 3], "page_size": 4611686018427387904}\n')
    argv = ["tiers", "--trace", str(trace)] + (["--plot", str(tmp_path / "c.svg")] if plot else [])
    said = _one_line(run_cli, *argv)
    assert said == (
        f"{trace}: line 1: page_size must be at most 2,147,483,648, got 4611686018427387904"
    )


@pytest.mark.parametrize(
    "line",
    [
        '{"timestamp": 0, "input_length": N, "output_length": 1, "hash_ids": [1]}',
        '{"hashes": [1], "page_size": 16, "input_length": N}',
    ],
)
@pytest.mark.parametrize("sampled", [False, True])
def test_an_input_length_of_4300_digits_is_one_line(
    run_cli, tmp_path: Path, line: str, sampled: bool
) -> None:
    """4,300 digits is the most int() and JSON take (longer is refused as not JSON): it parsed
    and then overflowed the float and int64 conversions (was OverflowError)."""
    trace = tmp_path / "t.jsonl"
    good = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'
    if "hashes" in line:
        good = '{"hashes": [1, 2], "page_size": 16}'
    trace.write_text(f"{good}\n" * 200 + line.replace("N", "9" * 4300) + "\n")  # the fast path
    argv = ["tiers", "--trace", str(trace)] + (["--sample-rate", "0.5"] if sampled else [])
    said = _one_line(run_cli, *argv)
    assert said == (
        f"{trace}: line 201: input_length must be at most 1,125,899,906,842,624, "
        "got an integer of thousands of digits"
    )


def test_a_plot_name_too_long_is_one_line(run_cli, tmp_path: Path) -> None:
    said = _one_line(run_cli, "tiers", "--trace", _small_trace(tmp_path), "--plot", _LONG + ".svg")
    assert said == (f"--plot: cannot write {_LONG[:40]}... (10,244 characters): File name too long")
