"""typer's application drawn from the command tables, for what typer does best: --help, shell
completion and the man pages. Commands never run through it (cli/parse.py runs them).

Each command becomes a typer function whose signature is made from its table (typer reads a
function's signature: inspect.signature honours __signature__), so typer's help shows exactly
the options the parser takes, with their bounds, choices and completers. The function's body
is never called. Nothing here touches typer's or click's internals.
"""

from __future__ import annotations

import enum
import inspect
from functools import cache
from typing import Annotated, Any

import typer

from xputune import __version__
from xputune.cli import completion, environment, exits, registry
from xputune.cli.spec import Arg, Command, Opt


def _choices(opt: Opt) -> type[enum.Enum]:
    return enum.Enum(f"{opt.dest.title()}Choice", {c: c for c in opt.choices}, type=str)


def _annotation(opt: Opt) -> tuple[Any, Any]:
    """(annotation, default) of a typer parameter for `opt`."""
    extra: dict[str, Any] = {}
    if opt.complete:
        extra["autocompletion"] = getattr(completion, opt.complete)
    if opt.metavar and opt.kind != "choice":
        extra["metavar"] = opt.metavar
    if opt.kind in ("int", "float"):
        extra.update(min=opt.min, max=opt.max)
    base: Any = {"int": int, "float": float, "flag": bool}.get(opt.kind, str)
    default = opt.default
    if opt.kind == "choice":
        base = _choices(opt)
        default = None if opt.default is None else base(str(opt.default))
    if opt.multiple:
        base, default = list[base], None
    elif opt.required:
        default = inspect.Parameter.empty
    elif opt.default is None and opt.kind != "flag":
        base = base | None
    names = opt.names
    if opt.negative:  # typer spells an on/off pair "--ido/--no-ido"
        names = (f"{opt.names[0]}/{opt.negative}", *opt.names[1:])
    info = typer.Option(*names, help=opt.help, **extra)
    return Annotated[base, info], default


def _argument(arg: Arg) -> tuple[Any, Any]:
    extra: dict[str, Any] = {"metavar": arg.metavar, "help": arg.help}
    if arg.complete:
        extra["autocompletion"] = getattr(completion, arg.complete)
    base: Any = list[str] if arg.multiple else str
    if not arg.required:
        base = base | None
    default = inspect.Parameter.empty if arg.required else None
    return Annotated[base, typer.Argument(**extra)], default


def _explain_only(**_: Any) -> None:
    raise RuntimeError("xputune runs commands through cli/parse.py; typer only explains them")


def help_function(cmd: Command) -> Any:
    """A function whose signature is cmd's table and whose docstring is its runner's."""
    params = []
    for arg in cmd.args:
        annotation, default = _argument(arg)
        params.append(inspect.Parameter(arg.dest, inspect.Parameter.KEYWORD_ONLY,
                                        default=default, annotation=annotation))  # fmt: skip
    for opt in cmd.all_options:
        annotation, default = _annotation(opt)
        params.append(inspect.Parameter(opt.dest, inspect.Parameter.KEYWORD_ONLY,
                                        default=default, annotation=annotation))  # fmt: skip
    fn = _explain_only
    wrapper = type(fn)(fn.__code__, fn.__globals__, cmd.words[-1].replace("-", "_"))
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    wrapper.__doc__ = runner_doc(cmd)
    return wrapper


def runner_doc(cmd: Command) -> str:
    module, _, name = cmd.runner.partition(":")
    import importlib

    return inspect.getdoc(getattr(importlib.import_module(module), name)) or ""


def epilog(cmd: Command) -> str:
    """EXIT STATUS and ENVIRONMENT of a command, as its --help ends."""
    lines = ["**Exit status:**", ""]
    lines += [f"- {code}: {meaning}" for code, meaning in exits.statuses(cmd.exits)]
    variables = environment.for_command(cmd.words)
    if variables:
        lines += ["", "**Environment:**", ""]
        lines += [f"- {name}: {what}" for name, what in variables]
    return "\n".join(lines)


def _version(value: bool) -> None:
    if value:
        print(f"xputune {__version__}")
        raise typer.Exit(0)


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Probe, tune, plan and launch tiered KV caching on accelerator hosts."""


TOP_HELP = (
    "Probe, tune, plan and launch tiered KV caching (SGLang HiCache) on accelerator hosts.\n\n"
    "Every command that reads the machine takes --root (a recording or extracted tree) or "
    "--example NAME, so it runs the same on a laptop as on the box. Every command takes "
    "--quiet and --verbose, and ends with one of the exit statuses below."
)


def top_epilog() -> str:
    lines = ["**Exit status** (each command's --help lists its own):", ""]
    lines += [f"- {code}: {meaning}" for code, meaning in exits.MEANINGS.items()]
    lines += ["", "**Environment:**", ""]
    lines += [f"- {name}: {what}" for name, (what, _) in environment.VARIABLES.items()]
    return "\n".join(lines)


@cache
def application() -> typer.Typer:
    """The whole CLI as typer sees it (built once: help, completion, man pages)."""
    app = typer.Typer(
        name="xputune",
        help=TOP_HELP,
        epilog=top_epilog(),
        context_settings={"help_option_names": ["-h", "--help"]},
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    groups: dict[str, typer.Typer] = {}
    for words in registry.COMMANDS:
        cmd = registry.load(words)
        target = app
        if len(words) == 2:
            group = groups.get(words[0])
            if group is None:
                group = groups[words[0]] = typer.Typer(
                    help=registry.GROUPS[words[0]], no_args_is_help=True,
                    rich_markup_mode=None,
                )  # fmt: skip
                app.add_typer(group, name=words[0])
            target = group
        metavar = "[OPTIONS]" + (f" -- {cmd.passthrough_metavar}" if cmd.passthrough else "")
        target.command(
            words[-1],
            epilog=epilog(cmd),
            options_metavar=metavar,
            context_settings={"help_option_names": ["-h", "--help"]},
        )(help_function(cmd))
    return app
