"""What was planned for a rank: the node its host KV pool should sit on (or the nodes it should
interleave over), whether huge pages were asked for, whether its CPUs were bound.

Read from what started the server, nearest to the pool first:
  1. the plugin's switches in the rank's environment (xputune.sglang's contract, read with
     its own reader, sglang/config.py): XPUTUNE_HICACHE_TP_SHARED=1 interleaves one shared
     pool over the nodes the rank may use; XPUTUNE_HICACHE_NUMA="1 1 3 3 ..." binds the pool
     of local card i to the i-th node; either, and XPUTUNE_HICACHE_HOST_BUFFER=1, asks for
     transparent huge pages (hicache/hostbuf.py, tpshared.py: MADV_HUGEPAGE before the first
     touch). SGLang's own huge pages count too: SGLANG_HUGEPAGE_SIZE (hugetlbfs, 0.5.23) and
     SGLANG_HICACHE_HOST_PARALLEL_ALLOC_THREADS > 0 (a private THP mapping, 0.5.23);
  2. SGLang's --numa-node on the server's command line (the i-th value for GPU i: it binds
     the scheduler's CPUs there and prefers that node for its memory);
  3. the card the rank drives (CUDA/XPU_VISIBLE_DEVICES[gpu id], else bus order) and that
     card's node in the topology: nothing binds the pool, the process's first touch places
     it, and the card's node is where it pays to be;
  4. a host with one NUMA node: that node.
Otherwise the plan is unknown and the rank is reported, not judged.

The rank's environment is its own /proc/PID/environ when that holds variables; a scheduler
that retitled itself has blanked it (procs.py), so the nearest ancestor's intact environ is
read instead, which is where the launcher put the variables (the schedulers inherit them).
"""

from __future__ import annotations

from dataclasses import dataclass

from xputune.errors import XputuneError
from xputune.host.procinfo import environ_vars
from xputune.launch.sglang import user_value
from xputune.placement.procs import Processes, RankId
from xputune.sglang.config import PREFIX, ConfigError, PluginConfig
from xputune.topology.model import Topology

