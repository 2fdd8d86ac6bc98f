"""`xputune launch sglang -- ... --device cpu`: serve from host memory, on a host without cards.

SGLang (0.5.20 through 0.5.23) serves on CPU with SGLANG_USE_CPU_ENGINE=1, and its KV "device"
pool is then host memory too. There are no cards to bind, no PCIe path to tune and nothing to
place per card, so this path skips bindings and the card profile's drift check and plans only:
  - the L2 tier from this host's memory: of 90% of it, minus 4 GiB per rank for the ranks
    themselves, half is left to SGLang's own (device) pool and half can be L2; the steps are
    powers of two in GB per rank up to that, and the middle step is the default;
  - the CPU engine's environment: SGLANG_USE_CPU_ENGINE=1 and, when there are more TP ranks
    than NUMA nodes, SGLANG_CPU_OMP_THREADS_BIND splitting the CPUs into one group per rank
    (SGLang refuses to start otherwise), and, with TP > 1, SGLANG_NCCL_SO_PATH naming no
    library (see NO_NCCL); values already in the environment win;
  - the plugin's features that apply: host-buffer always (SGLang's own host allocation calls
    cudaHostRegister and fails on CPU), kernels (sgl_kernel's copy operators are CUDA-only),
    lifo, async, count-once, ghost (with the Python tree core it hooks) and stats as asked;
    numa is dropped (no cards to follow) and tp-shared follows --strategy shared, as on a
    card host;
  - --page-size 1 (SGLang's paged allocator runs a GPU kernel), layer_first (page_first with
    Mooncake, which never runs layer_first), kernel backend;
  - with an L3 tier, its storage flags (plan/l3.py; the ranks are bound to no NIC, so Mooncake
    talks tcp unless told otherwise).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from xputune.launch.releases import NEWEST, RELEASES, Release
from xputune.launch.sglang import (
    FEATURE_ENV,
    LaunchError,
    LaunchSpec,
    for_release,
    merge,
    tree_core_env,
)
from xputune.plan.l3 import L3Plan, storage_layout

GIB = 1 << 30
# A CPU server's TP group talks over gloo. SGLang also builds a PyNccl communicator for it
# whenever libnccl loads, and then binds it to a CUDA device, which a CPU server has none of:
# the TP > 1 server dies at start. torch 2.14.1, which sglang 0.5.23 requires, has no CPU
# build, and its CUDA build brings libnccl; naming a library that does not exist is SGLang's
# own way (pynccl.py) to leave NCCL out.
NCCL_ENV = "SGLANG_NCCL_SO_PATH"
NO_NCCL = "libnccl-not-used-on-cpu.so"
GB = 10**9
OS_FRACTION = 0.10
PROCESS_BYTES_PER_RANK = 4 * GIB


@dataclass(frozen=True)
class CpuTier:
    hicache_size_gb: int
    steps: tuple[int, ...]
    per_rank_max_gb: float
    tokens_per_rank: int


def is_cpu_device(user_args_device: list[str] | None) -> bool:
    return user_args_device is not None and [v.lower() for v in user_args_device] == ["cpu"]


def cpu_room(host_bytes: int, tp: int) -> float:
    """Bytes left for SGLang's pools: the host less the OS's share and the ranks themselves."""
    return host_bytes * (1 - OS_FRACTION) - PROCESS_BYTES_PER_RANK * tp


def cpu_tier(
    host_bytes: int, tp: int, bytes_per_token: int, replicated: bool, shared: bool,
    tier: str | None,
) -> CpuTier:  # fmt: skip
    """The L2 size per rank (GB) for a CPU server on a host with `host_bytes` of memory."""
    usable = cpu_room(host_bytes, tp)
    l2_total = max(0.0, usable / 2)
    per_rank = l2_total if (shared and replicated) else l2_total / tp
    steps = []
    gb = 1
    while gb <= per_rank / GB:
        steps.append(gb)
        gb *= 2
    if not steps:
        raise LaunchError(
            f"this host's {host_bytes / GIB:.1f} GiB leave no room for a 1 GB host KV tier "
            f"per rank at TP {tp} (pass --hicache-size yourself after --)"
        )
    if tier is None:
        chosen = steps[(len(steps) - 1) // 2]
    elif tier == "max":
        chosen = steps[-1]
    elif tier == "min":
        chosen = steps[0]
    elif tier.isdigit() and int(tier) > 0:
        chosen = int(tier)
        if chosen > steps[-1]:
            raise LaunchError(f"--tier {tier}: at most {steps[-1]} GB per rank fits this host")
    else:
        raise LaunchError(f"--tier {tier!r}: expected min, max or a size in GB")
    # tokens one rank's host pool holds; MLA ranks hold the same tokens, MHA ranks their heads
    tokens = chosen * GB // max(1, bytes_per_token)
    return CpuTier(chosen, tuple(steps), per_rank / GB, tokens)


def omp_bind(cpus: list[int], tp: int) -> str:
    """SGLANG_CPU_OMP_THREADS_BIND: the CPUs split into `tp` contiguous groups, '|'-separated."""
    if len(cpus) < tp:
        raise LaunchError(f"--tp-size {tp} on CPU needs {tp} CPUs; this host has {len(cpus)}")
    size = len(cpus) // tp
    groups = [cpus[i * size : (i + 1) * size] for i in range(tp)]
    return "|".join(_cpulist(g) for g in groups)


def _cpulist(cpus: list[int]) -> str:
    return f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])


def cpu_features(features: list[str], shared: bool) -> tuple[list[str], list[str]]:
    """(features to switch on, notes): host-buffer and kernels added, numa dropped."""
    notes = []
    wanted = list(dict.fromkeys(features))
    if "numa" in wanted:
        wanted.remove("numa")
        notes.append("numa: dropped on --device cpu (no cards whose node the host KV follows)")
    if shared and "tp-shared" not in wanted:
        wanted.append("tp-shared")
    for needed in ("host-buffer", "kernels"):
        if needed not in wanted:
            wanted.append(needed)
    unknown = [f for f in wanted if f not in FEATURE_ENV or f == "numa"]
    if unknown:
        raise LaunchError(f"unknown cache feature {unknown[0]!r} (known: {', '.join(FEATURE_ENV)})")
    return wanted, notes


def build_cpu_spec(
    *,
    user_args: list[str],
    features: list[str],
    tp: int,
    tier: CpuTier,
    write_policy: str,
    numa_nodes: int,
    cpus: list[int],
    shared: bool,
    stats_dir: str | None = None,
    python: str,
    l3: L3Plan | None = None,
    release: Release | None = None,
) -> tuple[LaunchSpec, list[str]]:
    """SGLang's argv and the environment for a CPU server; notes for stderr."""
    layout = storage_layout(l3.request.backend, "kernel") if l3 is not None else "layer_first"
    ours = [
        "--tp-size", str(tp),
        "--enable-hierarchical-cache",
        "--hicache-size", str(tier.hicache_size_gb),
        "--hicache-mem-layout", layout,
        "--hicache-io-backend", "kernel",
        "--hicache-write-policy", write_policy,
        "--page-size", "1",
        *(l3.sglang_args() if l3 is not None else ()),
    ]  # fmt: skip
    fitted, release_notes = for_release(ours, user_args, release or RELEASES[NEWEST])
    merged = merge(fitted, user_args)
    chosen, notes = cpu_features(features, shared)
    env = {"SGLANG_USE_CPU_ENGINE": "1"}
    if l3 is not None:
        env.update(l3.env())
    env.update({FEATURE_ENV[f]: "1" for f in chosen})
    if stats_dir:
        env["XPUTUNE_HICACHE_STATS"] = os.path.abspath(stats_dir)
    if tp > max(1, numa_nodes) and "SGLANG_CPU_OMP_THREADS_BIND" not in os.environ:
        env["SGLANG_CPU_OMP_THREADS_BIND"] = omp_bind(cpus, tp)
    if tp > 1 and NCCL_ENV not in os.environ:
        env[NCCL_ENV] = NO_NCCL
    core, core_notes = tree_core_env(env)
    env.update(core)
    argv = [python, "-m", "sglang.launch_server", *merged.args]
    return LaunchSpec(argv, env, merged.conflicts, (*release_notes, *core_notes)), notes
