"""Console-script entry point: find the command, parse it from its table, run it; every error a
user can make is one line on stderr and an exit status from cli/exits.py.

A command runs through cli/parse.py and its runner, importing only its own module; --help and
the man pages are drawn from the same tables by cli/helptext.py, the shell completion scripts by
cli/completion_script.py. xputune's own errors (XputuneError) and usage errors read the same:
`xputune: error: ...` on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from xputune.cli import exits
from xputune.errors import XputuneError

_HELP = ("-h", "--help")


def _completion(args: list[str]) -> int | None:
    """--show-completion / --install-completion [SHELL]; None for any other command line.

    The scripts answer a TAB by themselves (cli/completion_script.py). A script installed by
    an older xputune calls back with _XPUTUNE_COMPLETE set: it gets no answer rather than the
    top help as candidates, and --install-completion replaces it."""
    if "_XPUTUNE_COMPLETE" in os.environ:
        return exits.OK
    if args[:1] not in (["--show-completion"], ["--install-completion"]):
        return None
    from xputune.cli import completion_script
    from xputune.cli.parse import UsageError

    if len(args) > 2:
        raise UsageError(None, f"{args[0]} takes one shell at most, not {' '.join(args[1:])!r}")
    shell = args[1] if len(args) == 2 else completion_script.current_shell()
    if shell not in completion_script.SHELLS:
        shells = ", ".join(completion_script.SHELLS)
        raise UsageError(None, f"{args[0]}: no completion for shell {shell!r}; give {shells}")
    if args[0] == "--show-completion":
        sys.stdout.write(completion_script.script(shell))
        return exits.OK
    path, todo = completion_script.install(shell)
    print(f"{shell} completion written to {path}; {todo}")
    return exits.OK


def _help(args: list[str]) -> str | None:
    """The help text args ask for (no command, --help anywhere before `--`), else None."""
    from xputune.cli import registry

    before = args[: args.index("--")] if "--" in args else args
    asked = not args or any(a in _HELP for a in before)
    if not asked and not (args[0] in registry.GROUPS and len(args) == 1):
        return None
    from xputune.cli import helptext

    if not args or args[0] in _HELP:
        return helptext.top_help()
    found = registry.find(args)
    if found is not None:
        return helptext.command_help(registry.load(found[0]))
    if args[0] in registry.GROUPS and (len(args) == 1 or args[1] in _HELP):
        return helptext.group_help(args[0])
    return None


def _unknown_command(args: list[str]) -> XputuneError:
    from difflib import get_close_matches

    from xputune.cli.parse import UsageError
    from xputune.cli.registry import COMMANDS, GROUPS

    word = args[0]
    if word in GROUPS:
        if len(args) == 1:
            return UsageError(None, f"'{word}' needs a command: xputune {word} --help")
        subs = [w[1] for w in COMMANDS if w[0] == word]
        near = get_close_matches(args[1], subs, n=1)
        hint = f"; did you mean '{word} {near[0]}'?" if near else ""
        return UsageError(None, f"no such command '{word} {args[1]}'{hint}")
    tops = sorted({w[0] for w in COMMANDS})
    near = get_close_matches(word, tops, n=1)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    return UsageError(None, f"no such command '{word}'{hint}")


def run(args: Sequence[str]) -> int:
    """Parse and run one command line; its exit status."""
    from xputune.cli import output, registry
    from xputune.cli.parse import parse
    from xputune.cli.spec import Request

    found = registry.find(args)
    if found is None:
        raise _unknown_command(list(args))
    words, taken = found
    cmd = registry.load(words)
    values = parse(cmd, args[taken:])
    output.set_verbosity(quiet=values.pop("quiet"), verbose=values.pop("verbose"))
    module, _, name = cmd.runner.partition(":")
    import importlib

    try:
        code = getattr(importlib.import_module(module), name)(Request(values))
    finally:
        output.consulted()
    return code if isinstance(code, int) else exits.OK


def main(argv: list[str] | None = None) -> int:
    """Run xputune; user and usage errors print one line and return their exit status."""
    args = list(argv if argv is not None else sys.argv[1:])
    try:
        if args[:1] in (["-V"], ["--version"]):
            from xputune import __version__

            print(f"xputune {__version__}")
            return exits.OK
        completed = _completion(args)
        if completed is not None:
            return completed
        shown = _help(args)
        if shown is not None:
            sys.stdout.write(shown)
            asked = any(a in _HELP for a in args)  # else: no command, or a group without one
            return exits.OK if asked else exits.USAGE
        return run(args)
    except XputuneError as exc:
        from xputune.userfiles import printable

        sys.stderr.write(f"xputune: error: {printable(str(exc))}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("xputune: interrupted\n")
        return exits.INTERRUPTED
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return exits.OK
        return code if isinstance(code, int) else 1
    except BrokenPipeError:
        return exits.PIPE


if __name__ == "__main__":
    sys.exit(main())
