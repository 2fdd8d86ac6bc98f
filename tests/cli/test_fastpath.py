"""The typer-free fast path (cli/fastpath.py): its tables are typer's, it hands the runners what
typer hands them, it declines whatever it is unsure of, and it prints the same bytes."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, get_origin
from unittest import mock

import pytest
import typer
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xputune.cli import app as cli_app
from xputune.cli import check_run, fastpath, launch_run, plan_run, probe_run
from xputune.cli.entry import _run_app, main
from xputune.errors import XputuneError

EX = ("--example", "h3c-hygon-p800")
SPECS = {
    "probe": probe_run.SPEC,
    "check": check_run.SPEC,
    "plan": plan_run.SPEC,
    "launch": launch_run.SPEC,
}
# The module whose typer command calls each runner, by the runner's name.
CALLERS = {
    "probe": "xputune.cli.probe_cmds",
    "check": "xputune.cli.tune_cmds",
    "plan": "xputune.cli.plan_host_cmds",
    "launch": "xputune.cli.launch_cmds",
}


def _command(words: tuple[str, ...]) -> Any:
    cmd = typer.main.get_command(cli_app.build(words[0]))
    for word in words:
        cmd = cmd.commands[word]
    return cmd


def _typer_rows(cmd: Any) -> list[tuple[Any, ...]]:
    """Each parameter as the fast path must know it, read from typer's click command."""
    rows = []
    for p in cmd.params:
        info = p.type_descriptor.parameter_info
        ann = p.type_descriptor.annotation
        kind = ann.__args__[0] if get_origin(ann) is list else ann
        rows.append(
            (
                type(p).__name__, p.name, tuple(p.opts), tuple(p.secondary_opts), kind,
                p.default, p.multiple, p.min, p.max, p.is_flag, p.count, p.nargs, p.envvar,
                getattr(p.callback, "__wrapped__", p.callback), p.is_eager, p.required,
                info.parser, info.case_sensitive, info.clamp, info.exists, info.resolve_path,
                info.path_type,
            )
        )  # fmt: skip
    return rows


def _fast_rows(spec: fastpath.Spec) -> list[tuple[Any, ...]]:
    return [
        (
            "TyperOption", o.dest, o.names, (), o.kind, o.default, o.multiple, o.min, o.max,
            o.kind is bool, False, 1, None, o.check, False, False, None, True, False, False, False,
            None,
        )
        for o in spec.options
    ]  # fmt: skip


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_table_is_what_typer_registers(name: str) -> None:
    spec = SPECS[name]
    cmd = _command(spec.words)
    assert _fast_rows(spec) == _typer_rows(cmd)
    passes_through = {"allow_extra_args": True, "ignore_unknown_options": True}
    assert cmd.context_settings == (passes_through if spec.passthrough else {})
    runner = getattr(sys.modules[fastpath.RUNNERS[name]], spec.runner)
    wanted = [o.dest for o in spec.options] + ([spec.passthrough] if spec.passthrough else [])
    assert sorted(inspect.signature(runner).parameters) == sorted(wanted)


def _typer_call(name: str, argv: list[str]) -> tuple[int, dict[str, Any] | None]:
    """(exit code, the runner's arguments) when typer runs argv with the runner recorded."""
    spec = SPECS[name]
    module = sys.modules[CALLERS[name]]
    real = getattr(sys.modules[fastpath.RUNNERS[name]], spec.runner)
    calls: list[dict[str, Any]] = []

    def record(*args: Any, **kwargs: Any) -> int:
        bound = inspect.signature(real).bind(*args, **kwargs)
        bound.apply_defaults()
        calls.append(dict(bound.arguments))
        return 0

    sink = io.StringIO()
    with (
        mock.patch.object(module, spec.runner, record),
        contextlib.redirect_stdout(sink),
        contextlib.redirect_stderr(sink),
    ):
        try:
            code = _run_app(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    assert len(calls) <= 1
    return code, (calls[0] if calls else None)


def _typed(values: dict[str, Any]) -> dict[str, tuple[type, Any]]:
    return {k: (type(v), v) for k, v in values.items()}


for _name in CALLERS:  # the typer modules, for _typer_call to patch
    cli_app._module(cli_app.COMMANDS[_name])

VALUES = [
    "glm-5", "8", "1", "0", "08", "-1", "+1", " 1", "1e3", "x", "", "json", "yaml", "table",
    "JSON", "pcie.ido", "shm.huge", "local", "shared", "a b", "h3c-hygon-p800", "./cfg//x", "=",
    "0.5", "1.", ".5", "nan", "inf", "1e400", "00.5",
]  # fmt: skip
NOISE = ["--", "-h", "--help", "--bogus", "-x", "extra", "-fjson", "-f=json", "--force=1"]


@st.composite
def argv_for(draw: st.DrawFn, name: str) -> list[str]:
    """Mostly well-formed calls of a command, some with a wrong value or a stray word."""
    spec = SPECS[name]
    args: list[str] = []
    opts = draw(st.lists(st.sampled_from(spec.options), unique=True, max_size=5))
    if opts and draw(st.integers(0, 4)) == 0:  # twice: fine where repeatable, else typer's
        opts.append(draw(st.sampled_from(opts)))
    for opt in opts:
        flag = draw(st.sampled_from(opt.names))
        if opt.kind is bool:
            args.append(flag)
            continue
        if opt.kind is int:
            good = ["8", "2"]
        elif opt.kind is float:
            good = ["8", "0.5", "4096"]
        elif opt.kind in (str, Path):
            good = ["glm-5", "cfg/x"]
        else:
            good = [m.value for m in opt.kind]  # an Enum: its values
        value = draw(st.sampled_from(VALUES if draw(st.integers(0, 3)) == 0 else good))
        if flag.startswith("--") and draw(st.booleans()):
            args.append(f"{flag}={value}")
        else:
            args += [flag, value]
    if draw(st.integers(0, 2)) == 0:
        odd = [f"{n}=x" for o in spec.options for n in o.names if n[1] != "-" or o.kind is bool]
        args.insert(draw(st.integers(0, len(args))), draw(st.sampled_from(NOISE + odd)))
    if spec.needs and draw(st.integers(0, 4)):
        args.insert(draw(st.integers(0, len(args))), "-n")
    if spec.passthrough and draw(st.booleans()):
        args += ["--", *draw(st.lists(st.sampled_from(["--tp", "8", "--help", "-n", "x"])))]
    return [*spec.words, *args]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(SPECS)))
