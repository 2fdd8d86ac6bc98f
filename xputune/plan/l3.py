"""L3: a cluster-shared KV tier on the Mooncake store (or a local directory), for one instance.

The field report's outlook: pool the host DRAM of the decode nodes through the Mooncake store,
so prefill instances get a large tier that is still DRAM and a prefix one instance cached is a
hit for every other. SGLang 0.5.20 serves it as a HiCache storage backend
(--hicache-storage-backend mooncake|file); this module turns a topology, the L2 plan and what
the operator asked for into the numbers that decide whether it fits and whether it pays:

- prefill (the default role): the Mooncake global segment each rank mounts (SGLang divides the
  configured size by tp x pp, and each rank needs at least 16 MiB), what the host must register
  with the NIC beside L2 on each NUMA node (the whole host pool is registered for zero copy),
  in 2 MiB huge pages, and the RDMA device per rank (the NIC nearest its card, as
  MOONCAKE_DEVICE's JSON map wants it);
- decode (a node that only donates DRAM): one mooncake_client per RDMA NIC, each mounting a
  segment on that NIC's NUMA node, sized from the node's memory after its own ranks;
- both: the break-even prefix length of an L3 hit (fetch into L2, then load into L1) against
  recomputing it, from stated assumptions the operator can replace with measurements.

Pure: data in, data out. docs/field-report.md holds the figures the defaults come from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from xputune.plan.bindings import Bindings, PlanError, RankBinding
from xputune.plan.capacity import GB, Reserve
from xputune.plan.geometry import KVGeometry
from xputune.topology.model import Nic, Topology

MiB = 1 << 20
GIB = 1 << 30
HUGE_PAGE = 2 * MiB
BACKENDS = ("mooncake", "file")
PROTOCOLS = ("tcp", "rdma")
ROLES = ("prefill", "decode")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
#: Mooncake refuses a client segment below this (per rank).
MIN_SEGMENT_PER_RANK = 16 * MiB
#: SGLang's own default global segment (MOONCAKE_GLOBAL_SEGMENT_SIZE "4gb"): what a prefill
#: instance mounts when not told otherwise; the pool's bulk comes from the decode donors.
DEFAULT_PREFILL_SEGMENT = 4 * GB
MASTER_PORT = 50051
CLIENT_PORT = 50052


@dataclass(frozen=True)
class Assumptions:
    """The cost model of one L3 hit. Defaults are stated, not measured on this host.

    recompute_us_per_token: prefill cost of one token when the prefix misses. Default 28.2 us:
      the field report's GLM-5 on 8 x P800 breaks even with its L2 path at ~3K tokens
      (T(n) = 779.1 ms + 13.539 us*n over a 735 ms floor gives 13.539 + 44.1 ms / 3K).
    l2_fixed_ms, l2_gb_s: the L2 -> L1 load that follows every L3 fetch (the report's 44 ms
      L2-path fixed cost and 7.40 GB/s H2D).
    l3_latency_ms: the fixed cost of one L3 fetch (metadata lookup, RPC, first bytes).
    l3_efficiency: the share of the NIC's line rate one transfer reaches (RDMA ~0.8; Mooncake's
      TCP transport ~0.3 of the link).
    """

    recompute_us_per_token: float = 28.2
    l2_fixed_ms: float = 44.0
    l2_gb_s: float = 7.40
    l3_latency_ms: float | None = None  # None: 1 ms over rdma, 5 ms over tcp
    l3_gb_s: float | None = None  # per rank; None: from the NIC's speed
    l3_efficiency: float | None = None  # None: 0.8 over rdma, 0.3 over tcp

    def latency_ms(self, protocol: str) -> float:
        if self.l3_latency_ms is not None:
            return self.l3_latency_ms
        return 1.0 if protocol == "rdma" else 5.0

    def efficiency(self, protocol: str) -> float:
        if self.l3_efficiency is not None:
            return self.l3_efficiency
        return 0.8 if protocol == "rdma" else 0.3


@dataclass(frozen=True)
class L3Request:
    """What the operator asked for (cli/ turns flags into this; nothing here knows a flag)."""

    backend: str
    pool_gb: float | None = None  # the cluster's L3 pool (Mooncake); the directory's budget (file)
    segment_gb: float | None = None  # what this instance (prefill) or node (decode) mounts
    protocol: str | None = None  # None: rdma when every rank has an RDMA NIC, else tcp
    role: str = "prefill"
    master: str | None = None  # HOST:PORT of mooncake_master
    metadata_server: str = "P2PHANDSHAKE"
    directory: str | None = None  # the file backend's folder
    prefetch_policy: str = "timeout"
    pp: int = 1
    local_hostname: str | None = None  # the address other nodes reach this one at
    assumptions: Assumptions = field(default_factory=Assumptions)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise PlanError(f"L3 backend {self.backend!r}: choose from {', '.join(BACKENDS)}")
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise PlanError(f"L3 protocol {self.protocol!r}: choose from {', '.join(PROTOCOLS)}")
        if self.role not in ROLES:
            raise PlanError(f"role {self.role!r}: choose from {', '.join(ROLES)}")
        if self.prefetch_policy not in PREFETCH_POLICIES:
            raise PlanError(
                f"prefetch policy {self.prefetch_policy!r}: choose from "
                f"{', '.join(PREFETCH_POLICIES)}"
            )
        for name in ("pool_gb", "segment_gb"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise PlanError(f"{name.replace('_', ' ')} must be a positive number, got {value}")
        if self.pp < 1:
            raise PlanError(f"pipeline size must be at least 1, got {self.pp}")
        if self.backend == "file" and self.role == "decode":
            raise PlanError("the file backend is local to one instance: it has no decode donors")
        if self.master is not None:
            parse_address(self.master)


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets) as (host, port); PlanError when it is not one."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise PlanError(f"master address {text!r}: expected HOST:PORT")
    if any(c.isspace() for c in host) or len(host) > 253:
        raise PlanError(f"master address {text!r}: expected HOST:PORT")
    return host, int(port)


@dataclass(frozen=True)
class RankSegment:
    rank: int
    card: str
    memory_nodes: tuple[int, ...]
    segment_bytes: int  # this rank's share of the instance's global segment
    l2_bytes: int  # this rank's host pool (registered with the NIC too)
    device: str | None  # the RDMA device it transfers through


@dataclass(frozen=True)
class NodeMemory:
    """One NUMA node: the L2 and L3 bytes placed there, all of them registered memory."""

    node: int
    l2_bytes: int
    segment_bytes: int
    usable_bytes: int | None  # after the OS share and RDMA buffers (Reserve), before the ranks

    @property
    def registered_bytes(self) -> int:
        return self.l2_bytes + self.segment_bytes

    @property
    def hugepages(self) -> int:
        """2 MiB pages that would back it all (what mooncake-hicache-sizing asks for)."""
        return -(-self.registered_bytes // HUGE_PAGE)

    @property
    def fits(self) -> bool | None:
        return None if self.usable_bytes is None else self.registered_bytes <= self.usable_bytes


@dataclass(frozen=True)
class Donor:
    """A decode node's DRAM donor: one mooncake_client beside one RDMA NIC."""

    nic: str
    rdma: str | None
    numa_node: int | None
    cpus: tuple[int, ...]
    segment_bytes: int
    speed_mbps: int | None
    port: int


