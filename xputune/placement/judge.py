"""The verdict on one rank: where its pool's pages are, on which page size, where its CPUs are,
set against the plan (intent.py), with the fix for each difference.

Drift, exit 1 (cli/exits.py DIFFERENCE), is a fact read from the kernel that contradicts the
plan: pool pages off the planned node (less than ON_NODE of them on it), a shared pool whose
interleave misses a planned node or spills past them, small pages where huge ones were asked
for (less than HUGE of the part of the pool that whole, aligned 2 MiB pages can cover: a pool
under 2 MiB can have none, which is a note), CPUs that cannot run on the planned
node (none of them there), or a CPU binding SGLang was asked for (--numa-node) that did not
hold. What cannot be read (the pool not found, no numa_maps line, no plan) is unknown with a
warning, never drift: a reading that failed proves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xputune.host.values import format_cpulist
from xputune.placement.intent import Intent
from xputune.placement.pool import Pool
from xputune.placement.procs import RankId
from xputune.topology.model import Settings

#: Least share of the resident pool on the planned node for it to count as on it.
ON_NODE = 0.99
#: Least share of the resident pool on huge pages where huge pages were asked for.
HUGE = 0.90
#: Least share of its fair part (1/len(nodes)) an interleaved pool must have on each node.
FAIR = 0.5
#: A PMD-mapped transparent huge page (x86_64, arm64 with 4 KB granules).
HUGE_PAGE = 2 << 20


@dataclass(frozen=True)
class Finding:
    kind: str  # "off-node", "interleave", "small-pages", "cpus-off-node", "cpus-unbound"
    text: str
    fix: str


@dataclass(frozen=True)
class Facts:
    """What was read about one rank's process."""

    pid: int
    rank: RankId
    title: str
    cpus: tuple[int, ...] | None  # Cpus_allowed_list
    mems: tuple[int, ...] | None  # Mems_allowed_list
    pool: Pool | None


@dataclass
class Verdict:
    """One rank, judged."""

    facts: Facts
    intent: Intent
    cpus_on_node: str | None = None  # "all", "some", "none"; None: unknown
    node_cpus: tuple[int, ...] = ()
    bytes_per_node: dict[int, int] | None = None
    resident: int | None = None
    huge_share: float | None = None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.findings:
            return "drift"
        if self.facts.pool is None or self.intent.mode == "unknown" or self.resident is None:
            return "unknown"
        return "ok"

    def share(self, node: int) -> float | None:
        if not self.resident or self.bytes_per_node is None:
            return None
        return self.bytes_per_node.get(node, 0) / self.resident


def _nodes(shares: dict[int, int], total: int) -> str:
    ordered = sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{100 * b / total:.0f}% on node {n}" for n, b in ordered if b)


def cpus_on(allowed: tuple[int, ...], node_cpus: tuple[int, ...]) -> str:
    inside = set(allowed) & set(node_cpus)
    if not inside:
        return "none"
    return "all" if set(allowed) <= set(node_cpus) else "some"


