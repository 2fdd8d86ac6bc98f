"""Shell completion: the bash script xputune prints, run in a real bash, answers from the tables.

Every command's options, every option's values (choices, completers) and every group's
commands are asked for the way readline asks (COMP_WORDS, COMP_CWORD), and the answers are
compared with the command tables, so an option added to a table and missing from the script
fails here. zsh runs the same function through bashcompinit and fish gets its own lines; each
is syntax-checked by its shell where that shell is installed.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from xputune.cli import completion, completion_script, registry
from xputune.cli.entry import main

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

COMMANDS = [registry.load(words) for words in registry.COMMANDS]


@pytest.fixture(scope="module")
def script_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "xputune.bash"
    path.write_text(completion_script.script("bash"))
    return path


def _readline_words(typed: str) -> list[str]:
    """The words readline makes of a line: split at blanks, and "=" a word of its own."""
    words: list[str] = []
    for token in typed.split():
        name, eq, value = token.partition("=")
        words += [name, "=", value] if eq and token.startswith("--") else [token]
    words = [w for i, w in enumerate(words) if w or i == len(words) - 1]
    return words + ([""] if typed.endswith(" ") else [])


def ask_many(script: Path, asks: list[str]) -> list[list[str]]:
    """What TAB offers after each typed line (a trailing space: a new, empty word)."""
    body = [f"source {shlex.quote(str(script))}"]
    for typed in asks:
        words = _readline_words(typed)
        array = " ".join(shlex.quote(w) for w in words)
        cword = len(words) - 1
        body.append(
            f"COMP_WORDS=({array}); COMP_CWORD={cword}; COMPREPLY=(); "
            f"_xputune xputune {shlex.quote(words[-1])} {shlex.quote(words[-2])}; "
            'printf "%s " "${COMPREPLY[@]}"; echo "<end>"'
        )
    done = subprocess.run(
        ["bash", "--norc", "-c", "\n".join(body)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    answers = done.stdout.split("<end>\n")[:-1]
    assert len(answers) == len(asks), done.stdout
    return [answer.split() for answer in answers]


def test_commands_and_groups(script_file: Path) -> None:
    tops, launch, kernels = ask_many(
        script_file, ["xputune ", "xputune launch ", "xputune kernels s"]
    )
    assert set(tops) >= {w[0] for w in registry.COMMANDS} and "--show-completion" in tops
    assert launch == ["sglang", "l3-donors", "cluster"]
    assert kernels == ["selftest"]


def test_every_command_offers_exactly_its_options(script_file: Path) -> None:
    asks = [f"xputune {' '.join(cmd.words)} --" for cmd in COMMANDS]
    for cmd, offered in zip(COMMANDS, ask_many(script_file, asks), strict=True):
        names = {n for o in cmd.all_options for n in (*o.names, o.negative) if n}
        long = {n for n in names if n.startswith("--")}
        assert set(offered) == long | {"--help"}, cmd.words


def test_every_option_offers_its_values(script_file: Path) -> None:
    cases = []
    for cmd in COMMANDS:
        for opt in cmd.all_options:
            if opt.kind == "choice":
                cases.append((cmd, opt, list(opt.choices)))
            elif opt.complete:
                values = [v for v, _ in getattr(completion, opt.complete)("")]
                cases.append((cmd, opt, values))
    assert len(cases) > 40
    asks = [f"xputune {' '.join(cmd.words)} {opt.names[-1]} " for cmd, opt, _ in cases]
    for (cmd, opt, values), offered in zip(cases, ask_many(script_file, asks), strict=True):
        expected = set(values)
        if opt.dest == "profile":  # a name, or a YAML file: the folder's files come too
            assert expected <= set(offered), (cmd.words, opt.names)
        else:
            assert set(offered) == expected, (cmd.words, opt.names)


def test_values_narrow_as_typed(script_file: Path) -> None:
    answers = ask_many(
        script_file,
        [
            "xputune probe --example nv",
            "xputune check --format y",
            "xputune plan --model glm",
            "xputune apply --only pcie.",
            "xputune launch sglang --strategy ",
            "xputune kernels plan --layout ",
            "xputune probe --format=j",
            "xputune check --tier ",  # not an option of check: its options are offered
        ],
    )
    assert answers[0] == ["nvidia-hgx-h100"]
    assert answers[1] == ["yaml"]
    assert answers[2] == ["glm-5"]
    assert answers[3] == ["pcie.ido"]
    assert answers[4] == ["local", "all-nodes", "shared"]
    assert answers[5] and all(not a.startswith("-") for a in answers[5])
    assert answers[6] == ["json"]
    assert "--profile" in answers[7]


def test_paths_numbers_and_engine_arguments(script_file: Path, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "box.tar.xz").write_text("")
    monkeypatch.chdir(tmp_path)
    answers = ask_many(
        script_file,
        ["xputune probe --root bo", "xputune plan --tp ", "xputune launch sglang -- bo"],
    )
    assert answers == [["box.tar.xz"], [], ["box.tar.xz"]]


def test_show_and_install(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    said = {}
    for shell in completion_script.SHELLS:
        assert main(["--show-completion", shell]) == 0
        shown = capsys.readouterr().out
        assert main(["--install-completion", shell]) == 0
        said[shell] = capsys.readouterr().out
        path = completion_script.install_path(shell)
        assert path.read_text() == shown and str(path) in said[shell]
    assert (
        f"add this line to ~/.zshrc: source {completion_script.install_path('zsh')}" in said["zsh"]
    )
    monkeypatch.setenv("SHELL", "/usr/bin/fish")
    assert main(["--show-completion"]) == 0
    assert "complete -c xputune" in capsys.readouterr().out  # $SHELL picks the script
    assert main(["--show-completion", "tcsh"]) == 2
    assert "no completion for shell 'tcsh'" in capsys.readouterr().err


def test_an_old_typer_script_gets_no_answer(monkeypatch, capsys) -> None:
    monkeypatch.setenv("_XPUTUNE_COMPLETE", "complete_bash")
    assert main([]) == 0
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_the_other_scripts_parse_in_their_shell(shell: str, tmp_path: Path) -> None:
    binary = shutil.which(shell)
    if binary is None:
        pytest.skip(f"{shell} is not installed here")
    path = tmp_path / f"xputune.{shell}"
    path.write_text(completion_script.script(shell))
    check = [binary, "-n", str(path)] if shell == "zsh" else [binary, "--no-execute", str(path)]
    done = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_fish_lines_cover_every_option() -> None:
    text = completion_script.script("fish")
    for cmd in COMMANDS:
        when = f'test (__xputune_cmd) = "{" ".join(cmd.words)}"'
        for opt in cmd.all_options:
            assert f"-l {opt.names[0][2:]}" in text and when in text, (cmd.words, opt.names)