@dataclass(frozen=True)
class BreakEven:
    """An L3 hit of n tokens costs fetch(n) + load(n); recomputing costs n * recompute."""

    l3_gb_s: float  # per rank
    l3_latency_ms: float
    l3_us_per_token: float
    l2_us_per_token: float
    recompute_us_per_token: float
    fixed_ms: float  # l3 latency + the L2 path's fixed cost
    tokens: float | None  # None: an L3 hit never pays at these rates
    source: str  # how the bandwidth was obtained


@dataclass(frozen=True)
class L3Plan:
    request: L3Request
    protocol: str
    store_bytes_per_token: int  # what one token takes in the store (MLA: one copy per page)
    pool_bytes: int | None
    pool_tokens: int | None
    segment_bytes: int  # the instance's (or donor node's) total contribution
    ranks: tuple[RankSegment, ...]
    nodes: tuple[NodeMemory, ...]
    donors: tuple[Donor, ...]
    break_even: BreakEven | None
    notes: tuple[str, ...]
    warnings: tuple[str, ...]

    def with_note(self, note: str) -> L3Plan:
        return replace(self, notes=(*self.notes, note))

    @property
    def device_map(self) -> dict[str, str]:
        """MOONCAKE_DEVICE / extra-config device_name: tp rank -> RDMA device."""
        return {str(r.rank): r.device for r in self.ranks if r.device}

    def extra_config(self) -> dict[str, object]:
        """--hicache-storage-backend-extra-config for SGLang's MooncakeStore ({} for file)."""
        if self.request.backend != "mooncake":
            return {}
        req = self.request
        out: dict[str, object] = {
            "master_server_address": req.master or f"127.0.0.1:{MASTER_PORT}",
            "metadata_server": req.metadata_server,
            "protocol": self.protocol,
            "global_segment_size": self.segment_bytes,
        }
        if req.local_hostname:
            out["local_hostname"] = req.local_hostname
        devices = self.device_map
        if self.protocol == "rdma" and devices:
            out["device_name"] = json.dumps(devices, separators=(",", ":"))
        return out

    def sglang_args(self) -> list[str]:
        """The storage flags; the layout is the caller's (see storage_layout)."""
        req = self.request
        args = ["--hicache-storage-backend", req.backend]
        extra = self.extra_config()
        if extra:
            args += ["--hicache-storage-backend-extra-config", json.dumps(extra, sort_keys=True)]
        args += ["--hicache-storage-prefetch-policy", req.prefetch_policy]
        return args

    def env(self) -> dict[str, str]:
        if self.request.backend == "file" and self.request.directory:
            return {"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": self.request.directory}
        return {}


