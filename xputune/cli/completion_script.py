"""Shell completion scripts (bash, zsh, fish) generated from the command tables.

A TAB must answer before the user notices. A script that calls back into xputune pays a Python
start-up and the import of the command's module on every TAB (about 0.2-0.45 s when typer built
the answer), so the script carries everything itself: the commands, each one's options, and
each option's values (its choices, or what its completer in cli/completion.py lists when the
script is made: examples, profiles, models, knobs, schemas); a path is completed by the shell.
The price: a script made by one release does not know the next one's options, so
`--install-completion` is run again after an upgrade (docs/cli.md). A test runs the bash script
in bash and compares its answers with the tables (tests/cli/test_completion.py).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from xputune import __version__
from xputune.cli import completion, registry
from xputune.cli.helptext import summary_of
from xputune.cli.spec import Command, Opt
from xputune.errors import XputuneError

SHELLS = ("bash", "zsh", "fish")
#: Path kinds: the shell completes file names for them.
_PATHS = ("path",)


def _values(opt: Opt) -> list[str]:
    """What completes after `opt`: its choices, or its completer's values now."""
    if opt.kind == "choice":
        return list(opt.choices)
    if opt.complete:
        return [value for value, _ in getattr(completion, opt.complete)("")]
    return []


def _takes_files(item: object) -> bool:
    """A value that is (or may be) a file: a path, or a profile given as a YAML file."""
    return getattr(item, "kind", "") in _PATHS or getattr(item, "dest", "") == "profile"


def _names(opt: Opt) -> list[str]:
    return [*opt.names, *((opt.negative,) if opt.negative else ())]


def _commands() -> list[Command]:
    return [registry.load(words) for words in registry.COMMANDS]


def _tops() -> list[str]:
    return list(dict.fromkeys(words[0] for words in registry.COMMANDS))


def _words(values: list[str]) -> str:
    return shlex.quote(" ".join(values))


# -- bash (and zsh through bashcompinit) ------------------------------------------------------


def _bash_case(cmd: Command) -> list[str]:
    """The `case` arm of one command: its options, and what completes after each."""
    options = [name for opt in cmd.all_options for name in _names(opt)] + ["--help"]
    lines = [f"        {shlex.quote(' '.join(cmd.words))})", f"            opts={_words(options)}"]
    arms: list[str] = []
    for opt in cmd.all_options:
        if opt.flag:
            continue
        pattern = "|".join(opt.names)
        values = _values(opt)
        if values and _takes_files(opt):
            action = f"values={_words(values)}; files=1"
        elif values:
            action = f"values={_words(values)}"
        elif _takes_files(opt):
            action = "files=1"
        else:
            action = "return 0"  # a number or a free word: nothing to offer
        arms.append(f"                {pattern}) {action} ;;")
    if arms:
        lines += ['            case "$prev" in', *arms, "            esac"]
    if any(_takes_files(a) for a in cmd.args) or cmd.passthrough:
        lines.append("            args=files")
    else:
        values = [v for a in cmd.args if a.complete for v in _values_of_arg(a)]
        if values:
            lines.append(f"            args={_words(values)}")
    lines.append("            ;;")
    return lines


def _values_of_arg(arg: object) -> list[str]:
    name = getattr(arg, "complete", None)
    return [value for value, _ in getattr(completion, name)("")] if name else []


def bash(function: str = "_xputune") -> str:
    groups = {g: [w[1] for w in registry.COMMANDS if w[0] == g] for g in registry.GROUPS}
    group_arms = [
        f'            {g}) COMPREPLY=($(compgen -W {_words(subs)} -- "$cur")) ;;'
        for g, subs in groups.items()
    ]
    tops = [*_tops(), "--help", "--version", "--install-completion", "--show-completion"]
    cases = [line for cmd in _commands() for line in _bash_case(cmd)]
    return "\n".join([
        f"# bash completion for xputune {__version__}, made from its command tables.",
        "# After upgrading xputune, run `xputune --install-completion` again.",
        f"{function}() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    if [[ "$prev" == "=" && $COMP_CWORD -ge 2 ]]; then',
        '        prev="${COMP_WORDS[COMP_CWORD-2]}"  # --opt=value: readline split it at "="',
        "    fi",
        '    [[ "$cur" == "=" ]] && cur=""',
        '    local cmd="${COMP_WORDS[1]}" at=2 i',
        '    case "$cmd" in',
        f"        {'|'.join(groups)}) cmd=\"$cmd ${{COMP_WORDS[2]}}\"; at=3 ;;",
        "    esac",
        "    COMPREPLY=()",
        "    if (( COMP_CWORD == 1 )); then",
        f'        COMPREPLY=($(compgen -W {_words(tops)} -- "$cur"))',
        "        return 0",
        "    fi",
        "    if (( COMP_CWORD < at )); then",
        '        case "${COMP_WORDS[1]}" in',
        *group_arms,
        "        esac",
        "        return 0",
        "    fi",
        "    for (( i = at; i < COMP_CWORD; i++ )); do",
        '        if [[ "${COMP_WORDS[i]}" == "--" ]]; then  # the engine\'s own arguments',
        '            COMPREPLY=($(compgen -f -- "$cur")); return 0',
        "        fi",
        "    done",
        '    local opts="" values="" files="" args=""',
        '    case "$cmd" in',
        *cases,
        "        *) return 0 ;;",
        "    esac",
        '    if [[ -n "$values$files" ]]; then',
        '        [[ -n "$values" ]] && COMPREPLY=($(compgen -W "$values" -- "$cur"))',
        '        [[ -n "$files" ]] && COMPREPLY+=($(compgen -f -- "$cur"))',
        "        return 0",
        "    fi",
        '    if [[ "$cur" == -* || -z "$args" ]]; then',
        '        COMPREPLY=($(compgen -W "$opts" -- "$cur"))',
        '    elif [[ "$args" == files ]]; then',
        '        COMPREPLY=($(compgen -f -- "$cur"))',
        "    else",
        '        COMPREPLY=($(compgen -W "$args" -- "$cur"))',
        "    fi",
        "}",
        f"complete -o filenames -F {function} xputune",
        "",
    ])  # fmt: skip


