"""--verbose keeps its help's promise: what the command consulted (host paths, files, tools),
the tools' and the whole command's time, and warning lists not cut short; stdout unchanged."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from xputune import trail
from xputune.cli import output
from xputune.devices.xpusmi.values import MAX_WARNINGS, Notes


@pytest.fixture(autouse=True)
def _quiet_afterwards():
    yield
    output.set_verbosity()  # the next test starts with recording off, as a fresh process does


def test_probe_says_what_it_read_and_how_long_it_took(run_cli) -> None:
    plain = run_cli("probe", "--example", "h3c-hygon-p800", "-f", "json")
    told = run_cli("probe", "--example", "h3c-hygon-p800", "-f", "json", "--verbose")
    assert plain[0] == told[0] == 0
    assert json.loads(told[1]) == json.loads(plain[1])  # the result does not change
    assert "consulted" not in plain[2] and "took" not in plain[2]
    lines = told[2].splitlines()
    (head,) = [ln for ln in lines if "paths consulted" in ln]
    assert re.fullmatch(r"xputune: host view .*h3c-hygon-p800\.tar\.xz: \d+ paths consulted", head)
    pci = next(ln for ln in lines if ln.strip().startswith("xputune:   /sys/bus/pci/"))
    assert int(re.search(r"\((\d+) paths\)", pci)[1]) > 100  # 8 cards, switches, NICs
    assert "xputune:   /proc/cpuinfo" in lines
    assert re.fullmatch(r"xputune: took \d+ ms in all", lines[-1])


def test_a_named_file_is_listed_once(run_cli, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    lines = (json.dumps({"page_size": 64, "hashes": [1, 2, i]}) for i in range(20))
    trace.write_text("\n".join(lines) + "\n")
    code, _, err = run_cli("tiers", "--trace", str(trace), "--capacity", "8", "-v")
    assert code == 0, err
    named = [ln for ln in err.splitlines() if str(trace) in ln]
    assert len(named) == 1 and named[0].startswith("xputune: file (trace")


def test_the_account_comes_before_an_error_line(run_cli, tmp_path: Path) -> None:
    code, _, err = run_cli("tiers", "--trace", str(tmp_path / "missing.jsonl"), "-v")
    assert code == 2
    lines = err.splitlines()
    assert lines[-1].startswith("xputune: error: ") and "missing.jsonl" in lines[-1]
    assert any(ln.startswith("xputune: took ") for ln in lines[:-1])


def test_quiet_and_verbose_together_is_one_error(run_cli) -> None:
    code, out, err = run_cli("probe", "--example", "h3c-hygon-p800", "-q", "-v")
    assert code == 2 and out == ""
    assert err == "xputune: error: give --quiet or --verbose, not both\n"


def test_a_tool_run_is_listed_with_its_status_and_time() -> None:
    trail.start()
    trail.run([sys.executable, "-c", "raise SystemExit(3)"], check=False)
    with pytest.raises(FileNotFoundError):
        trail.run(["/nonexistent/xpu-smi", "-q"], check=False)
    ran = [ln for ln in trail.report() if ln.startswith("ran ")]
    assert re.fullmatch(r"ran .* -c raise SystemExit\(3\): \d+ ms, exit 3", ran[0])
    assert ran[1].startswith("ran /nonexistent/xpu-smi -q: ") and "could not start" in ran[1]


def test_nothing_is_kept_without_verbose(run_cli) -> None:
    run_cli("probe", "--example", "h3c-hygon-p800", "-f", "json", "-v")
    assert run_cli("probe", "--example", "h3c-hygon-p800", "-f", "json")[2] == ""  # in-process
    before = (len(trail._tools), len(trail._files))
    trail.run([sys.executable, "-c", "pass"], check=False)
    trail.user_file("trace", "x.jsonl")
    assert trail.report() == [] and (len(trail._tools), len(trail._files)) == before


def test_a_vendor_outputs_warnings_are_all_kept_under_verbose() -> None:
    cut, whole = Notes(), Notes()
    for i in range(MAX_WARNINGS + 7):
        cut.add(f"w{i}")
    assert cut.done()[-1] == "... and 7 more warnings"
    trail.start()
    for i in range(MAX_WARNINGS + 7):
        whole.add(f"w{i}")
    assert whole.done() == tuple(f"w{i}" for i in range(MAX_WARNINGS + 7))