def storage_layout(backend: str, io_backend: str) -> str:
    """The host layout SGLang 0.5.20 really runs with this backend.

    Mooncake never runs layer_first: SGLang rewrites it to page_first (io kernel) or
    page_first_direct (io direct), so the plan asks for that layout itself instead of having
    it rewritten behind the operator's back. The file backend keeps layer_first.
    """
    if backend == "mooncake":
        return "page_first_direct" if io_backend == "direct" else "page_first"
    return "layer_first"


def store_bytes_per_token(geometry: KVGeometry) -> int:
    """Bytes one token takes in the store: MLA keys drop the rank (one copy of the latent),
    MHA keys carry it (each rank stores its own heads, even where TP exceeds the KV heads and
    two ranks hold the same head)."""
    if geometry.attention == "mla":
        return geometry.bytes_per_token
    return geometry.bytes_per_token * geometry.tp


def _protocol(req: L3Request, devices: list[str | None]) -> tuple[str, list[str]]:
    notes: list[str] = []
    if req.protocol:
        if req.protocol == "rdma" and not all(devices):
            notes.append(
                "rdma asked for, but not every rank has an RDMA NIC nearby: Mooncake picks a "
                "device itself for those ranks"
            )
        return req.protocol, notes
    if devices and all(devices):
        return "rdma", notes
    notes.append("no RDMA NIC next to every rank: Mooncake's tcp transport is used")
    return "tcp", notes


def _nic_of(topo: Topology, rdma: str | None) -> Nic | None:
    return next((n for n in topo.nics if rdma and n.rdma == rdma), None)


