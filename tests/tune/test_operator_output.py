"""What an operator reads from apply, rollback, watch and status at 80 columns, on a copy of
the seed box: places whole on a line (they are typed back), no Python reprs, and --quiet
leaving the one line that says what happened."""

from __future__ import annotations

import re

import pytest

PLACES = (
    "/sys/kernel/mm/transparent_hugepage/shmem_enabled",
    "/proc/sys/kernel/numa_balancing",
    "0000:e0:03.1 root port (xpu6, xpu7)",
    "0000:22:01.0 switch downstream (xpu1)",
)


@pytest.fixture(autouse=True)
def _eighty(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def test_rollback_dry_run_keeps_every_place_on_one_line(run_cli, seedbox: str) -> None:
    assert run_cli("apply", "--profile", "hygon-p800", "--root", seedbox, "-q")[0] == 0
    code, out, _ = run_cli("rollback", "--dry-run", "--root", seedbox)
    assert code == 1
    lines = out.splitlines()
    for place in PLACES:
        assert any(place in line for line in lines), (place, out)
    assert "now on, original off" in out and "now off, original on" in out


def test_rollback_dry_run_is_a_table_where_it_fits(run_cli, seedbox: str, monkeypatch) -> None:
    run_cli("apply", "--profile", "hygon-p800", "--root", seedbox, "-q")
    monkeypatch.setenv("COLUMNS", "140")
    code, out, _ = run_cli("rollback", "--dry-run", "--root", seedbox)
    assert code == 1 and "┃ knob" in out
    for place in PLACES:
        assert any(place in line for line in out.splitlines()), place


def test_quiet_apply_and_rollback_say_one_line(run_cli, seedbox: str) -> None:
    code, out, err = run_cli("apply", "--profile", "hygon-p800", "--root", seedbox, "-q")
    assert code == 0 and err == ""
    assert out.count("\n") == 1 and out.startswith("applied and verified 27 change(s)"), out
    code, out, _ = run_cli("rollback", "--root", seedbox, "-q")
    assert code == 0 and out == "rolled back 27 change(s) from 1 apply(s)\n", out


def test_a_quiet_dry_run_still_shows_its_changes(run_cli, seedbox: str) -> None:
    code, out, _ = run_cli("apply", "--profile", "hygon-p800", "--root", seedbox, "-q", "--dry-run")
    assert code == 1 and "+/proc/sys/kernel/numa_balancing: off" in out
    assert "profile hygon-p800 (" not in out.splitlines()[0]  # the context line is dropped


def test_status_says_what_the_watch_did_in_words(run_cli, seedbox: str) -> None:
    assert run_cli("watch", "--once", "--root", seedbox)[0] == 1  # no journal: reports only
    code, out, _ = run_cli("status", "--root", seedbox)
    assert code == 1
    watch = " ".join(out.split("watch: ", 1)[1].split("\ndrift:")[0].split())
    assert re.fullmatch(
        r"not running; last pass \S+Z \(1 pass\(es\), 0 with errors\), holding hygon-p800 "
        r"\(none: reports only\)",
        watch,
    ), watch
    assert not re.search(r"\b(None|False|True)\b", out), out
    run_cli("apply", "--profile", "hygon-p800", "--root", seedbox, "-q")
    run_cli("watch", "--once", "--root", seedbox)
    out = run_cli("status", "--root", seedbox)[1]
    assert "(2 pass(es), 0 with errors), holding hygon-p800 (the last apply's)" in " ".join(
        out.split()
    ), out


def test_check_puts_each_fix_command_alone_within_80_columns(run_cli, seedbox: str) -> None:
    code, out, _ = run_cli("check", "--profile", "hygon-p800", "--root", seedbox)
    assert code == 1
    lines = out.splitlines()
    assert max(len(ln) for ln in lines if seedbox not in ln) <= 80
    fixes = lines[lines.index("how to fix:") + 1 : -3]
    places, commands = fixes[0::2], fixes[1::2]
    assert len(places) == len(commands) == 27
    assert "  0000:e0:03.1 root port (xpu6, xpu7):" in places
    ido = [c for c in commands if c.startswith("    setpci -s ")]
    assert len(ido) == 24 and all(c.endswith(" CAP_EXP+28.w=0300:0300") for c in ido)
    assert "    sysctl -w kernel.numa_balancing=0" in commands
    assert lines[-3:] == [
        "27 of 29 settings drift; fix them all with:",
        "  xputune apply --profile hygon-p800 --root \\",  # a path too long to stay beside it
        f"    {seedbox}",
    ]


def test_check_drift_is_a_line_a_setting_that_does_not_hold(run_cli, seedbox: str) -> None:
    whole = run_cli("check", "--profile", "hygon-p800", "--root", seedbox, "-f", "json")
    code, out, _ = run_cli("check", "--profile", "hygon-p800", "--root", seedbox, "--drift")
    assert code == whole[0] == 1
    lines = out.splitlines()
    assert max(len(ln) for ln in lines if seedbox not in ln) <= 80
    drifting = [ln for ln in lines if ln.startswith("  ") and ": " in ln and "xputune" not in ln]
    assert len(drifting) == 27  # 29 settings, 2 hold: those are not listed
    assert "  numa.balancing  /proc/sys/kernel/numa_balancing: on, expected off" in lines
    assert "critical (26):" in lines and "warn (1):" in lines
    assert "thp.enabled" not in out and "how to fix" not in out
    json_too = run_cli(
        "check", "--profile", "hygon-p800", "--root", seedbox, "--drift", "-f", "json"
    )
    assert json_too == whole  # --drift shapes the table only
    run_cli("apply", "--profile", "hygon-p800", "--root", seedbox, "-q")
    code, out, _ = run_cli("check", "--profile", "hygon-p800", "--root", seedbox, "--drift")
    assert code == 0 and out.splitlines()[1:] == ["all 29 settings hold"]
