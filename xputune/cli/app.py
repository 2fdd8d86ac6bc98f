"""The typer application: one sub-module per command family registers its commands here.

Importing every command module and turning all of them into click commands costs tens of
milliseconds that `xputune plan` does not need (DESIGN: plan, check and launch start within 2x
of the probe). So `build(name)` registers only the module that owns command `name`, and keeps
only that command of it; help, shell completion, a typo or no command at all get every module,
in the same order as always, so the top-level help and the man pages list everything. `app` is
the full application, built on first use. tests/cli/test_startup.py keeps COMMANDS equal to
what the modules register.
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Annotated

import typer

from xputune import __version__

if TYPE_CHECKING:
    app: typer.Typer

# Registration order: the order of the commands in `xputune --help`.
MODULES = (
    "probe_cmds",
    "smi_cmds",
    "tune_cmds",
    "plan_cmds",
    "plan_host_cmds",
    "launch_cmds",
    "measure_cmds",
    "kernels_cmds",
    "schema_cmds",
    "fleet_cmds",
    "watch_cmds",
)

# Top-level command (or group) -> the module in MODULES that registers it.
COMMANDS = {
    "probe": "probe_cmds",
    "record": "probe_cmds",
    "examples": "probe_cmds",
    "smi": "smi_cmds",
    "check": "tune_cmds",
    "apply": "tune_cmds",
    "rollback": "tune_cmds",
    "recommend": "tune_cmds",
    "profiles": "tune_cmds",
    "model": "plan_cmds",
    "tiers": "plan_cmds",
    "plan": "plan_host_cmds",
    "launch": "launch_cmds",
    "replay": "measure_cmds",
    "sweep": "measure_cmds",
    "kernels": "kernels_cmds",
    "bench": "kernels_cmds",
    "schema": "schema_cmds",
    "metrics": "fleet_cmds",
    "labels": "fleet_cmds",
    "fleet": "fleet_cmds",
    "watch": "watch_cmds",
}


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


@cache
def _module(name: str) -> ModuleType:
    """A command module, imported once; module-level groups are completed here, once."""
    module = importlib.import_module(f"xputune.cli.{name}")
    if name == "kernels_cmds":
        from xputune.cli import bench_host_cmds

        bench_host_cmds.add_to(module.bench_app)
    return module


def build(command: str | None = None) -> typer.Typer:
    """The application with command `command` alone when COMMANDS knows it, else with all."""
    new = typer.Typer(
        name="xputune",
        help="Probe, tune, plan and launch tiered KV caching (SGLang HiCache) on accelerator "
        "hosts.\n\nEvery command that reads the machine takes --root (a recording or extracted "
        "tree) or --example NAME, so it runs the same on a laptop as on the box.",
        context_settings={"help_option_names": ["-h", "--help"]},
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",
    )
    new.callback()(_root)
    owner = COMMANDS.get(command or "")
    for name in (owner,) if owner else MODULES:
        _module(name).register(new)
    if owner:  # the module's other commands would be turned into click commands for nothing
        new.registered_commands = [c for c in new.registered_commands if _name(c) == command]
        new.registered_groups = [g for g in new.registered_groups if g.name == command]
    return new


def _name(info: typer.models.CommandInfo) -> str:
    """A registered command's name, as typer derives it when none was given."""
    return info.name or typer.main.get_command_name(info.callback.__name__)


def __getattr__(name: str) -> typer.Typer:
    """`app`: the application with every command (man pages, tests), built on first use."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    full = globals()["app"] = build()
    return full
