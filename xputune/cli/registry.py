"""Where each command's table lives, in the order `xputune --help` lists them.

Only the module that owns a command is imported to run it (start-up is a product feature);
--help, the man pages and the completion scripts import them all (cli/helptext.py,
cli/manpages.py, cli/completion_script.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from xputune.cli.spec import Command

#: Command words -> "module:ATTRIBUTE" of its cli/spec.Command.
COMMANDS: dict[tuple[str, ...], str] = {
    ("probe",): "xputune.cli.probe_run:PROBE",
    ("record",): "xputune.cli.probe_cmds:RECORD",
    ("examples",): "xputune.cli.probe_cmds:EXAMPLES",
    ("smi",): "xputune.cli.smi_cmds:SMI",
    ("status",): "xputune.cli.status_cmds:STATUS",
    ("verify",): "xputune.cli.verify_cmds:VERIFY",
    ("check",): "xputune.cli.check_run:CHECK",
    ("apply",): "xputune.cli.tune_cmds:APPLY",
    ("rollback",): "xputune.cli.tune_cmds:ROLLBACK",
    ("recommend",): "xputune.cli.tune_cmds:RECOMMEND",
    ("profiles",): "xputune.cli.tune_cmds:PROFILES",
    ("model",): "xputune.cli.plan_cmds:MODEL_CMD",
    ("tiers",): "xputune.cli.plan_cmds:TIERS",
    ("plan",): "xputune.cli.plan_run:PLAN",
    ("launch", "sglang"): "xputune.cli.launch_run:LAUNCH_SGLANG",
    ("launch", "l3-donors"): "xputune.cli.donors_run:LAUNCH_DONORS",
    ("launch", "cluster"): "xputune.cli.cluster_run:LAUNCH_CLUSTER",
    ("replay",): "xputune.cli.measure_cmds:REPLAY",
    ("sweep",): "xputune.cli.measure_cmds:SWEEP",
    ("kernels", "plan"): "xputune.cli.kernels_cmds:KERNELS_PLAN",
    ("kernels", "build"): "xputune.cli.kernels_cmds:KERNELS_BUILD",
    ("kernels", "selftest"): "xputune.cli.kernels_cmds:KERNELS_SELFTEST",
    ("bench", "copy"): "xputune.cli.kernels_cmds:BENCH_COPY",
    ("bench", "host"): "xputune.cli.bench_host_cmds:BENCH_HOST",
    ("schema",): "xputune.cli.schema_cmds:SCHEMA",
    ("metrics",): "xputune.cli.fleet_cmds:METRICS",
    ("labels",): "xputune.cli.fleet_cmds:LABELS",
    ("fleet", "report"): "xputune.cli.fleet_cmds:FLEET_REPORT",
    ("watch",): "xputune.cli.watch_cmds:WATCH",
}

#: Groups: their one-line help.
GROUPS: dict[str, str] = {
    "launch": "Launch a serving engine with the probe's bindings, the plan's tier and the cache "
    "plugin switched on; N of them behind a router; or a decode node's L3 donors.",
    "kernels": "The KV copy kernels: segment plans, builds and self-tests.",
    "bench": "Measure copy bandwidth and pinned host buffers on this host.",
    "fleet": "Many hosts at once: outliers in their probe and check documents.",
}


def load(words: tuple[str, ...]) -> Command:
    """The table of the command `words` (its module imported)."""
    module, _, attribute = COMMANDS[words].partition(":")
    return getattr(importlib.import_module(module), attribute)


def find(argv: Sequence[str]) -> tuple[tuple[str, ...], int] | None:
    """(the words of the command argv names, how many of argv they take), or None."""
    for size in (2, 1):
        words = tuple(argv[:size])
        if len(words) == size and words in COMMANDS:
            return words, size
    return None


def all_commands() -> list[Command]:
    return [load(words) for words in COMMANDS]
