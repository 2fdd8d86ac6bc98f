"""watch: the long-running agent that keeps a host at its profile (fleet/watch.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.checks import MAX_EXPIRY_MINUTES, given
from xputune.cli.common import ExampleOpt, RootOpt
from xputune.cli.tune_cmds import (
    ForceOpt,
    IdoOpt,
    NumaBalancingOpt,
    OnlyOpt,
    ProfileOpt,
    ShmHugeOpt,
    SkipOpt,
    ThpOpt,
    knob_overrides,
)


def watch_cmd(
    profile: ProfileOpt = None,
    ido: IdoOpt = None,
    thp: ThpOpt = None,
    shm_huge: ShmHugeOpt = None,
    numa_balancing: NumaBalancingOpt = None,
    only: OnlyOpt = None,
    skip: SkipOpt = None,
    force: ForceOpt = False,
    interval: Annotated[
        float,
        typer.Option(
            "--interval",
            min=0.01,
            max=86_400.0,
            metavar="SECONDS",
            help="Under --root: poll the tree this often. Live: re-verify this often even "
            "without a udev event (THP and NUMA balancing raise none). 0.01 to 86400 (a day).",
        ),
    ] = 60.0,
    once: Annotated[
        bool, typer.Option("--once", help="One pass (verify, re-apply drift), then exit.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            "-n",
            help="Report drift and change nothing: no re-apply, no lock, no state written "
            "(--textfile/--nfd are still written). Needs no root; reads a recording too.",
        ),
    ] = False,
    max_reapplies: Annotated[
        int,
        typer.Option(
            "--max-reapplies",
            min=1,
            max=1000,
            metavar="N",
            help="Re-apply one place (a knob at one port or file) at most N times per "
            "--window; the next drift there starts a backoff.",
        ),
    ] = 3,
    window: Annotated[
        float,
        typer.Option(
            "--window",
            min=0.001,
            max=604_800.0,
            metavar="SECONDS",
            help="See --max-reapplies. At most a week, as --backoff and --backoff-max.",
        ),
    ] = 600.0,
    backoff: Annotated[
        float,
        typer.Option(
            "--backoff",
            min=0.001,
            max=604_800.0,
            metavar="SECONDS",
            help="First backoff of a flapping place; it doubles each time the place flaps "
            "again, up to --backoff-max.",
        ),
    ] = 60.0,
    backoff_max: Annotated[
        float,
        typer.Option(
            "--backoff-max", min=0.001, max=604_800.0, metavar="SECONDS", help="Longest backoff."
        ),
    ] = 3600.0,
    textfile: Annotated[
        str | None,
        typer.Option(
            "--textfile",
            metavar="DIR",
            help="After each pass, write DIR/xputune.prom atomically (`xputune metrics`, with "
            "the watch's own counters) for node_exporter's textfile collector.",
            callback=given,
        ),
    ] = None,
    nfd: Annotated[
        str | None,
        typer.Option(
            "--nfd",
            metavar="DIR",
            help="After each pass, write Node Feature Discovery's feature file DIR/xputune "
            "(`xputune labels`), usually /etc/kubernetes/node-feature-discovery/features.d.",
            callback=given,
        ),
    ] = None,
    expiry: Annotated[
        int,
        typer.Option(
            "--expiry",
            min=0,
            max=MAX_EXPIRY_MINUTES,
            metavar="MINUTES",
            help="With --nfd: NFD drops the labels this long after a write that is not "
            "renewed (0: never expire).",
        ),
    ] = 60,
    root: RootOpt = None,
    example: ExampleOpt = None,
) -> None:
    """Keep the host at its profile: re-verify on every card event, re-apply what drifted.

    PCIe ordering bits are lost when a card is reset, hot-plugged or its driver rebinds, and
    nothing puts them back before the next boot. On the live host watch listens to udev
    (pci add, bind and change events of the cards and every port on their paths) and re-verifies
    the profile (the same flags as `xputune apply`) after each, and every --interval seconds.
    Drift is re-applied as one journaled transaction, exactly like `xputune apply`, so
    `xputune rollback` undoes it; after a rollback the watch pauses (reports drift, changes
    nothing) until the next apply.

    A flapping card must not loop: each place is re-applied at most --max-reapplies times per
    --window, then left alone for --backoff seconds (doubling while it keeps flapping); the log
    says so. Every event is one logfmt line on stderr (journald under systemd): start, udev,
    drift, reapply, reapply-failed, backoff, paused, resumed, busy, error, stop.

    Under --root (an extracted tree) it polls every --interval seconds instead of udev, and
    changes that tree and nothing else. SIGTERM or SIGINT finishes the current pass, releases
    the lock and exits 0. Only one watch runs per host (a lock in /var/lib/xputune).

    Exit status with --once: 0 every setting held (nothing changed); 1 drift was found and
    re-applied (every setting holds now); 3 drift is left (a re-apply failed, a place backs
    off, a rollback paused the watch, or --dry-run). Without --once: 0 after SIGTERM/SIGINT.
    Errors: 2 (a bad flag, profile or tree), 4 (the live host needs root), 5 (another watch
    is running).

    The live host needs pyudev (pip install 'xputune[udev]'). `xputune apply --persist
    --watch` installs it as xputune-watch.service.

    Examples:

        xputune watch --profile hygon-p800
        xputune watch --textfile /var/lib/node_exporter/textfile_collector \\
            --nfd /etc/kubernetes/node-feature-discovery/features.d
        xputune watch --root ./h3c-box --interval 0.2
        xputune watch --once --root ./h3c-box
        xputune watch --once --dry-run          # what would it change here?
    """
    from datetime import timedelta

    from xputune.cli.common import host_from
    from xputune.fleet import events, watch

    config = watch.WatchConfig(
        profile=profile,
        overrides=knob_overrides(ido, thp, shm_huge, numa_balancing),
        only=only,
        skip=skip,
        force=force,
        interval=interval,
        limits=watch.Limits(max_reapplies, window, backoff, backoff_max),
        textfile=textfile,
        nfd=nfd,
        nfd_expiry=timedelta(minutes=expiry) if expiry else None,
        dry_run=dry_run,
    )
    live = not root and not example
    stopper = events.Stopper()
    stopper.install()
    try:
        code = watch.run(
            lambda: host_from(root, example),
            config,
            once=once,
            source=events.UdevSource if live else events.PollSource,
            stopper=stopper,
        )
    finally:
        stopper.close()
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("watch")(watch_cmd)