def break_even(
    geometry: KVGeometry, gb_s: float, protocol: str, assume: Assumptions, source: str
) -> BreakEven:
    """An L3 hit of n tokens against recomputing them, at `gb_s` per rank from L3 to L2.

    Every rank fetches its own pages (the whole latent for MLA, its own heads for MHA), so the
    per-token cost is the rank's bytes per token over the rank's bandwidth, followed by the L2
    load; a hit pays above fixed / (recompute - l3 - l2) tokens, and never where the per-token
    cost alone exceeds recomputing.
    """
    l3_us = geometry.bytes_per_token / (gb_s * 1e9) * 1e6
    l2_us = geometry.bytes_per_token / (assume.l2_gb_s * 1e9) * 1e6
    fixed = assume.latency_ms(protocol) + assume.l2_fixed_ms
    gain = assume.recompute_us_per_token - l3_us - l2_us
    return BreakEven(
        l3_gb_s=gb_s,
        l3_latency_ms=assume.latency_ms(protocol),
        l3_us_per_token=l3_us,
        l2_us_per_token=l2_us,
        recompute_us_per_token=assume.recompute_us_per_token,
        fixed_ms=fixed,
        tokens=fixed * 1000.0 / gain if gain > 0 else None,
        source=source,
    )


def _nic_break_even(
    topo: Topology,
    bindings: Bindings,
    geometry: KVGeometry,
    protocol: str,
    assume: Assumptions,
) -> BreakEven | None:
    """break_even at the bandwidth given, else at the slowest rank's NIC share."""
    if assume.l3_gb_s is not None:
        return break_even(geometry, assume.l3_gb_s, protocol, assume, "given")
    speeds = []
    for r in bindings.ranks:
        nic = _nic_of(topo, r.rdma) or next((n for n in topo.nics if n.name == r.nic), None)
        if nic is None or not nic.speed_mbps:
            return None
        speeds.append(nic.speed_mbps)
    if not speeds:
        return None
    return _share_break_even(geometry, min(speeds), _sharers(bindings), protocol, assume)


def _share_break_even(
    geometry: KVGeometry, mbps: int, sharers: int, protocol: str, assume: Assumptions
) -> BreakEven:
    """break_even at one rank's share of a NIC of `mbps` that `sharers` ranks use."""
    eff = assume.efficiency(protocol)
    gb_s = mbps / 8 / 1000 * eff / sharers
    source = f"{mbps // 1000} Gb/s NIC x {eff:.0%} ({protocol})" + (
        f" shared by {sharers} ranks" if sharers > 1 else ""
    )
    return break_even(geometry, gb_s, protocol, assume, source)


#: The NIC a trace's L3 hits are judged over when no host is read (`tiers`): the field
#: report's box, a 200 Gb/s RDMA NIC shared by two ranks, so 10 GB/s per rank at 80%.
ASSUMED_NIC_MBPS = 200_000
ASSUMED_SHARERS = 2


def trace_break_even(
    geometry: KVGeometry, gb_s: float | None = None, recompute_us: float | None = None
) -> BreakEven:
    """The break-even of a trace's L3 hits, no host read: at the bandwidth per rank given, else
    over the assumed NIC (the same arithmetic as a host's own NIC)."""
    assume = Assumptions()
    if recompute_us is not None:
        assume = replace(assume, recompute_us_per_token=recompute_us)
    if gb_s is not None:
        return break_even(geometry, gb_s, "rdma", assume, "given")
    shared = _share_break_even(geometry, ASSUMED_NIC_MBPS, ASSUMED_SHARERS, "rdma", assume)
    return replace(shared, source=f"assumed: {shared.source}")


def unbound_ranks(tp: int) -> Bindings:
    """Ranks bound to no card, node or NIC: a CPU server's (launch --device cpu)."""
    ranks = tuple(
        RankBinding(i, f"rank{i}", i, "", None, None, (), (), None, None) for i in range(tp)
    )
    return Bindings("local", ranks, ())


def _sharers(bindings: Bindings) -> int:
    """Ranks that share the busiest RDMA device (they split its bandwidth)."""
    counts: dict[str, int] = {}
    for r in bindings.ranks:
        if r.rdma:
            counts[r.rdma] = counts.get(r.rdma, 0) + 1
    return max(counts.values(), default=1)


