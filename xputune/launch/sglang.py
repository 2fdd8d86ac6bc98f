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
from xputune.launch import prefault
from xputune.launch.releases import NEWEST, RELEASES, SPELLINGS, Release
from xputune.plan.host_plan import HostPlan
from xputune.sglang.targets import TREE_CORE_ENV

# Spellings SGLang's parsers (0.5.20 to 0.5.23) accept for the flags xputune emits or reads.
ALIASES: dict[str, tuple[str, ...]] = SPELLINGS
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


def _is_zero(text: str) -> bool:
    return _is_number(text) and float(text) == 0


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


def tree_core_env(env_vars: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The radix tree core the ghost list needs, and a note where the user chose another.

    The ghost list hooks SGLang's Python tree core; from 0.5.21 SGLang walks its tree in a Rust
    core by default, which no Python hook reaches. So with the ghost list on the launcher
    selects the Python core (0.5.20's default anyway), unless the user set the variable, whose
    choice wins: the plugin then reports the ghost list off in its startup line.
    """
    if env_vars.get(FEATURE_ENV["ghost"]) != "1":
        return {}, []
    chosen = os.environ.get(TREE_CORE_ENV)
    if chosen is None:
        return {TREE_CORE_ENV: "python"}, []
    if chosen.strip().lower() == "python":
        return {}, []
    return {}, [
        f"warning: your {TREE_CORE_ENV}={chosen} keeps the ghost list off (it hooks the "
        "Python tree core; unset the variable to let the launcher select it)"
    ]


#: SGLang reads --disaggregation-ib-device only on a PD server (prefill or decode).
PD_MODES = ("prefill", "decode")
#: How SGLang (0.5.21 on) sizes L2 when no size is given (--hicache-host-memory-fraction).
AUTO_SIZING = "host-wide free memory split evenly over the ranks, blind to NUMA"


def is_pd(user_args: list[str]) -> bool:
    """Whether the user's flags make a prefill or decode server of PD disaggregation."""
    mode = user_value(user_args, "--disaggregation-mode")
    return bool(mode) and mode[-1] in PD_MODES


def _accepts(release: Release, name: str) -> bool:
    """Whether `release` takes the flag as the user spelled it (argparse takes a unique
    prefix too; for a release of the table only xputune's own flags are known)."""
    return release.accepts(name) or any(o.startswith(name) for o in release.options)


def _user_flag_lines(user: list[str], release: Release) -> list[str]:
    """Notes on the user's own flags for this release: refused, deprecated, unknown backend.
    They are passed as given either way."""
    v = release.version
    lines: list[str] = []
    names = [name for name, _ in split_flags(user)]
    for name in dict.fromkeys(names):
        canon = canonical(name)
        if (canon in SPELLINGS or not release.tested) and not _accepts(release, name):
            hint = ""
            if canon == "--attn-dp-size":
                hint = " (it came in 0.5.22; before it: --dp-size N --enable-dp-attention)"
            lines.append(f"warning: sglang {v} has no {name}: SGLang will refuse it{hint}")
    if release.attn_dp and any(canonical(n) == "--enable-dp-attention" for n in names):
        lines.append(
            f"note: --enable-dp-attention is deprecated in sglang {v}: it reads --dp-size N "
            "--enable-dp-attention as --attn-dp-size N --dp-size 1; write --attn-dp-size N "
            "(yours is passed as given)"
        )
    backend = user_value(user, "--hicache-storage-backend")
    if backend and backend[-1] not in release.storage_backends:
        lines.append(
            f"warning: sglang {v} has no storage backend {backend[-1]!r} (it lists "
            f"{', '.join(release.storage_backends)})"
        )
    return lines


def for_release(
    ours: list[str], user: list[str], release: Release, pd: list[str] = ()
) -> tuple[list[str], list[str]]:
    """Our flags as `release` takes them, next to the user's: (flags, note lines).

    Each flag in the release's own spelling, and left out (said) where it has none; `pd`
    (--disaggregation-ib-device) only on a prefill or decode server, where SGLang reads it.
    Our --hicache-size is explicit and per rank on purpose: from 0.5.21 SGLang sizes L2 itself
    when no size is given (--hicache-host-memory-fraction: AUTO_SIZING); only a user who asks
    for that fraction gets it.
    """
    notes = _user_flag_lines(user, release)
    flags = split_flags([*ours, *(pd if is_pd(user) else ())])
    given = {canonical(name) for name, _ in split_flags(user)}
    size = next((values for name, values in flags if canonical(name) == "--hicache-size"), None)
    sized_by_user = {"--hicache-size", "--hicache-ratio"} & given
    if size is not None and not sized_by_user and release.sizes_l2_itself:
        if "--hicache-host-memory-fraction" in given:
            flags = [(n, vs) for n, vs in flags if canonical(n) != "--hicache-size"]
            notes.append(
                f"note: your --hicache-host-memory-fraction sizes L2 ({AUTO_SIZING}): the "
                f"plan's --hicache-size {' '.join(size)} per rank is left out"
            )
        else:
            notes.append(
                f"note: --hicache-size {' '.join(size)} is explicit, per rank: sglang "
                f"{release.version}'s --hicache-host-memory-fraction auto-sizing "
                f"({AUTO_SIZING}) stays off"
            )
    yours = user_value(user, "--hicache-size")
    if yours and _is_zero(yours[-1]) and "--hicache-ratio" not in given and release.sizes_l2_itself:
        notes.append(
            f"note: your --hicache-size {yours[-1]} without --hicache-ratio leaves L2 to "
            f"sglang {release.version}'s --hicache-host-memory-fraction ({AUTO_SIZING}), not "
            "to the plan"
        )
    out: list[str] = []
    for name, values in flags:
        spelled = release.spelling(canonical(name))
        if spelled is None:
            notes.append(f"warning: sglang {release.version} has no {name}: left out")
            continue
        out += [spelled, *values]
    return out, notes


@dataclass(frozen=True)
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]  # only what xputune sets; the process inherits the rest
    conflicts: list[str]
    notes: tuple[str, ...] = ()  # what the release makes of the flags ("note: ...", "warning: ...")


def needs_plugin(env: dict[str, str]) -> bool:
    """Whether the environment switches on the plugin (any XPUTUNE_HICACHE_* variable)."""
    return any(name.startswith("XPUTUNE_HICACHE_") for name in env)


def build_spec(
    plan: HostPlan,
    user_args: list[str],
    features: list[str],
    python: str | None = None,
    release: Release | None = None,
) -> LaunchSpec:
    release = release or RELEASES[NEWEST]
    ours, notes = for_release(list(plan.sglang_args), user_args, release, list(plan.pd_args))
    merged = merge(ours, user_args)
    env = dict(plan.env)
    env.update(features_env(features, plan))
    core, core_notes = tree_core_env(env)
    env.update(core)
    bound = bool(user_value(merged.args, "--numa-node"))
    core_notes += prefault.launch_lines(release, env, bound, os.environ)
    argv = [python or sys.executable, "-m", "sglang.launch_server", *merged.args]
    return LaunchSpec(argv, env, merged.conflicts, (*notes, *core_notes))


def execute(spec: LaunchSpec) -> None:
    """Replace this process with SGLang (signals and exit status then are SGLang's own)."""
    env = dict(os.environ)
    env.update(spec.env)
    try:
        os.execvpe(spec.argv[0], spec.argv, env)
    except OSError as exc:
        raise LaunchError(f"cannot start {spec.argv[0]}: {exc.strerror}") from exc