def zsh() -> str:
    """zsh runs the bash function through its bashcompinit, so both complete the same."""
    return "\n".join([
        f"# zsh completion for xputune {__version__}: source it from ~/.zshrc.",
        "autoload -U +X compinit && { (( $+functions[compdef] )) || compinit; }",
        "autoload -U +X bashcompinit && bashcompinit",
        bash("_xputune_bash"),
    ])  # fmt: skip


# -- fish ------------------------------------------------------------------------------------


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish() -> str:
    out = [
        f"# fish completion for xputune {__version__}, made from its command tables.",
        "# After upgrading xputune, run `xputune --install-completion` again.",
        "function __xputune_cmd --description 'the xputune command on the line so far'",
        "    set -l words (commandline -opc)",
        f"    if contains -- $words[2] {' '.join(registry.GROUPS)}",
        '        echo "$words[2] $words[3]"',
        "    else",
        '        echo "$words[2]"',
        "    end",
        "end",
        "complete -c xputune -f",
        "complete -c xputune -n '__fish_use_subcommand' -s V -l version -d 'Print the version'",
    ]
    for top in _tops():
        what = registry.GROUPS.get(top) or summary_of(registry.load((top,)))
        out.append(
            f"complete -c xputune -n '__fish_use_subcommand' -a {top} -d {_fish_quote(what)}"
        )
    for group in registry.GROUPS:
        for words in (w for w in registry.COMMANDS if w[0] == group):
            when = f'test (__xputune_cmd) = "{group} "'
            what = _fish_quote(summary_of(registry.load(words)))
            out.append(f"complete -c xputune -n {_fish_quote(when)} -a {words[1]} -d {what}")
    for cmd in _commands():
        when = _fish_quote(f'test (__xputune_cmd) = "{" ".join(cmd.words)}"')
        for opt in cmd.all_options:
            spell = " ".join(
                f"-l {n[2:]}" if n.startswith("--") else f"-s {n[1:]}" for n in _names(opt)
            )
            values = _values(opt)
            extra = "" if opt.flag else " -r"
            if values:
                extra += f" -a {_fish_quote(' '.join(values))}"
            if _takes_files(opt):
                extra += " -F"
            help_ = _fish_quote(opt.help.split(". ")[0].rstrip("."))
            out.append(f"complete -c xputune -n {when} {spell}{extra} -d {help_}")
        if any(_takes_files(a) for a in cmd.args):
            out.append(f"complete -c xputune -n {when} -F")
    return "\n".join(out) + "\n"


def script(shell: str) -> str:
    if shell not in SHELLS:
        raise XputuneError(f"no completion for shell {shell!r}: give one of {', '.join(SHELLS)}")
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell]()


def current_shell() -> str:
    """The user's shell, from $SHELL; bash when it is none of the three."""
    name = Path(os.environ.get("SHELL", "bash")).name
    return name if name in SHELLS else "bash"


def _data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def install_path(shell: str) -> Path:
    """Where the script goes: the folder each shell (bash-completion, fish) loads completions
    from by itself; for zsh a file that ~/.zshrc sources."""
    if shell == "bash":
        return _data_home() / "bash-completion" / "completions" / "xputune"
    if shell == "fish":
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return config / "fish" / "completions" / "xputune.fish"
    return _data_home() / "xputune" / "completion.zsh"


def install(shell: str) -> tuple[Path, str]:
    """Write the script where the shell finds it; (the file, what the user still has to do)."""
    text = script(shell)
    path = install_path(shell)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise XputuneError(f"cannot write {path}: {exc.strerror or exc}") from None
    if shell == "zsh":
        todo = f"add this line to ~/.zshrc: source {shlex.quote(str(path))}"
    else:
        todo = "open a new shell to use it"
    return path, todo