def plan_prefill(
    topo: Topology,
    bindings: Bindings,
    geometry: KVGeometry,
    l2_bytes_per_rank: int,
    req: L3Request,
    reserve: Reserve | None = None,
    room: Mapping[int, int] | None = None,
) -> L3Plan:
    """A serving instance's L3: its ranks' segments, registered memory per node, costs.

    room: what each node's budget (plan/budget.py: free memory now, less the reserve and the
    ranks' own memory) leaves for L2 and L3 together; a node's usable memory is the smaller of
    that and the static share, so `fits` answers for the host as it is, not only as built.
    """
    reserve = reserve or Reserve()
    tp = len(bindings.ranks)
    devices = [r.rdma for r in bindings.ranks]
    protocol, notes = _protocol(req, devices) if req.backend == "mooncake" else ("local", [])
    warnings: list[str] = []
    store_bpt = store_bytes_per_token(geometry)
    pool_bytes = int(req.pool_gb * GB) if req.pool_gb else None
    ranks: list[RankSegment] = []
    segment, per_rank = prefill_segment(req, tp)
    if req.backend == "mooncake":
        notes.append(
            f"each rank mounts {per_rank / GB:.3g} GB of the pool (SGLang divides the "
            f"{segment / GB:g} GB segment by tp x pp = {tp * req.pp})"
        )
    shared = bindings.strategy == "shared"
    for r in bindings.ranks:
        l2 = 0 if shared and r.rank else l2_bytes_per_rank
        ranks.append(RankSegment(r.rank, r.card, r.memory_nodes, per_rank, l2, r.rdma))
    nodes = _node_memory(topo, ranks, reserve, shared, l2_bytes_per_rank, room)
    for n in nodes:
        if n.fits is False:
            warnings.append(
                f"node {n.node}: L2 and L3 need {n.registered_bytes / GB:,.1f} GB of registered "
                f"memory, more than its {n.usable_bytes / GB:,.1f} GB usable "  # type: ignore[operator]
                "(lower --tier or the segment)"
            )
    if protocol == "rdma":
        per_device: dict[str, int] = {}
        for r in ranks:
            if r.device:
                per_device[r.device] = per_device.get(r.device, 0) + r.l2_bytes + r.segment_bytes
        biggest = max(per_device.items(), key=lambda kv: kv[1], default=None)
        if biggest:
            notes.append(
                f"{biggest[0]} registers {biggest[1] / GB:,.1f} GB (its ranks' host pools and "
                "segments); some NICs cap registered memory (a 64 GB max_mr_size was reported): "
                "check `ibv_devinfo -v`"
            )
    pool_tokens = pool_bytes // store_bpt if pool_bytes else None
    if pool_tokens is not None and geometry.attention == "mha":
        notes.append(
            f"MHA keys carry the rank: each token takes {store_bpt:,} bytes in the pool "
            f"({geometry.tp} ranks' heads)"
        )
    be = None
    if req.backend == "mooncake":
        be = _nic_break_even(topo, bindings, geometry, protocol, req.assumptions)
    return L3Plan(
        request=req,
        protocol=protocol,
        store_bytes_per_token=store_bpt,
        pool_bytes=pool_bytes,
        pool_tokens=pool_tokens,
        segment_bytes=segment,
        ranks=tuple(ranks),
        nodes=nodes,
        donors=(),
        break_even=be,
        notes=tuple(notes),
        warnings=tuple(warnings),
    )


