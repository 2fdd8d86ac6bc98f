"""`xputune launch sglang`: turn a plan into SGLang's command line and environment.

The user's own flags always win: ours fill in what they did not say, and every flag both sides
set with different values is reported as a conflict. SGLang's argparse accepts several spellings
(and unambiguous prefixes) of one flag, so flags are compared under their canonical name.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from xputune.errors import XputuneError
from xputune.plan.host_plan import HostPlan

# Spellings SGLang 0.5.20's parser accepts for the flags xputune emits or reads.
ALIASES: dict[str, tuple[str, ...]] = {
    "--tp-size": ("--tensor-parallel-size", "--tp-size"),
    "--model-path": ("--model-path", "--model"),
    "--enable-hierarchical-cache": ("--enable-hierarchical-cache",),
    "--hicache-size": ("--hicache-size",),
    "--hicache-ratio": ("--hicache-ratio",),
    "--hicache-mem-layout": ("--hicache-mem-layout",),
    "--hicache-io-backend": ("--hicache-io-backend",),
    "--hicache-write-policy": ("--hicache-write-policy",),
    "--numa-node": ("--numa-node",),
    "--disaggregation-ib-device": ("--disaggregation-ib-device",),
    "--device": ("--device",),
    "--page-size": ("--page-size",),
}
_SPELLINGS = {spelling: canon for canon, names in ALIASES.items() for spelling in names}

# The plugin's switches (see xputune.sglang). "numa" places each rank's host KV buffer on the
# plan's node (huge pages, placement verified, then registered); "tp-shared" follows --strategy
# shared, whose one buffer is interleaved instead. The CLI switches on all but the ghost list,
# whose benefit depends on L2 size and reuse distances.
FEATURE_ENV = {
    "lifo": "XPUTUNE_HICACHE_LIFO",
    "async": "XPUTUNE_HICACHE_ASYNC",
    "count-once": "XPUTUNE_HICACHE_COUNT_ONCE",
    "ghost": "XPUTUNE_HICACHE_GHOST",
    "kernels": "XPUTUNE_HICACHE_KERNELS",
    "tp-shared": "XPUTUNE_HICACHE_TP_SHARED",
    "numa": "XPUTUNE_HICACHE_NUMA",
    "host-buffer": "XPUTUNE_HICACHE_HOST_BUFFER",
}


class LaunchError(XputuneError):
    """The launch cannot go ahead as asked."""


def canonical(flag: str) -> str:
    """SGLang's canonical spelling of `flag`, resolving argparse-style unique prefixes."""
    name = flag.split("=", 1)[0]
    if name in _SPELLINGS:
        return _SPELLINGS[name]
    matches = {canon for spelling, canon in _SPELLINGS.items() if spelling.startswith(name)}
    return matches.pop() if len(matches) == 1 and len(name) > 3 else name


def split_flags(args: list[str]) -> list[tuple[str, list[str]]]:
    """[(flag, values)] in order; `--flag=value` and `--flag v1 v2` both understood."""
    out: list[tuple[str, list[str]]] = []
    for arg in args:
        if arg.startswith("--") and not _is_number(arg):
            name, eq, value = arg.partition("=")
            out.append((name, [value] if eq else []))
        elif out:
            out[-1][1].append(arg)
        else:
            raise LaunchError(f"SGLang argument {arg!r} does not follow a --flag")
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def user_value(args: list[str], flag: str) -> list[str] | None:
    """The values the user gave for `flag` (any spelling), or None."""
    found = None
    for name, values in split_flags(args):
        if canonical(name) == flag:
            found = values
    return found


@dataclass(frozen=True)
class Merged:
    args: list[str]
    conflicts: list[str]


def merge(ours: list[str], user: list[str]) -> Merged:
    """User flags as given, then ours that the user did not set; conflicts named."""
    user_flags = {canonical(name): values for name, values in split_flags(user)}
    merged = list(user)
    conflicts = []
    for name, values in split_flags(ours):
        key = canonical(name)
        if key in user_flags:
            if user_flags[key] != values:
                shown = " ".join(user_flags[key]) or "(set)"
                conflicts.append(
                    f"{key}: yours ({shown}) wins over the plan's ({' '.join(values) or '(set)'})"
                )
            continue
        merged += [name, *values]
    return Merged(merged, conflicts)


def features_env(features: list[str], plan: HostPlan) -> dict[str, str]:
    """Environment switches for the plugin (its contract is in xputune.sglang's docstring).

    tp-shared follows the shared strategy and replaces numa there. numa names one node per
    visible card, in rank order; where a rank's node is unknown it is left out (the plan
    already warns that memory is not bound).
    """
    wanted = list(dict.fromkeys(features))
    unknown = [f for f in wanted if f not in FEATURE_ENV]
    if unknown:
        raise LaunchError(f"unknown cache feature {unknown[0]!r} (known: {', '.join(FEATURE_ENV)})")
    if plan.bindings.strategy == "shared":
        wanted = [f for f in wanted if f != "numa"]
        if "tp-shared" not in wanted:
            wanted.append("tp-shared")
    env = {FEATURE_ENV[f]: "1" for f in wanted if f != "numa"}
    if "numa" in wanted:
        nodes = [r.memory_nodes for r in plan.bindings.ranks]
        if all(len(n) == 1 for n in nodes):
            env[FEATURE_ENV["numa"]] = " ".join(str(n[0]) for n in nodes)
    return env


@dataclass(frozen=True)
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]  # only what xputune sets; the process inherits the rest
    conflicts: list[str]


def build_spec(
    plan: HostPlan, user_args: list[str], features: list[str], python: str | None = None
) -> LaunchSpec:
    merged = merge(list(plan.sglang_args), user_args)
    env = dict(plan.env)
    env.update(features_env(features, plan))
    argv = [python or sys.executable, "-m", "sglang.launch_server", *merged.args]
    return LaunchSpec(argv, env, merged.conflicts)


def execute(spec: LaunchSpec) -> None:
    """Replace this process with SGLang (signals and exit status then are SGLang's own)."""
    env = dict(os.environ)
    env.update(spec.env)
    try:
        os.execvpe(spec.argv[0], spec.argv, env)
    except OSError as exc:
        raise LaunchError(f"cannot start {spec.argv[0]}: {exc.strerror}") from exc
