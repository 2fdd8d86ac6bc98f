"""Start-up (issue 14): a command loads only its own module, and plain values skip pydantic
without changing what any option accepts, returns or says about a bad value."""

from __future__ import annotations

import json
import subprocess
import sys
from enum import Enum
from typing import Any

import pytest
import typer
import typer.main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xputune.cli import app as cli_app
from xputune.cli.coerce import install

EX = ("--example", "h3c-hygon-p800")


def _registered(module: str) -> set[str]:
    """The top-level names a command module registers, read from typer's own records."""
    probe = typer.Typer()
    cli_app._module(module).register(probe)
    names = {
        info.name or typer.main.get_command_name(info.callback.__name__)
        for info in probe.registered_commands
    }
    return names | {info.name for info in probe.registered_groups}


def test_the_command_table_names_every_registration_and_nothing_else() -> None:
    actual = {name: module for module in cli_app.MODULES for name in _registered(module)}
    assert actual == cli_app.COMMANDS


def test_the_full_app_and_a_single_command_app_agree() -> None:
    full = typer.main.get_command(cli_app.build())
    assert set(full.commands) == set(cli_app.COMMANDS)
    for name in ("plan", "check", "launch"):  # alone, also when its module has more commands
        alone = typer.main.get_command(cli_app.build(name))
        assert list(alone.commands) == [name]
        assert _shape(alone.commands[name]) == _shape(full.commands[name])


def _shape(cmd: Any) -> tuple[Any, ...]:
    """What a command shows and accepts: help, options and sub-commands."""
    params = [(p.name, p.opts, p.secondary_opts, getattr(p, "help", None)) for p in cmd.params]
    subs = {name: _shape(sub) for name, sub in getattr(cmd, "commands", {}).items()}
    return cmd.help, params, subs


@pytest.mark.parametrize(
    ("argv", "own"),
    [
        (["plan", *EX, "--model", "glm-5", "--tp", "8", "-f", "json"], "plan_host_cmds"),
        (["check", *EX, "-f", "json"], "tune_cmds"),
        (["launch", "sglang", "-n", *EX, "--", "--model-path", "zai-org/GLM-5"], "launch_cmds"),
    ],
)
def test_a_command_imports_neither_other_commands_nor_pydantic(argv: list[str], own: str) -> None:
    """Through typer (the fast path, which imports no command module, is off here)."""
    import os

    from xputune.tune import profiles

    profiles.load_all()  # parsed profiles are kept (in the tests' cache): no YAML parser
    code = (
        "import json, sys\n"
        "from xputune.cli.entry import main\n"
        f"rc = main({argv!r})\n"
        "sys.stdout.flush()\n"
        "print('\\nMODULES ' + json.dumps([rc, sorted(sys.modules)]))\n"
    )
    env = {**os.environ, "XPUTUNE_NO_FASTPATH": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
        env=env,
    )  # fmt: skip
    rc, modules = json.loads(done.stdout.rsplit("\nMODULES ", 1)[1])
    assert rc in (0, 1), done.stderr  # check exits 1 on drift
    commands = {m.rsplit(".", 1)[1] for m in modules if m.startswith("xputune.cli.")}
    assert commands & set(cli_app.MODULES) == {own}
    assert not [m for m in modules if m.split(".")[0] in ("pydantic", "yaml")]


def _params() -> list[tuple[Any, Any, Any, Any]]:
    """(parameter, context, plain coercion, typer's) for every typed option of every command."""
    from typer._coercion import build_runtime_param

    found = []

    def walk(cmd: Any) -> None:
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)
        ctx = typer.Context(cmd)
        for p in cmd.params:
            if hasattr(p, "type_descriptor"):
                plain = p.get_runtime_param()
                found.append((p, ctx, plain, build_runtime_param(p.type_descriptor)))

    walk(typer.main.get_command(cli_app.build()))
    return found