def prefill_segment(req: L3Request, tp: int) -> tuple[int, int]:
    """(the instance's global segment, each rank's share) in bytes; (0, 0) for the file
    backend, which registers nothing. Known before L2 is sized: plan/budget.py takes each
    node's share of it off what the node can give L2."""
    if req.backend != "mooncake":
        if req.directory is None:
            raise PlanError("the file backend needs a directory (the L3 folder)")
        return 0, 0
    segment = int(req.segment_gb * GB) if req.segment_gb else DEFAULT_PREFILL_SEGMENT
    per_rank = segment // (tp * req.pp)
    if per_rank < MIN_SEGMENT_PER_RANK:
        raise PlanError(
            f"a {segment / GB:g} GB segment gives each of {tp * req.pp} ranks "
            f"{per_rank / MiB:.1f} MiB; Mooncake needs at least 16 MiB per rank"
        )
    pool_bytes = int(req.pool_gb * GB) if req.pool_gb else None
    if pool_bytes is not None and segment > pool_bytes:
        raise PlanError(
            f"this instance's segment ({segment / GB:g} GB) is larger than the whole "
            f"pool ({pool_bytes / GB:g} GB)"
        )
    return segment, per_rank


def segments_by_node(bindings: Bindings, req: L3Request) -> dict[int, int]:
    """The bytes of L3 segment a prefill instance registers on each node: each rank's share
    spread evenly over its memory nodes, as _node_memory places it."""
    if req.role != "prefill":
        return {}
    _, per_rank = prefill_segment(req, len(bindings.ranks))
    out: dict[int, float] = {}
    for r in bindings.ranks:
        for node in r.memory_nodes:
            out[node] = out.get(node, 0) + per_rank / len(r.memory_nodes)
    return {node: int(b) for node, b in out.items()}


def _node_memory(
    topo: Topology,
    ranks: list[RankSegment],
    reserve: Reserve,
    shared: bool,
    l2_per_rank: int,
    room: Mapping[int, int] | None = None,
) -> tuple[NodeMemory, ...]:
    """L2 and L3 bytes per node: a rank's pages spread evenly over its memory nodes; a shared
    L2 buffer interleaved over every node with memory."""
    l2: dict[int, float] = {}
    seg: dict[int, float] = {}
    if shared:
        with_memory = [n.id for n in topo.numa_nodes if n.memory_total_bytes]
        for node in with_memory:
            l2[node] = l2.get(node, 0) + l2_per_rank / len(with_memory)
    for r in ranks:
        spread = r.memory_nodes or ()
        for node in spread:
            if not shared:
                l2[node] = l2.get(node, 0) + r.l2_bytes / len(spread)
            seg[node] = seg.get(node, 0) + r.segment_bytes / len(spread)
    out = []
    for node in sorted(set(l2) | set(seg)):
        total = next((n.memory_total_bytes for n in topo.numa_nodes if n.id == node), None)
        rank_count = sum(1 for r in ranks if node in r.memory_nodes)
        usable = (
            None
            if total is None
            else max(0, reserve.node_usable(total) - rank_count * reserve.process_bytes_per_card)
        )
        if room is not None and node in room:
            usable = room[node] if usable is None else min(usable, room[node])
        out.append(NodeMemory(node, int(l2.get(node, 0)), int(seg.get(node, 0)), usable))
    return tuple(out)