def test_the_fast_path_hands_the_runner_what_typer_hands_it(data: st.DataObject, name: str) -> None:
    argv = data.draw(argv_for(name))
    try:
        fast = fastpath.parse(SPECS[name], argv[len(SPECS[name].words) :])
    except XputuneError as refused:  # a check refused a value ("" for a path): typer's too
        with pytest.raises(XputuneError) as exc:
            _typer_call(name, argv)
        assert str(exc.value) == str(refused), argv
        return
    if fast is None:
        return  # declined: typer runs it, as without the fast path
    code, called = _typer_call(name, argv)
    assert code == 0 and called is not None, argv
    assert _typed(fast) == _typed(called), argv


@pytest.mark.parametrize(
    "argv",
    [
        ["probe", *EX, "-f=json"],  # click reads "=json" as the value of -f
        ["probe", *EX, "--strict=yes"],
        ["check", *EX, "--format", "JSON"],
        ["check", *EX, "-f"],
        ["check", *EX, "extra"],
        ["check", *EX, "--help"],
        ["check", "-h"],
        ["check", *EX, "--example", "nvidia-hgx-h100"],
        ["check", "--profile", "--only", "pcie.ido"],
        ["check", *EX, "--", "-f", "json"],
        ["plan", *EX, "--tp", "0"],
        ["plan", *EX, "--tp", "+8"],
        ["plan", *EX, "--tp", " 8"],
        ["plan", *EX, "--tp=x"],
        ["plan", *EX, "--tp", "1025"],
        ["plan", "--root", "", "--bogus"],  # typer's: the unknown option is said first
        ["plan", *EX, "-m", "-x"],
        ["plan", *EX, "--modle", "glm-5"],
        ["plan", *EX, "--force", "--force"],
        ["launch", "sglang", *EX, "--", "--model-path", "zai-org/GLM-5"],  # no --dry-run
        ["launch", "sglang", "-n", *EX, "--model-path", "zai-org/GLM-5"],  # unknown: SGLang's?
        ["launch", "sglang", "-n", *EX, "zai-org/GLM-5"],
        ["launch", "-n", *EX],
        ["launch"],
    ],
)
def test_the_fast_path_declines_what_it_is_unsure_of(run_cli, argv: list[str]) -> None:
    assert fastpath.parse_argv(argv) is None
    with mock.patch.dict(os.environ, {"XPUTUNE_NO_FASTPATH": "1"}):
        slow = run_cli(*argv)
    assert run_cli(*argv) == slow