def _off_node(v: Verdict, node: int, settings: Settings | None) -> Finding | None:
    share = v.share(node)
    if share is None or share >= ON_NODE or v.bytes_per_node is None or v.resident is None:
        return None
    facts, pool = v.facts, v.facts.pool
    assert pool is not None
    where = _nodes(v.bytes_per_node, v.resident)
    policy = pool.numa.policy if pool.numa is not None else None
    text = f"pool {where}; planned node {node}"
    if policy is not None:
        text += f" (policy {policy})"
    away = sorted(n for n, b in v.bytes_per_node.items() if b and n != node)
    move = f"`migratepages {facts.pid} {format_cpulist(away)} {node}` moves the pages back"
    if facts.mems is not None and node not in facts.mems:
        fix = (f"the rank may not allocate on node {node} (Mems_allowed_list "
               f"{format_cpulist(facts.mems)}): allow it in the cpuset of the server's cgroup "
               "(cpuset.mems), then restart the server")  # fmt: skip
    elif policy is None or policy.mode in ("default", "local"):
        fix = ("nothing bound the pool (policy default: first touch placed it): launch with "
               "`xputune launch sglang` (its numa feature binds each rank's pool before the "
               f"first touch); now, {move}")  # fmt: skip
    elif policy.mode in ("prefer", "prefer (many)") and node in policy.nodes:
        fix = (f"preferred, not bound: the kernel took pages elsewhere when node {node} ran "
               "short at fault time (`numactl --preferred`, SGLang's --numa-node); bind the "
               "pool instead (`xputune launch sglang`: MPOL_BIND before the first touch) and "
               f"leave node {node} room (`xputune plan` budgets it); now, {move}")  # fmt: skip
    elif node not in policy.nodes:
        fix = (f"the pool is bound to node {format_cpulist(policy.nodes)}, not {node}: the "
               "rank's XPUTUNE_HICACHE_NUMA or --numa-node disagrees with the plan; relaunch "
               f"with `xputune launch sglang`; now, {move}")  # fmt: skip
    else:
        moved = ""
        if settings is not None and settings.numa_balancing:
            moved = ", or NUMA balancing moved them (kernel.numa_balancing=1: `xputune apply`"
            moved += " turns it off)"
        fix = (f"bound to node {node}, yet the pages sit elsewhere: they were faulted in "
               f"before the bind, or the cpuset's mems changed since{moved}; {move}")  # fmt: skip
    return Finding("off-node", text, fix)


def _interleave(v: Verdict, nodes: tuple[int, ...]) -> Finding | None:
    if not v.resident or v.bytes_per_node is None or not nodes:
        return None
    fair = v.resident / len(nodes)
    outside = {n: b for n, b in v.bytes_per_node.items() if b and n not in nodes}
    thin = [n for n in nodes if v.bytes_per_node.get(n, 0) < FAIR * fair]
    if not outside and not thin:
        return None
    where = _nodes(v.bytes_per_node, v.resident)
    text = f"shared pool {where}; planned interleave over nodes {format_cpulist(nodes)}"
    fix = ("interleave must be set before the first touch (hicache/tpshared.py sets it on TP "
           "rank 0): restart the server with `xputune launch sglang --strategy shared`; "
           "migratepages cannot interleave")  # fmt: skip
    return Finding("interleave", text, fix)


