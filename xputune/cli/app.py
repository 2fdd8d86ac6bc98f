"""The typer application: one sub-module per command family registers its commands here."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune import __version__

app = typer.Typer(
    name="xputune",
    help="Probe, tune, plan and launch tiered KV caching (SGLang HiCache) on accelerator hosts.\n\n"
    "Every command that reads the machine takes --root (a recording or extracted tree) or "
    "--example NAME, so it runs the same on a laptop as on the box.",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


def _version(value: bool) -> None:
    if value:
        print(f"xputune {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Probe, tune, plan and launch tiered KV caching on accelerator hosts."""


def _register() -> None:
    from xputune.cli import (
        bench_host_cmds,
        fleet_cmds,
        kernels_cmds,
        launch_cmds,
        plan_cmds,
        plan_host_cmds,
        probe_cmds,
        schema_cmds,
        smi_cmds,
        tune_cmds,
    )

    for module in (
        probe_cmds,
        smi_cmds,
        tune_cmds,
        plan_cmds,
        plan_host_cmds,
        launch_cmds,
        kernels_cmds,
        schema_cmds,
        fleet_cmds,
    ):
        module.register(app)
    bench_host_cmds.add_to(kernels_cmds.bench_app)


_register()
