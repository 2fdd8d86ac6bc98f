"""watch: the long-running agent that keeps a host at its profile (fleet/watch.py)."""

from __future__ import annotations

from xputune.cli import exits
from xputune.cli.check_run import ONLY, SKIP
from xputune.cli.options import EXAMPLE, MAX_EXPIRY_MINUTES, PROFILE, ROOT
from xputune.cli.spec import Command, Opt, Request
from xputune.cli.tune_cmds import KNOB_FLAGS, knob_overrides

WEEK = 604_800.0
WATCH = Command(
    ("watch",),
    "xputune.cli.watch_cmds:watch_cmd",
    (
        PROFILE.but(help="The profile to hold. Default: the one the last `xputune apply` "
                    "applied; with no apply on this host, watch reports and changes nothing."),
        *KNOB_FLAGS,
        ONLY,
        SKIP,
        Opt("force", ("--force",), "Let a knob flag override a setting the profile marks "
            "critical (refused otherwise).", kind="flag", default=False),
        Opt("interval", ("--interval",), "Under --root: poll the tree this often. Live: "
            "re-verify this often even without a udev event (THP and NUMA balancing raise "
            "none). 0.01 to 86400 (a day).", kind="float", min=0.01, max=86_400.0,
            default=60.0, metavar="SECONDS"),
        Opt("once", ("--once",), "One pass (verify, re-apply drift), then exit.", kind="flag",
            default=False),
        Opt("dry_run", ("--dry-run", "-n"), "Report drift and change nothing: no re-apply, no "
            "lock, no state written (--textfile/--nfd are still written). Needs no root; "
            "reads a recording too.", kind="flag", default=False),
        Opt("max_reapplies", ("--max-reapplies",), "Re-apply one place (a knob at one port or "
            "file) at most N times per --window; the next drift there starts a backoff.",
            kind="int", min=1, max=1000, default=3, metavar="N"),
        Opt("window", ("--window",), "See --max-reapplies. At most a week, as --backoff and "
            "--backoff-max.", kind="float", min=0.001, max=WEEK, default=600.0,
            metavar="SECONDS"),
        Opt("backoff", ("--backoff",), "First backoff of a flapping place; it doubles each "
            "time the place flaps again, up to --backoff-max.", kind="float", min=0.001,
            max=WEEK, default=60.0, metavar="SECONDS"),
        Opt("backoff_max", ("--backoff-max",), "Longest backoff.", kind="float", min=0.001,
            max=WEEK, default=3600.0, metavar="SECONDS"),
        Opt("textfile", ("--textfile",), "After each pass, write DIR/xputune.prom atomically "
            "(`xputune metrics`, with the watch's own counters) for node_exporter's textfile "
            "collector.", kind="path", metavar="DIR"),
        Opt("nfd", ("--nfd",), "After each pass, write Node Feature Discovery's feature file "
            "DIR/xputune (`xputune labels`), usually "
            "/etc/kubernetes/node-feature-discovery/features.d.", kind="path", metavar="DIR"),
        Opt("expiry", ("--expiry",), "With --nfd: NFD drops the labels this long after a write "
            "that is not renewed (0: never expire).", kind="int", min=0,
            max=MAX_EXPIRY_MINUTES, default=60, metavar="MINUTES"),
        ROOT,
        EXAMPLE,
    ),
    exits=(exits.UNSUPPORTED, *exits.CHANGES),
)  # fmt: skip


def watch_cmd(req: Request) -> int:
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

    Which profile it holds: --profile, else the one the last `xputune apply` on this host
    applied (with its flags). On a host where apply never ran, watch only reports: it changes
    nothing until told which profile to hold.

    Exit status with --once: 0 when the host is at its profile after the pass, whether every
    setting held or drift was re-applied; 1 when drift is left (a re-apply failed, a place
    backs off, a rollback paused the watch, no profile to hold, or --dry-run saw drift).
    Without --once: 0 after SIGTERM/SIGINT.

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

    from xputune.fleet import events, watch
    from xputune.host import open_host

    config = watch.WatchConfig(
        profile=req.profile,
        overrides=knob_overrides(req.ido, req.thp, req.shm_huge, req.numa_balancing),
        only=req.only,
        skip=req.skip,
        force=req.force,
        interval=req.interval,
        limits=watch.Limits(req.max_reapplies, req.window, req.backoff, req.backoff_max),
        textfile=req.textfile,
        nfd=req.nfd,
        nfd_expiry=timedelta(minutes=req.expiry) if req.expiry else None,
        dry_run=req.dry_run,
    )
    live = not req.root and not req.example
    stopper = events.Stopper()
    stopper.install()
    try:
        code = watch.run(
            lambda: open_host(req.root, req.example),
            config,
            once=req.once,
            source=events.UdevSource if live else events.PollSource,
            stopper=stopper,
        )
    finally:
        stopper.close()
    return code