def plan_decode(
    topo: Topology,
    bindings: Bindings | None,
    geometry: KVGeometry | None,
    req: L3Request,
    reserve: Reserve | None = None,
) -> L3Plan:
    """A decode node that donates DRAM: one mooncake_client per RDMA NIC, on the NIC's node.

    Each donor's segment is what its node can spare after the OS share, RDMA buffers and the
    decode ranks bound there; --l3-segment-gb caps the node's total, split in proportion.
    The donors do not depend on the model: without a geometry (`launch l3-donors` takes no
    model) the pool's size in tokens is unknown (store_bytes_per_token 0, pool_tokens None).
    They come first on a decode node (donating is what it is for): `plan --role decode`
    takes their segments off each node's L2 budget (plan/budget.py), and `launch l3-donors`
    mounts the same sizes.
    """
    reserve = reserve or Reserve()
    nics = [n for n in topo.nics if n.rdma and n.operstate in (None, "up")]
    if not nics:
        raise PlanError(
            "no RDMA NIC that is up on this host: a DRAM donor serves its segment through one"
        )
    ranks_on: dict[int, int] = {}
    for r in bindings.ranks if bindings else ():
        for node in r.memory_nodes:
            ranks_on[node] = ranks_on.get(node, 0) + 1
    spare: list[int] = []
    warnings: list[str] = []
    notes: list[str] = []
    nics_on: dict[int | None, int] = {}
    for nic in nics:
        nics_on[nic.numa_node] = nics_on.get(nic.numa_node, 0) + 1
    for nic in nics:
        node = topo.node(nic.numa_node) if nic.numa_node is not None else None
        if node is None or node.memory_total_bytes is None:
            warnings.append(f"{nic.name}: NUMA node unknown; its donor is left out")
            spare.append(0)
            continue
        free = reserve.node_usable(node.memory_total_bytes)
        free -= ranks_on.get(node.id, 0) * reserve.process_bytes_per_card
        spare.append(max(0, free) // nics_on[nic.numa_node])
    total_spare = sum(spare)
    if total_spare <= 0:
        raise PlanError("no memory left to donate on the NICs' nodes after the reserve")
    wanted = int(req.segment_gb * GB) if req.segment_gb else total_spare
    if wanted > total_spare:
        warnings.append(
            f"asked to donate {wanted / GB:,.0f} GB, but the NICs' nodes can spare "
            f"{total_spare / GB:,.0f} GB: donating that"
        )
        wanted = total_spare
    donors = []
    for i, (nic, room) in enumerate(zip(nics, spare, strict=True)):
        if room <= 0:
            continue
        # whole GiB: mooncake_client reads its --global_segment_size "NGB" as N x 2^30 bytes
        share = wanted * room // total_spare // GIB * GIB
        if share < MIN_SEGMENT_PER_RANK:
            continue
        node = topo.node(nic.numa_node) if nic.numa_node is not None else None
        donors.append(
            Donor(
                nic.name, nic.rdma, nic.numa_node, node.cpus if node else (), share,
                nic.speed_mbps, CLIENT_PORT + i,
            )
        )  # fmt: skip
    idle = [
        n.id
        for n in topo.numa_nodes
        if n.memory_total_bytes and n.id not in {d.numa_node for d in donors}
    ]
    if idle:
        notes.append(
            f"nodes {' '.join(map(str, idle))} have no RDMA NIC: their memory is not donated "
            "(a donor there would cross the NUMA interconnect on every transfer)"
        )
    protocol = req.protocol or "rdma"
    segment = sum(d.segment_bytes for d in donors)
    store_bpt = store_bytes_per_token(geometry) if geometry is not None else 0
    return L3Plan(
        request=req,
        protocol=protocol,
        store_bytes_per_token=store_bpt,
        pool_bytes=int(req.pool_gb * GB) if req.pool_gb else None,
        pool_tokens=int(req.pool_gb * GB) // store_bpt if req.pool_gb and store_bpt else None,
        segment_bytes=segment,
        ranks=(),
        nodes=tuple(
            NodeMemory(d.numa_node, 0, d.segment_bytes, None)
            for d in donors
            if d.numa_node is not None
        ),
        donors=tuple(donors),
        break_even=None,
        notes=tuple(notes),
        warnings=tuple(warnings),
    )


#: A donor's --host when the plan was not told this node's address: a shell parameter that
#: stops the command with this message until MOONCAKE_HOST is set (a renderer double-quotes
#: the word that holds it, so the shell expands it).
HOST_VARIABLE = "${MOONCAKE_HOST:?set MOONCAKE_HOST to the address other nodes reach this one at}"


def donor_command(plan: L3Plan, donor: Donor) -> list[str]:
    """The mooncake_client command that mounts a donor's segment, bound to its NIC's node."""
    req = plan.request
    hostname = req.local_hostname or HOST_VARIABLE
    cmd: list[str] = []
    if donor.numa_node is not None:
        cmd += ["numactl", f"--cpunodebind={donor.numa_node}", f"--membind={donor.numa_node}"]
    cmd += [
        "mooncake_client",
        f"--master_server_address={req.master or f'127.0.0.1:{MASTER_PORT}'}",
        f"--metadata_server={req.metadata_server}",
        f"--protocol={plan.protocol}",
        f"--global_segment_size={donor.segment_bytes // GIB}GB",  # Mooncake's GB is 2^30
        f"--host={hostname}",
        f"--port={donor.port}",
    ]
    if plan.protocol == "rdma" and donor.rdma:
        cmd.append(f"--device_names={donor.rdma}")
    return cmd


def donor_size_text(segment_bytes: float) -> str:
    """A donor's segment in the unit its command line gives it: mooncake_client reads
    --global_segment_size=NGB as N x 2^30 bytes, so "146.029 GB" beside "136GB" read as two
    sizes. `segment_bytes` is whole GiB (plan_decode makes it so; a JSON document's rounded
    segment_gb times 1e9 comes back to it)."""
    gib = round(segment_bytes / GIB)
    return f"{gib:,} GiB (--global_segment_size={gib}GB: Mooncake's GB is 2^30 bytes)"


def master_command(master: str | None) -> list[str]:
    """mooncake_master listening on the master address's port (one per cluster)."""
    port = parse_address(master)[1] if master else MASTER_PORT
    return ["mooncake_master", f"--rpc_port={port}"]


def l3_document(plan: L3Plan) -> dict[str, object]:
    """The "l3" part of `plan --format json` (schema "plan")."""
    req = plan.request
    be = plan.break_even
    doc: dict[str, object] = {
        "backend": req.backend,
        "role": req.role,
        "protocol": plan.protocol,
        "master": req.master,
        "pool_gb": req.pool_gb,
        "pool_tokens": plan.pool_tokens,
        "store_bytes_per_token": plan.store_bytes_per_token,
        "segment_gb": round(plan.segment_bytes / GB, 3),
        "ranks": [
            {
                "rank": r.rank,
                "card": r.card,
                "memory_nodes": list(r.memory_nodes),
                "segment_gb": round(r.segment_bytes / GB, 3),
                "l2_gb": round(r.l2_bytes / GB, 3),
                "rdma": r.device,
            }
            for r in plan.ranks
        ],
        "nodes": [
            {
                "node": n.node,
                "l2_gb": round(n.l2_bytes / GB, 3),
                "segment_gb": round(n.segment_bytes / GB, 3),
                "registered_gb": round(n.registered_bytes / GB, 3),
                "hugepages_2m": n.hugepages,
                "usable_gb": None if n.usable_bytes is None else round(n.usable_bytes / GB, 3),
                "fits": n.fits,
            }
            for n in plan.nodes
        ],
        "device_map": plan.device_map,
        "extra_config": plan.extra_config(),
        "break_even": None
        if be is None
        else {
            "tokens": None if be.tokens is None else round(be.tokens),
            "never_pays": be.tokens is None,
            "l3_gb_s_per_rank": round(be.l3_gb_s, 3),
            "l3_source": be.source,
            "l3_latency_ms": be.l3_latency_ms,
            "l3_us_per_token": round(be.l3_us_per_token, 3),
            "l2_us_per_token": round(be.l2_us_per_token, 3),
            "recompute_us_per_token": be.recompute_us_per_token,
            "fixed_ms": round(be.fixed_ms, 3),
        },
        "notes": list(plan.notes),
        "warnings": list(plan.warnings),
    }
    if plan.donors:
        doc["donors"] = [
            {
                "nic": d.nic,
                "rdma": d.rdma,
                "numa_node": d.numa_node,
                "segment_gb": round(d.segment_bytes / GB, 3),
                "port": d.port,
                "command": donor_command(plan, d),
            }
            for d in plan.donors
        ]
        doc["master_command"] = master_command(req.master)
    return doc