NUMA_ENV = PREFIX + "NUMA"
SHARED_ENV = PREFIX + "TP_SHARED"
#: SGLang 0.5.23's own huge-page switches for host pools (mem_cache/storage/mmap).
HUGETLB_ENV = "SGLANG_HUGEPAGE_SIZE"
PARALLEL_ENV = "SGLANG_HICACHE_HOST_PARALLEL_ALLOC_THREADS"
VISIBLE_ENV = ("CUDA_VISIBLE_DEVICES", "XPU_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Environ:
    """A rank's environment variables and where they were read."""

    vars: dict[str, str]
    pid: int | None  # whose environ; None: none readable
    own: bool  # the rank's own (not an ancestor's)

    @property
    def where(self) -> str:
        if self.pid is None:
            return "no readable environment"
        return "its environment" if self.own else f"the environment of pid {self.pid}"


@dataclass(frozen=True)
class Intent:
    """The plan for one rank's pool and CPUs."""

    mode: str  # "bind" (one node), "interleave" (nodes), "local" (first touch), "unknown"
    nodes: tuple[int, ...]  # the node (bind, local) or nodes (interleave); () when unknown
    huge: bool | None  # transparent or hugetlb pages asked for; None when unknown
    huge_via: str  # "thp" (MADV_HUGEPAGE), "hugetlb" (SGLANG_HUGEPAGE_SIZE) or ""
    cpus_bound: bool  # --numa-node asked SGLang to bind the rank's CPUs
    cpu_node: int | None  # the node its CPUs belong on (None: unknown)
    source: str  # where the plan was read, in words

    @property
    def node(self) -> int | None:
        return self.nodes[0] if self.mode in ("bind", "local") and self.nodes else None


def environ(procs: Processes, pid: int, top: int) -> Environ:
    """The rank's variables: its own environ, else the nearest intact one up to `top`."""
    chain = [pid, *procs.ancestors(pid)]
    if top in chain:
        chain = chain[: chain.index(top) + 1]
    for here in chain:
        data = procs.reader.data(f"/proc/{here}/environ")
        found = environ_vars(data or b"")
        if found:
            return Environ(found, here, here == pid)
    return Environ({}, None, False)


def server_argv(procs: Processes, pid: int, top: int) -> tuple[str, ...]:
    """The server's flags: the argv of the nearest process from the rank up to `top` that ran
    SGLang's launcher (python -m sglang.launch_server ... --model-path M)."""
    chain = [pid, *procs.ancestors(pid)]
    if top in chain:
        chain = chain[: chain.index(top) + 1]
    for here in chain:
        argv = procs.argv(here)
        if any(a.startswith("--model") for a in argv) or "sglang.launch_server" in argv:
            return argv
    return procs.argv(top)


def _flags(argv: tuple[str, ...]) -> list[str]:
    """The --flag part of an argv (after `python -m sglang.launch_server`)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--"):
            return list(argv[i:])
    return []


def flag(argv: tuple[str, ...], name: str) -> list[str] | None:
    """The values of SGLang flag `name` (any spelling) on a server's command line; None when
    absent or when the line cannot be read as flags."""
    try:
        return user_value(_flags(argv), name)
    except XputuneError:
        return None


def _int_flag(argv: tuple[str, ...], name: str, default: int) -> int:
    values = flag(argv, name)
    text = values[-1] if values else ""
    return int(text) if text.isdigit() and len(text) < 7 else default


def gpu_index(argv: tuple[str, ...], rank: RankId) -> int:
    """The GPU id SGLang gives a TP rank: base_gpu_id + (rank within this node) * step."""
    tp = _int_flag(argv, "--tp-size", 1)
    nnodes = max(1, _int_flag(argv, "--nnodes", 1))
    per_node = max(1, tp // nnodes)
    return _int_flag(argv, "--base-gpu-id", 0) + (rank.tp % per_node) * max(
        1, _int_flag(argv, "--gpu-id-step", 1)
    )


def switches(env: Environ, warnings: list[str]) -> PluginConfig:
    """The plugin's switches in `env`, read by the plugin's own reader (sglang/config.py); the
    defaults (all off), with a warning, where they are not ones the plugin would run with."""
    ours = {k: v for k, v in env.vars.items() if k.startswith(PREFIX)}
    try:
        return PluginConfig.from_env(ours)
    except ConfigError as exc:
        warnings.append(f"{env.where}: {exc}; the plugin's switches taken as unknown")
        return PluginConfig()


def huge_asked(cfg: PluginConfig, env: dict[str, str]) -> str:
    """How the pool's allocator asks for huge pages: "thp", "hugetlb", or "" (it does not;
    see the module's docstring)."""
    if cfg.host_alloc:
        return "thp"
    if env.get(HUGETLB_ENV, "").strip().upper() in ("2MB", "1GB"):
        return "hugetlb"
    threads = env.get(PARALLEL_ENV, "").strip()
    return "thp" if threads.isdigit() and int(threads) > 0 else ""


def _card_node(env: dict[str, str], index: int, topo: Topology | None) -> tuple[int, str] | None:
    """(node, source) of the card at visible position `index`, from the topology."""
    if topo is None or not topo.cards:
        return None
    visible = next(((name, env[name]) for name in VISIBLE_ENV if env.get(name)), None)
    if visible is not None:
        items = [v.strip() for v in visible[1].split(",")]
        if index >= len(items) or not items[index].isdigit():
            return None
        vendor = int(items[index])
        card = next((c for c in topo.cards if c.index == vendor), None)
        where = f"{visible[0]}[{index}] = card {vendor}"
    else:
        card = topo.cards[index] if index < len(topo.cards) else None
        where = f"card {index} in bus order"
    if card is None or card.numa_node is None:
        return None
    return card.numa_node, f"the node of {card.name} ({where}), from the topology"


def plan(
    env: Environ,
    argv: tuple[str, ...],
    rank: RankId,
    topo: Topology | None,
    mems_allowed: tuple[int, ...] | None,
    warnings: list[str],
) -> Intent:
    """The intent for one rank (see the module's docstring for the order)."""
    vars_ = env.vars
    cfg = switches(env, warnings)
    index = gpu_index(argv, rank)
    via = huge_asked(cfg, vars_)
    huge = bool(via) if env.pid is not None else None
    numa_values = flag(argv, "--numa-node") or []
    asked = numa_values[index] if index < len(numa_values) else ""
    numa_node = int(asked) if asked.isdigit() and len(asked) < 5 else None
    card = _card_node(vars_, index, topo)
    only = topo.numa_nodes[0].id if topo is not None and len(topo.numa_nodes) == 1 else None
    elsewhere = card[0] if card is not None else only

    def intent(mode: str, nodes: tuple[int, ...], source: str) -> Intent:
        """CPUs belong where --numa-node put them, else beside the pool, else the card."""
        if numa_node is not None:
            cpus: int | None = numa_node
        else:
            cpus = nodes[0] if mode in ("bind", "local") else elsewhere
        return Intent(mode, nodes, huge, via, numa_node is not None, cpus, source)

    if cfg.tp_shared:
        every = tuple(n.id for n in topo.numa_nodes) if topo is not None else ()
        return intent("interleave", mems_allowed or every, f"{SHARED_ENV}=1 in {env.where}")
    if cfg.numa_nodes:
        nodes = cfg.numa_nodes
        if index < len(nodes):
            return intent("bind", (nodes[index],), f"{NUMA_ENV}[{index}] in {env.where}")
        warnings.append(f"{NUMA_ENV}={' '.join(map(str, nodes))!r} in {env.where} lists no "
                        f"node for GPU {index}")  # fmt: skip
    if numa_node is not None:
        return intent("bind", (numa_node,), f"--numa-node[{index}] of the server")
    if card is not None:
        return intent("local", (card[0],), card[1])
    if only is not None:
        return intent("local", (only,), "the host's only NUMA node")
    return intent("unknown", (), "unknown")


__all__ = ["Environ", "Intent", "environ", "flag", "gpu_index", "huge_asked", "plan", "switches"]