@pytest.mark.parametrize(
    "argv",
    [
        ["probe", *EX],
        ["check", *EX],
        ["check", *EX, "-f", "json"],
        ["check", *EX, "-p", "generic", "--only", "thp.enabled", "--only", "shm.huge"],
        ["check", *EX, "--skip", "pcie.ido", "--format=yaml"],
        ["check", *EX, "--profile", "no-such-profile"],
        ["check", "--root", "no/such/dir"],
        ["plan", *EX, "--model", "glm-5", "--tp", "8"],
        ["plan", *EX, "--model", "glm-5", "--tp", "8", "-f", "json"],
        ["plan", *EX, "-m", "deepseek-v3", "--tp=8", "-s", "shared", "--tier", "max"],
        ["plan", *EX, "--model", "glm-5", "--tp", "8", "--strategy", "all-nodes", "--force"],
        ["plan", *EX, "--model", "no-such-model", "--tp", "8"],
        ["plan", *EX, "--model", "glm-5", "--tp", "64"],
        ["launch", "sglang", "--dry-run", *EX, "--tp", "8", "--", "--model-path", "zai-org/GLM-5"],
        ["launch", "sglang", "-n", *EX, "--", "--model-path", "zai-org/GLM-5", "--tp", "8"],
        ["launch", "sglang", "-n", *EX, "--features", "none", "--", "--model-path", "x", "--help"],
        ["launch", "sglang", "-n", *EX, "--model", "glm-5", "--tp", "8"],
        ["launch", "sglang", "-n", *EX, "--tp", "8"],
    ],
)
def test_both_ways_in_print_the_same_bytes(run_cli, argv: list[str]) -> None:
    assert fastpath.parse_argv(argv) is not None, argv  # the fast path is taken
    fast = run_cli(*argv)
    with mock.patch.dict(os.environ, {"XPUTUNE_NO_FASTPATH": "1"}):
        slow = run_cli(*argv)
    assert fast == slow


def _both(argv: list[str]) -> tuple[tuple[int, str], tuple[int, str]]:
    """(exit code, stdout and stderr) of argv run on the fast path, and through typer."""
    results = []
    for env in ({}, {"XPUTUNE_NO_FASTPATH": "1"}):
        out, err = io.StringIO(), io.StringIO()
        with (
            mock.patch.dict(os.environ, env),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            code = main(argv)
        results.append((code, out.getvalue() + "\0" + err.getvalue()))
    return results[0], results[1]


@pytest.mark.parametrize(
    "argv",
    [
        ["probe", "--root", ""],
        ["probe", "--example="],
        ["probe", *EX, "--vendor-topo", ""],
        ["check", "--root", "", "-f", "json"],
        ["check", *EX, "--only", "pcie.ido", "--only", ""],
        ["check", "-p", "", "--root", ""],  # the first given is the one refused
        ["plan", *EX, "--config="],
        ["plan", "--model", "", *EX],
        ["launch", "sglang", "-n", "--root", "", "--", "--model-path", "x"],
        ["launch", "sglang", "-n", *EX, "--stats-dir", ""],
    ],
)
def test_an_empty_path_or_name_is_one_line_both_ways(argv: list[str]) -> None:
    """An unset variable never means "the live host": refused before anything is read."""
    with pytest.raises(XputuneError):
        fastpath.parse_argv(argv)
    fast, slow = _both(argv)
    assert fast == slow
    code, text = fast
    assert code == 2 and text.startswith("\0xputune: error: ") and text.count("\n") == 1
    assert "empty value" in text


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    name=st.sampled_from(["check", "plan", "launch"]),
    fmt=st.sampled_from([[], ["-f", "json"], ["--format=yaml"]]),
)
def test_both_ways_in_print_the_same_bytes_for_drawn_calls(
    data: st.DataObject, name: str, fmt: list[str]
) -> None:
    picks = {
        "check": [("-p", "hygon-p800"), ("--only", "pcie.ido"), ("--skip", "thp.enabled")],
        "plan": [("-m", "glm-5"), ("--tp", "4"), ("-s", "shared"), ("--tier", "2"), ("--force",)],
        "launch": [("-m", "glm-5"), ("--tp", "8"), ("--features", "lifo"), ("--stats-dir", "s")],
    }[name]
    chosen = data.draw(st.lists(st.sampled_from(picks), unique=True, max_size=3))
    words = list(SPECS[name].words) + (["-n"] if name == "launch" else [])
    argv = [*words, *EX, *(w for pair in chosen for w in pair), *(fmt if name != "launch" else [])]
    assert fastpath.parse_argv(argv) is not None, argv
    fast, slow = _both(argv)
    assert fast == slow, argv


def test_plain_check_plan_and_launch_dry_run_do_not_import_typer() -> None:
    calls = [
        ["check", *EX],
        ["plan", *EX, "--model", "glm-5", "--tp", "8"],
        ["launch", "sglang", "--dry-run", *EX, "--tp", "8", "--", "--model-path", "zai-org/GLM-5"],
    ]
    code = (
        "import json, sys\n"
        "from xputune.cli.entry import main\n"
        "found = []\n"
        f"for argv in {calls!r}:\n"
        "    rc = main(argv)\n"
        "    found.append([rc, sorted(m for m in sys.modules if m.split('.')[0] in "
        "('typer', 'click', 'pydantic') or m.endswith('_cmds'))])\n"
        "sys.stdout.flush()\n"
        "print('\\nMODULES ' + json.dumps(found))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XPUTUNE_NO_FASTPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
        env=env,
    )  # fmt: skip
    found = json.loads(done.stdout.rsplit("\nMODULES ", 1)[1])
    assert found == [[1, []], [0, []], [0, []]], done.stderr  # check: the example box drifts
