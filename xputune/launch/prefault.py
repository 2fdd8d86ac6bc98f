"""What SGLang's parallel THP prefault (0.5.23) does to where the host KV pages land.

From 0.5.23, SGLANG_HICACHE_HOST_PARALLEL_ALLOC_THREADS=N (> 0) makes SGLang's own host
allocator (srt/mem_cache/storage/mmap/mmap_allocator.py: alloc_mmap, through
HostTensorAllocator) map each pool private and anonymous, MADV_DONTFORK and MADV_HUGEPAGE,
and fault it in with memset from N worker threads of a ThreadPoolExecutor, one 2 MiB-aligned
chunk each. Unset (0, the default), the thread that builds the pool faults a shared anonymous
mapping with MADV_POPULATE_WRITE: 4 KB pages unless shmem THP is "always" or "within_size".

Placement follows from who touches first, under which policy. The workers are created by the
scheduler's thread, so they inherit its CPU affinity and memory policy, and SGLang sets both
from --numa-node (utils/numa_utils.py, 0.5.20 on): by default (SGLANG_NUMA_BIND_V2) it starts
each scheduler under `numactl --cpunodebind=N --membind=N`, a strict bind of every thread;
where the kernel refuses that it falls back to --preferred=N, then to the CPUs alone ("NUMA
memory policy not permitted": no CAP_SYS_NICE), where first touch on those CPUs places the
pages; with SGLANG_NUMA_BIND_V2=0 it sets the CPUs and MPOL_PREFERRED itself. So a bound pool
stays on its node whoever faults it, as long as it fits: past the node's free memory a strict
bind ends in the OOM killer, and the fallbacks put the rest on other nodes, silently. The
plan's per-node budget (plan/budget.py) keeps the pool within. Without --numa-node nothing
binds the scheduler, and N threads spread the pool over whichever nodes they run on.

What xputune's launcher does about it: nothing to the variable. With the plugin's host buffer
(features numa, tp-shared, host-buffer) SGLang's allocator is never called for the pools: the
buffer is bound to the node (MPOL_BIND) or interleaved before its first touch, with huge pages
(xputune/hicache/hostbuf.py), so the variable cannot move them, and a user who set it is told.
Without the plugin's buffer, placement is --numa-node's either way and the variable changes
only the page size and the prefault's speed, at a price SGLang states (a forked child cannot
see a MADV_DONTFORK buffer): the user's choice, said in what it does to placement.
"""

from __future__ import annotations

from collections.abc import Mapping

from xputune.launch.releases import Release, version_key

VARIABLE = "SGLANG_HICACHE_HOST_PARALLEL_ALLOC_THREADS"
#: The first release that reads VARIABLE.
SINCE = (0, 5, 23)
#: The plugin's switches that make xputune's buffer hold the host KV pools.
BUFFER_SWITCHES = (
    "XPUTUNE_HICACHE_NUMA",
    "XPUTUNE_HICACHE_TP_SHARED",
    "XPUTUNE_HICACHE_HOST_BUFFER",
)


def reads_variable(release: Release) -> bool:
    return version_key(release.version) >= SINCE


def threads(environ: Mapping[str, str]) -> int | None:
    """The user's setting: a thread count > 0, 0 (off), or None (unset or not a number, which
    SGLang's EnvInt refuses at start anyway)."""
    text = environ.get(VARIABLE)
    if text is None:
        return None
    try:
        return max(0, int(text.strip()))
    except ValueError:
        return None


def plugin_holds_pools(env: Mapping[str, str]) -> bool:
    """Whether the launch environment makes the plugin allocate the host KV pools."""
    return any(env.get(name) for name in BUFFER_SWITCHES)


def plan_lines(release: Release, bound: bool, environ: Mapping[str, str]) -> list[str]:
    """What `plan` says: the printed command (SGLang's own allocation), then the launcher."""
    if not reads_variable(release):
        return []
    v = release.version
    n = threads(environ)
    if bound:
        lines = [
            f"note: host pools as printed: sglang {v} runs each rank under numactl --membind to "
            "its --numa-node and faults its pool in from one thread on 4 KB pages, or with "
            f"{VARIABLE}=N from N threads that inherit the binding, on huge pages: the node "
            "holds the pages either way, so the pool must fit its L2 budget (past it: the OOM "
            "killer under --membind, other nodes where SGLang falls back to --preferred or to "
            "CPUs only)"
        ]
    else:
        lines = [
            f"note: host pools as printed: no --numa-node, so sglang {v} binds nothing; its "
            f"pools land where the faulting threads run (one, or N with {VARIABLE}=N)"
        ]
    if n and not bound:
        lines.append(
            f"warning: your {VARIABLE}={n} spreads each pool over the nodes its {n} threads "
            "run on: nothing binds them"
        )
    lines.append(
        f"note: xputune launch sglang allocates the pools itself (plugin feature numa): huge "
        f"pages bound to the node before the first touch; {VARIABLE} does not move them"
    )
    return lines


def launch_lines(release: Release, env: Mapping[str, str], bound: bool,
                 environ: Mapping[str, str]) -> list[str]:  # fmt: skip
    """What `launch sglang` says about the user's setting, where it matters."""
    n = threads(environ)
    if not n or not reads_variable(release):
        return []
    if plugin_holds_pools(env):
        return [
            f"note: your {VARIABLE}={n} does not touch the host KV pools: the plugin "
            "allocates them, bound before the first touch"
        ]
    if bound:
        return [
            f"note: {VARIABLE}={n}: {n} threads fault each host pool in as huge pages under "
            "the rank's --numa-node binding: the pages stay on the node, within its L2 budget"
        ]
    return [
        f"warning: {VARIABLE}={n} with no --numa-node: each host pool is spread over the "
        f"nodes its {n} prefault threads run on (nothing binds them)"
    ]