install()
PARAMS = _params()
ANNOTATIONS = {p.type_descriptor.annotation for p, *_ in PARAMS}
ENUM_WORDS = sorted(
    {
        word
        for ann in ANNOTATIONS | {a for ann in ANNOTATIONS for a in getattr(ann, "__args__", ())}
        if isinstance(ann, type) and issubclass(ann, Enum)
        for m in ann
        for word in (str(m.value), str(m.value).upper())
    }
)
WORDS = st.one_of(
    st.text(alphabet="0123456789.-+e _xyzTJ/~", max_size=6),
    st.sampled_from(["0", "1", "-1", "08", "1e3", "0.5", "1.", ".5", "inf", "nan", "", " 1"]),
    st.sampled_from(ENUM_WORDS),
)


def _outcome(runtime: Any, value: Any, param: Any, ctx: Any) -> tuple[Any, ...]:
    try:
        result = runtime.coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # the error a user sees must be the same one
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return ("error", type(exc), message)
    return ("value", type(result), repr(result))  # repr: nan equals nan


def test_every_option_gets_the_plain_coercion() -> None:
    assert {type(plain).__name__ for _, _, plain, _ in PARAMS} == {"PlainRuntimeParam"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(word=WORDS, words=st.lists(WORDS, max_size=3))
def test_plain_values_convert_exactly_as_typer_converts_them(word: str, words: list[str]) -> None:
    for param, ctx, plain, real in PARAMS:
        value = tuple(words) if param.multiple or param.nargs == -1 else word
        assert _outcome(plain, value, param, ctx) == _outcome(real, value, param, ctx), param.name


def test_profiles_parse_the_same_through_libyaml(monkeypatch) -> None:
    import os

    import yaml

    from xputune.tune import profiles

    monkeypatch.setenv("XPUTUNE_CACHE", "off")  # parse each one now

    folder = profiles.builtin_dir()
    for name in profiles.profile_names():
        with open(os.path.join(folder, f"{name}.yaml"), encoding="utf-8") as fh:
            text = fh.read()
        assert profiles._read(os.path.join(folder, f"{name}.yaml")) == yaml.safe_load(text)


@pytest.mark.parametrize("text", ["knobs: [1, 2\n", "knobs:\n  a: 1\n b: 2\n", "a: b: c\n"])
def test_a_broken_profile_is_worded_by_the_pure_python_parser(tmp_path, text: str) -> None:
    import yaml

    from xputune.tune import profiles
    from xputune.tune.errors import ProfileError

    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.safe_load(text)
    with pytest.raises(ProfileError) as got:
        profiles.load(str(path))
    assert str(got.value) == (
        f"{path}: line {pure.value.problem_mark.line + 1} not valid YAML ({pure.value.problem})"
    )


def test_a_parsed_profile_is_kept_until_its_file_changes(tmp_path, monkeypatch) -> None:
    from xputune.tune import profiles

    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "site.yaml"
    path.write_text("description: first\nknobs: {thp.enabled: madvise}\n")
    first = profiles._read(str(path))
    with monkeypatch.context() as blocked:
        blocked.setitem(sys.modules, "yaml", None)  # importing yaml now fails: no parsing
        assert profiles._read(str(path)) == first
    path.write_text("description: second\n")
    assert profiles._read(str(path)) == {"description": "second"}


@pytest.mark.parametrize("setting", ["off", "unwritable"])
def test_profiles_read_without_a_cache(tmp_path, monkeypatch, setting: str) -> None:
    from xputune.tune import profiles

    cache = tmp_path / "cache"
    if setting == "off":
        monkeypatch.setenv("XPUTUNE_CACHE", "off")
    else:
        cache.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(cache))
    path = tmp_path / "site.yaml"
    path.write_text("description: kept nowhere\n")
    for _ in range(2):
        assert profiles._read(str(path)) == {"description": "kept nowhere"}
    assert cache.is_file() if setting == "unwritable" else not cache.exists()