def reachable(start: int, end: int, huge: int = HUGE_PAGE) -> float:
    """The share of [start, end) that whole, aligned huge pages can cover: a THP is
    PMD-mapped only on a 2 MiB boundary, so a pool smaller than that can have none."""
    first = -(-start // huge) * huge
    last = end // huge * huge
    return max(0, last - first) / (end - start) if end > start else 0.0


def _small_pages(v: Verdict, settings: Settings | None) -> Finding | None:
    pool = v.facts.pool
    if v.intent.huge is not True or pool is None or v.huge_share is None:
        return None
    room = 1.0 if pool.kind == "hugetlb" else reachable(pool.smaps.start, pool.smaps.end)
    if room == 0:
        v.notes.append(f"the pool ({pool.smaps.size // 1024} KB) holds no whole aligned huge "
                       "page: huge pages were planned, none can back it")  # fmt: skip
        return None
    if v.huge_share >= HUGE * room:
        return None
    page = pool.smaps.sizes.get("KernelPageSize", 4096) // 1024
    if v.huge_share == 0:
        text = f"pool on {page} KB pages only; huge pages were planned"
    else:
        text = (f"pool {100 * v.huge_share:.0f}% on huge pages, the rest on {page} KB pages; "
                "huge pages were planned")  # fmt: skip
    if v.intent.huge_via == "hugetlb":
        fix = ("hugetlbfs pages were asked for (SGLANG_HUGEPAGE_SIZE) and SGLang fell back to "
               "small pages (its log says 'Hugepage mmap ... failed'): reserve enough on the "
               "node (nodeN/hugepages/hugepages-2048kB/nr_hugepages), then restart the "
               "server")  # fmt: skip
        return Finding("small-pages", text, fix)
    shmem = pool.kind == "shmem"
    enabled = settings.thp_shmem_enabled if settings is not None and shmem else (
        settings.thp_enabled if settings is not None else None)  # fmt: skip
    knob = "thp.shmem_enabled" if shmem else "thp.enabled"
    if enabled == "never" or enabled == "deny":
        fix = (
            f"transparent huge pages are off here ({knob} [{enabled}]): `xputune apply` "
            "sets it, then restart the server (pages already faulted in stay small)"
        )
    elif "hg" not in pool.smaps.vm_flags and enabled != "always":
        fix = ("the pool was never advised MADV_HUGEPAGE (VmFlags lacks hg) while THP is "
               f"[{enabled or 'unknown'}]: launch with `xputune launch sglang` (its host "
               "buffer advises it before the first touch)")  # fmt: skip
    else:
        defrag = settings.thp_defrag if settings is not None else None
        fix = ("huge pages could not be had when the pool was faulted in (memory too "
               f"fragmented; thp.defrag [{defrag or 'unknown'}]): compact memory (`echo 1 > "
               "/proc/sys/vm/compact_memory`) and restart the server; `xputune check` shows "
               "the THP knobs")  # fmt: skip
    return Finding("small-pages", text, fix)


def _cpus(v: Verdict) -> Finding | None:
    node, allowed = v.intent.cpu_node, v.facts.cpus
    if node is None or allowed is None or not v.node_cpus or v.cpus_on_node is None:
        return None
    pid = v.facts.pid
    mine = format_cpulist(v.node_cpus)
    if v.cpus_on_node == "none":
        return Finding(
            "cpus-off-node",
            f"CPUs {format_cpulist(allowed)}, none on node {node} (CPUs {mine})",
            f"`taskset -apc {mine} {pid}` moves it now; launch with --numa-node (`xputune "
            "launch sglang` passes it) to keep it there",
        )
    if v.cpus_on_node == "some" and v.intent.cpus_bound:
        return Finding(
            "cpus-unbound",
            f"CPUs {format_cpulist(allowed)}: --numa-node asked for node {node} (CPUs {mine}) "
            "and the binding did not hold",
            f"`taskset -apc {mine} {pid}`; SGLang's log says why its binding failed",
        )
    if v.cpus_on_node == "some":
        v.notes.append(
            f"CPUs {format_cpulist(allowed)} are not bound to node {node} (no --numa-node)"
        )
    return None


def judge(
    facts: Facts, intent: Intent, node_cpus: dict[int, tuple[int, ...]], settings: Settings | None
) -> Verdict:
    """The rank's figures and findings (see the module's docstring)."""
    v = Verdict(facts, intent)
    if intent.cpu_node is not None:
        v.node_cpus = node_cpus.get(intent.cpu_node, ())
        if facts.cpus is not None and v.node_cpus:
            v.cpus_on_node = cpus_on(facts.cpus, v.node_cpus)
    pool = facts.pool
    if pool is not None:
        if pool.numa is not None and pool.numa.pages:
            v.bytes_per_node = pool.numa.bytes_per_node
            v.resident = sum(v.bytes_per_node.values())
        elif pool.smaps.resident == 0:
            v.notes.append("no page of the pool is resident yet")
        if pool.smaps.resident:
            v.huge_share = min(1.0, pool.smaps.huge / pool.smaps.resident)
    found: list[Finding | None] = [_cpus(v)]
    if pool is not None and intent.mode in ("bind", "local") and intent.nodes:
        found.insert(0, _off_node(v, intent.nodes[0], settings))
    elif pool is not None and intent.mode == "interleave":
        found.insert(0, _interleave(v, intent.nodes))
    found.insert(1, _small_pages(v, settings))
    v.findings = [f for f in found if f is not None]
    return v


__all__ = [
    "FAIR",
    "HUGE",
    "ON_NODE",
    "Facts",
    "Finding",
    "Verdict",
    "cpus_on",
    "judge",
    "reachable",
]
