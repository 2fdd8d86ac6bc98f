"""Start-up: a command imports its own module and nothing of typer, click or pydantic; the
parsed profiles are kept per user."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from xputune.cli import registry

EX = ("--example", "h3c-hygon-p800")


@pytest.mark.parametrize(
    ("argv", "own"),
    [
        (["probe", *EX, "-f", "json"], "probe_run"),
        (["plan", *EX, "--model", "glm-5", "--tp", "8", "-f", "json"], "plan_run"),
        (["check", *EX, "-f", "json"], "check_run"),
        (["launch", "sglang", "-n", *EX, "--", "--model-path", "zai-org/GLM-5"], "launch_run"),
    ],
)
def test_a_command_imports_only_its_module_and_no_cli_library(argv: list[str], own: str) -> None:
    from xputune.tune import profiles

    profiles.load_all()  # parsed profiles are kept (in the tests' cache): no YAML parser
    code = (
        "import json, sys\n"
        "from xputune.cli.entry import main\n"
        f"rc = main({argv!r})\n"
        "sys.stdout.flush()\n"
        "print('\\nMODULES ' + json.dumps([rc, sorted(sys.modules)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    rc, modules = json.loads(done.stdout.rsplit("\nMODULES ", 1)[1])
    assert rc in (0, 1), done.stderr  # check, and a launch -n that would refuse, exit 1 on drift
    owners = {spec.partition(":")[0] for spec in registry.COMMANDS.values()}
    assert {m for m in modules if m in owners} == {f"xputune.cli.{own}"}
    heavy = ("typer", "click", "pydantic", "yaml", "rich")
    assert not [m for m in modules if m.split(".")[0] in heavy[:4]]
    if "-f" in argv or "-n" in argv:  # JSON or a command line: nothing to lay out
        assert not [m for m in modules if m.split(".")[0] == "rich"]


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
