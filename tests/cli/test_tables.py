"""Each option declared once: the command tables (cli/spec.py) are what the parser runs, what
--help and the man pages show and what completion offers; and the tables match their runners
exactly."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xputune.cli import environment, exits, helptext, registry
from xputune.cli.parse import UsageError, parse
from xputune.cli.spec import Command, Opt
from xputune.errors import XputuneError

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = [registry.load(words) for words in registry.COMMANDS]
IDS = [" ".join(c.words) for c in COMMANDS]


def _runner(cmd: Command):
    import importlib

    module, _, name = cmd.runner.partition(":")
    return getattr(importlib.import_module(module), name)


def _reads(function) -> set[str]:
    """The options a function reads of its request: `req.NAME`, getattr(req, "NAME", ...)."""
    import ast
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "req":
                found.add(node.attr)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
            target, name = node.args[:2]
            if getattr(target, "id", None) == "req" and isinstance(name, ast.Constant):
                found.add(name.value)
    return found


@pytest.mark.parametrize("cmd", COMMANDS, ids=IDS)
def test_a_runner_takes_its_request_and_reads_every_option(cmd: Command) -> None:
    """One parameter, the parsed request (its options are listed once, in the table), and
    every option the table offers is read: an option that changes nothing is a broken
    promise of --help (as --verbose once was)."""
    from xputune.cli.launch_run import launch_request
    from xputune.cli.requests import plan_request

    runner = _runner(cmd)
    assert list(inspect.signature(runner).parameters) == ["req"]
    declared = {o.dest for o in cmd.options} | {a.dest for a in cmd.args}
    declared |= {cmd.passthrough} if cmd.passthrough else set()
    read = _reads(runner)
    source = inspect.getsource(runner)
    if "launch_request" in source:  # which hands the request on to plan_request
        read |= _reads(launch_request) | _reads(plan_request)
    elif "plan_request" in source:
        read |= _reads(plan_request)
    assert _reads(runner) <= declared, "reads an option its table does not declare"
    assert declared <= read, f"never read: {sorted(declared - read)}"
    assert runner.__doc__, "the runner's docstring is the command's help"


def test_the_registry_holds_every_command_once_and_its_words() -> None:
    assert [c.words for c in COMMANDS] == list(registry.COMMANDS)
    assert {w[0] for w in registry.COMMANDS if len(w) == 2} == set(registry.GROUPS)


def _text(opt: Opt) -> st.SearchStrategy[str]:
    if opt.kind == "int":
        return st.integers(int(opt.min), int(min(opt.max, 10**9))).map(str)
    if opt.kind == "float":
        return st.floats(opt.min, min(opt.max, 1e9), allow_nan=False).map(repr)
    if opt.kind == "choice":
        return st.sampled_from(opt.choices)
    alphabet = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
    return st.text(alphabet, min_size=1, max_size=12).filter(lambda t: not t.startswith("-"))


@st.composite
def _call(draw: st.DrawFn, cmd: Command) -> tuple[list[str], dict[str, object]]:
    """A command line for cmd and the values it must give."""
    argv: list[str] = []
    want: dict[str, object] = {}
    options = [o for o in cmd.all_options if o.dest not in ("quiet", "verbose")]
    chosen = draw(st.lists(st.sampled_from(options), unique=True, max_size=6)) if options else []
    chosen += [o for o in options if o.required and o not in chosen]
    for opt in chosen:
        name = draw(st.sampled_from(opt.names))
        if opt.kind == "flag":
            off = opt.negative and draw(st.booleans())
            argv.append(opt.negative if off else name)
            want[opt.dest] = not off
            continue
        values = [draw(_text(opt)) for _ in range(draw(st.integers(1, 3)) if opt.multiple else 1)]
        for value in values:
            if name.startswith("--") and draw(st.booleans()):
                argv.append(f"{name}={value}")
            elif len(name) == 2 and draw(st.booleans()):
                argv.append(name + value)
            else:
                argv += [name, value]
        kind = {"int": int, "float": float}.get(opt.kind)
        converted = [kind(v) if kind else (opt.cast(v) if opt.cast else v) for v in values]
        want[opt.dest] = converted if opt.multiple else converted[0]
    for arg in cmd.args:
        if arg.required or draw(st.booleans()):
            words = draw(st.lists(st.from_regex(r"[a-z][a-z0-9._/]{0,8}", fullmatch=True),
                                  min_size=1, max_size=3 if arg.multiple else 1))  # fmt: skip
            argv += words
            want[arg.dest] = words if arg.multiple else words[0]
    if cmd.passthrough:
        rest = draw(st.lists(st.sampled_from(["--tp", "8", "--model-path", "m", "-x"])))
        argv += ["--", *rest]
        want[cmd.passthrough] = rest
    return argv, want


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cmd=st.sampled_from(COMMANDS))
def test_whatever_the_spelling_the_parser_gives_the_values(data: st.DataObject, cmd) -> None:
    argv, want = data.draw(_call(cmd))
    got = parse(cmd, argv)
    for dest, value in want.items():
        assert got[dest] == value, (argv, dest)
    untouched = {o.dest for o in cmd.all_options} - set(want)
    for opt in cmd.all_options:
        if opt.dest in untouched:
            assert got[opt.dest] == ([] if opt.multiple else opt.default)


PLAN = registry.load(("plan",))
LAUNCH = registry.load(("launch", "sglang"))
REFUSED = [
    (PLAN, ["--strategi", "local"], "no such option: --strategi; did you mean --strategy?"),
    (PLAN, ["--tp"], "option '--tp' requires an argument"),
    (PLAN, ["--tp", "--model", "x"], "option '--tp' requires an argument"),
    (PLAN, ["--tp", "nan"], "invalid value for '--tp': 'nan' is not a whole number"),
    (PLAN, ["--tp", "9" * 5000], "invalid value for '--tp': must be from 1 to 1024"),
    (PLAN, ["--tp=0"], "invalid value for '--tp': must be from 1 to 1024"),
    (PLAN, ["--l3-pool-gb", "inf"], "invalid value for '--l3-pool-gb': must be from 0 to"),
    (PLAN, ["--l3-pool-gb", "1e400"], "invalid value for '--l3-pool-gb': must be from 0 to"),
    (PLAN, ["--l3-pool-gb", "many"], "'many' is not a number"),
    (PLAN, ["--root", ""], "--root: empty value (an unset variable?)"),
    (PLAN, ["--strategy", "all"], "'all' is not one of local, all-nodes, shared"),
    (PLAN, ["--force=yes"], "option '--force' does not take a value"),
    (PLAN, ["stray"], "unexpected extra argument (stray)"),
    (LAUNCH, ["--stratgy", "shared"], "SGLang's own flags go after `--`"),
    (LAUNCH, ["--model-path", "m"], "SGLang's own flags go after `--`"),
    (registry.load(("record",)), [], "missing argument 'OUT'"),
    (registry.load(("labels",)), [], "missing option '--nfd'"),
]


@pytest.mark.parametrize(("cmd", "argv", "says"), REFUSED, ids=[str(r[1]) for r in REFUSED])
def test_a_bad_line_is_one_usage_error_that_says_what(cmd: Command, argv, says: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse(cmd, argv)
    assert says in str(exc.value) and f"see '{cmd.path} --help'" in str(exc.value)
    assert exc.value.exit_code == exits.USAGE


@pytest.mark.parametrize("cmd", COMMANDS, ids=IDS)
def test_help_at_80_columns_cuts_no_name_and_no_example(cmd: Command, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    page = helptext.command_help(cmd)
    lines = page.splitlines()
    for opt in cmd.all_options:  # each spelling whole, on one line
        for name in (*opt.names, *((opt.negative,) if opt.negative else ())):
            assert any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", ln) for ln in lines)
        if opt.kind == "choice":
            assert any("|".join(opt.choices) in ln for ln in lines), opt.dest
    for line in lines:
        if len(line) > 80:  # only a word that cannot be broken may make a line longer
            assert " " not in line.strip(), line
    for code, meaning in exits.statuses(cmd.exits):
        assert str(code) in page and meaning.split()[0] in page


def test_examples_are_whole_commands_that_fit_80_columns() -> None:
    """A docstring's indented lines are printed as written: each fits (long ones are
    continued with ' \\'), so nothing an operator pastes is wrapped by the terminal."""
    for cmd in COMMANDS:
        doc = inspect.getdoc(_runner(cmd)) or ""
        for line in doc.splitlines():
            if line.startswith(" ") and line.strip():
                assert len(line) + helptext.INDENT <= 80, f"{cmd.path}: {line}"


@pytest.mark.parametrize("cmd", COMMANDS, ids=IDS)
def test_an_example_is_never_prose_and_pastes_as_one_command(cmd: Command) -> None:
    """Prose is rewrapped to the terminal, so a command in it would break across lines with
    no ` \\` and paste as two: every example is an indented block, each command in it one
    `xputune` line plus its continuation lines, which bash reads as one command."""
    import shutil
    import subprocess

    doc = inspect.getdoc(_runner(cmd)) or ""
    prose = [ln for ln in doc.splitlines() if ln.strip() and not ln.startswith(" ")]
    assert not [ln for ln in prose if re.search(r"Examples?:\s*\S", ln)], cmd.path
    commands: list[list[str]] = []
    for line in (ln for ln in doc.splitlines() if ln.startswith(" ") and ln.strip()):
        if commands and commands[-1][-1].endswith(" \\"):
            commands[-1].append(line.strip())
        else:
            commands.append([line.strip()])
    for lines in commands:
        if not lines[0].startswith("xputune "):
            continue  # an indented table or value list, not a command
        assert not lines[-1].endswith("\\"), lines
        if shutil.which("bash"):
            text = "\n".join(lines)
            done = subprocess.run(["bash", "-n", "-c", text], capture_output=True, text=True)
            assert done.returncode == 0, (text, done.stderr)


def test_every_variable_the_code_reads_is_documented_once() -> None:
    found = set()
    for path in (ROOT / "xputune").rglob("*.py"):
        found |= set(re.findall(r"(?<![_A-Z])XPUTUNE_[A-Z0-9_]+[A-Z0-9]", path.read_text()))
    found -= {"XPUTUNE_HICACHE"}  # the prefix itself (sglang/config.py)
    assert found == set(environment.VARIABLES)


def test_every_status_a_command_or_an_error_ends_with_is_in_the_table() -> None:
    assert all(set(c.exits) <= set(exits.MEANINGS) for c in COMMANDS)

    def subclasses(cls: type) -> list[type]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    import xputune.tune.errors  # noqa: F401 (its errors carry their own statuses)

    codes = {cls.exit_code for cls in subclasses(XputuneError)}
    assert codes <= set(exits.MEANINGS)


def test_probe_names_a_shipped_example_in_its_header(run_cli, monkeypatch) -> None:
    """Not its path inside the installed package, which an 80-column header cut mid-word."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli("probe", "--example", "h3c-hygon-p800")
    assert code == 0 and out.startswith("Host example h3c-hygon-p800: HygonGenuine ")
    assert "examples/" not in out.split("Relations", 1)[0]
