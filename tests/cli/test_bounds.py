"""Every command argument is bounded: empty paths and names are refused, numbers
have a range that nan, inf, 1e300 and 5000 digits fall outside, watch's times are bounded.

Every call here is refused while its arguments are parsed, before the command runs; they run
in the fuzz's cage anyway (cage.py), so a bound that went missing fails a test and changes
nothing on this machine.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tests.cli import arg_fuzz
from tests.cli.cage import Cage
from xputune.cli import registry
from xputune.errors import HostError, XputuneError

COMMANDS = arg_fuzz.commands()
#: The metavars of options (and arguments) that take a path or a name.
PATH_OR_NAME = {
    "PATH", "NAME", "FILE", "DIR", "MODEL", "OUT", "FILES...", "KNOB", "HOST:PORT", "ADDR", "URL",
}  # fmt: skip
NUMBER_NOISE = ["nan", "NaN", "inf", "-inf", "1e300", "-1e300", "9" * 5000, "-" + "9" * 30]


def _params(kind: Any) -> list[tuple[tuple[str, ...], Any]]:
    return [(w, p) for w, ps in COMMANDS for p in ps if arg_fuzz._kind(p) is kind]


def _id(item: tuple[tuple[str, ...], Any]) -> str:
    words, param = item
    return f"{' '.join(words)} {param.opts[0]}"


NUMBERS = _params(int) + _params(float)
TEXTS = _params(str)


def _refused(tmp_path: Path, argv: list[str]) -> str:
    """The one error line of a call that must be refused before it does anything."""
    with Cage(tmp_path) as cage:
        outcome = arg_fuzz.run(cage, argv)
    assert outcome.problem() is None, outcome.problem()
    assert outcome.code == 2 and outcome.out == "", (argv, outcome.err)
    lines = outcome.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("xputune: error: "), outcome.err
    assert len(lines[0]) < 300  # a 5000-digit value is not echoed back
    return lines[0]


def test_every_number_option_has_a_range() -> None:
    assert len(NUMBERS) > 30
    unbounded = [_id(n) for n in NUMBERS if n[1].min is None or n[1].max is None]
    assert unbounded == []
    assert all(math.isfinite(p.min) and math.isfinite(p.max) for _, p in NUMBERS)


@pytest.mark.parametrize("item", NUMBERS, ids=[_id(n) for n in NUMBERS])
def test_numbers_out_of_range_are_one_usage_line(item, tmp_path: Path) -> None:
    words, param = item
    name = param.opts[0]
    for value in [*NUMBER_NOISE, str(param.min - 1), repr(param.max * 10 + 1)]:
        line = _refused(tmp_path, [*words, name, value])
        assert f"invalid value for '{name}'" in line
        if arg_fuzz._kind(param) is float or value.lstrip("-").isdigit():
            assert "must be from " in line, line  # the whole range, whatever the value


def _declared(words: tuple[str, ...], param: Any) -> Any:
    """The table's entry (cli/spec.Opt or Arg) behind one of the fuzz's parameters."""
    cmd = registry.load(words)
    for item in (*cmd.all_options, *cmd.args):
        if item.dest == param.name:
            return item
    raise AssertionError(f"{words} {param.name} is in the fuzz's view but not in the table")


def test_a_path_or_name_option_is_exactly_one_that_refuses_empty() -> None:
    for words, param in TEXTS:
        checked = _declared(words, param).kind in ("path", "name")
        assert checked == (param.metavar in PATH_OR_NAME), _id((words, param))
    assert len([t for t in TEXTS if t[1].metavar in PATH_OR_NAME]) > 50


@pytest.mark.parametrize(
    "item",
    [t for t in TEXTS if t[1].metavar in PATH_OR_NAME],
    ids=[_id(t) for t in TEXTS if t[1].metavar in PATH_OR_NAME],
)
def test_an_empty_path_or_name_is_one_usage_line(item, tmp_path: Path) -> None:
    words, param = item
    name = param.opts[0]
    option = name.startswith("-")
    argv = [*words, name, ""] if option else [*words, ""]
    line = _refused(tmp_path, argv)
    shown = name if option else param.metavar.rstrip(".")
    assert line.startswith(f"xputune: error: {shown}: empty value"), line


@pytest.mark.parametrize(
    "argv",
    [
        ["apply", "--dry-run", "--root", ""],  # planned changes to the live host before
        ["apply", "--example", ""],
        ["rollback", "--root="],
        ["watch", "--once", "--root", ""],
        ["probe", "--root", "", "--example", "h3c-hygon-p800"],
    ],
)
def test_an_empty_root_never_means_the_live_host(argv: list[str], tmp_path: Path) -> None:
    assert "empty value" in _refused(tmp_path, argv)


def test_open_host_refuses_empty_names_too() -> None:
    from xputune.host import open_host

    for root, example in (("", None), (None, ""), ("", "")):
        with pytest.raises(HostError, match="empty value"):
            open_host(root, example)
    assert open_host().label == "this host"


def test_watch_times_are_bounded_in_the_library_as_on_the_command_line() -> None:
    from xputune.fleet import watch

    cli = {p.opts[0]: p for w, ps in COMMANDS if w == ("watch",) for p in ps}
    assert (cli["--interval"].min, cli["--interval"].max) == (
        watch.MIN_INTERVAL,
        watch.MAX_INTERVAL,
    )
    for name in ("--window", "--backoff", "--backoff-max"):
        assert cli[name].max == watch.MAX_PERIOD
    assert cli["--max-reapplies"].max == watch.MAX_REAPPLIES
    for bad in (math.nan, math.inf, 1e300, 0.0, -1.0, watch.MAX_INTERVAL * 2):
        with pytest.raises(XputuneError, match="--interval"):
            watch.WatchConfig(interval=bad)
    for field in ("window", "backoff", "backoff_max"):
        for bad in (math.nan, math.inf, 1e300, 0.0):
            with pytest.raises(XputuneError, match="--window"):
                watch.Limits(**{field: bad})
    with pytest.raises(XputuneError, match="--max-reapplies"):
        watch.Limits(reapplies=10**6)
    watch.WatchConfig(interval=watch.MAX_INTERVAL, limits=watch.Limits(1, 1, 1, watch.MAX_PERIOD))


def test_a_huge_interval_never_reaches_the_second_pass(tmp_path: Path) -> None:
    """The crash it pins: the first pass changed the tree, then select() overflowed."""
    from tests.tune import minihost

    mini = minihost.build(str(tmp_path / "host"))
    before = Path(mini, "sys/kernel/mm/transparent_hugepage/enabled").read_text()
    for value in ("1e300", "inf", "nan"):
        line = _refused(tmp_path, ["watch", "--root", mini, "--interval", value])
        assert "'--interval': must be from 0.01 to 86400" in line
    assert Path(mini, "sys/kernel/mm/transparent_hugepage/enabled").read_text() == before
