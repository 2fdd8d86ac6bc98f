"""XPUTUNE_HICACHE_NUMA / _TP_SHARED / _HOST_BUFFER: the host KV buffer is xputune's (2.4, 2.7).

SGLang (0.5.20 through 0.5.23) allocates host pools through ALLOC_MEMORY_FUNCS[device] (a
module-level defaultdict, so it is patched directly, not through the hook registry): a plain
mmap, then cudaHostRegister. The replacement allocates the same shape and dtype as:
  - NUMA: an xputune HostBuffer (2 MiB-aligned anonymous mmap, MADV_HUGEPAGE, mbind to the
    card's node, faulted in, then registered: the order docs/field-report.md, 2.4 gives), the
    node being the i-th value of XPUTUNE_HICACHE_NUMA for local card i;
  - TP_SHARED (MLA pools only, whose host KV is identical on every TP rank): one
    TpSharedBuffer per TP group in /dev/shm, interleaved over the nodes; only TP rank 0 runs
    the D2H copies into it, every rank reads it. The pool's LIFO allocator publishes a digest
    of its decisions into the buffer so a rank whose allocator diverges stops instead of
    reading another request's KV.
  - HOST_BUFFER: an xputune HostBuffer with no NUMA binding (first touch), registered with
    the device runtime where one exists and plain memory on a host without one, where
    SGLang's own allocation would call cudaHostRegister and fail (`--device cpu`).
MHA pools, whose KV differs per rank, never share; with only TP_SHARED set they keep SGLang's
allocation.
"""

from __future__ import annotations

import logging
import os
import threading
from math import prod
from typing import Any

from xputune.sglang import lifo_hooks, stats
from xputune.sglang.config import ConfigError, PluginConfig
from xputune.sglang.hooks import Hooks
from xputune.sglang.targets import POOL_COMMON, POOL_MHA, POOL_MLA, Shape, Target, resolve

log = logging.getLogger(__name__)

NAME = "host_alloc"
BUFFER_ATTR = "_xputune_host_buffers"
SHARED_ATTR = "_xputune_shared_buffer"
_REGISTERED_RANGES = "_sglang_cuda_host_registered_ranges"  # SGLang's own unregister record

TARGETS = (
    Target(POOL_COMMON + ".ALLOC_MEMORY_FUNCS", kind="mapping"),
    Target(
        POOL_COMMON + ".alloc_with_host_register",
        ("dims", "dtype", "device", "pin_memory", "allocator", "registration_granularity_bytes"),
    ),
    Target(POOL_MLA + ".init_kv_buffer", ("self",), reads=("ALLOC_MEMORY_FUNCS",)),
    Target(
        POOL_MLA + ".backup_from_device_all_layer",
        ("self", "device_pool", "host_indices", "device_indices", "io_backend"),
    ),
    Target(POOL_MHA + ".init_kv_buffer", ("self",), reads=("ALLOC_MEMORY_FUNCS",)),
)

_state = threading.local()  # the host pool whose buffer is being allocated on this thread
_settings: dict[str, Any] = {"cfg": PluginConfig()}
_shared_seq = [0]


def card_index() -> int:
    """This process's local card: torch's current device (SGLang sets it to gpu_id)."""
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.current_device())
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def numa_node_for(index: int, nodes: tuple[int, ...]) -> int:
    if index >= len(nodes):
        raise ConfigError(
            f"XPUTUNE_HICACHE_NUMA lists {len(nodes)} node(s) but this is local card {index}"
        )
    return nodes[index]


def tp_rank_world() -> tuple[int, int, int]:
    """(rank in the TP group, TP world size, first global rank of the group)."""
    try:
        from sglang.srt.distributed.parallel_state import get_tp_group

        group = get_tp_group()
        return int(group.rank_in_group), int(group.world_size), int(group.ranks[0])
    except Exception:
        return 0, 1, 0


def _registrar(pin_memory: bool) -> Any:
    if not pin_memory:
        return None
    from xputune.devices.runtime import device_registrar

    return device_registrar()  # None where no device runtime exists (CPU-only host)


def xputune_alloc(
    dims: tuple[int, ...],
    dtype: Any,
    device: str,
    pin_memory: bool,
    allocator: Any,
    registration_granularity_bytes: int | None = None,
) -> Any:
    """Drop-in for SGLang's alloc_with_host_register: same arguments, a CPU tensor back."""
    import torch

    cfg: PluginConfig = _settings["cfg"]
    pool = getattr(_state, "pool", None)
    count = prod(dims)
    nbytes = count * torch.empty((), dtype=dtype).element_size()
    registrar = _registrar(pin_memory)
    shareable = pool is not None and isinstance(pool, resolve(POOL_MLA))
    if cfg.tp_shared and shareable:
        from xputune.hicache.tpshared import TpSharedBuffer

        rank, world, first = tp_rank_world()
        _shared_seq[0] += 1
        name = f"hicache-{os.getppid()}-{first}-{_shared_seq[0]}"
        buf: Any = TpSharedBuffer(name, nbytes, rank, world, registrar=registrar)
        pool.__dict__[SHARED_ATTR] = buf
        pool.__dict__[lifo_hooks.OBSERVER_ATTR] = buf.publish_decisions
    elif cfg.numa_nodes:
        from xputune.hicache.hostbuf import HostBuffer

        node = numa_node_for(card_index(), cfg.numa_nodes)
        buf = HostBuffer(nbytes, node=node, registrar=registrar)
    elif cfg.host_buffer:
        from xputune.hicache.hostbuf import HostBuffer

        buf = HostBuffer(nbytes, registrar=registrar, strict=False)
    else:
        original = resolve(POOL_COMMON + ".alloc_with_host_register")
        return original(dims, dtype, device, pin_memory, allocator, registration_granularity_bytes)
    tensor = torch.frombuffer(buf.view(), dtype=dtype, count=count).view(dims)
    setattr(tensor, _REGISTERED_RANGES, [])  # ours to unregister, not SGLang's destroy()
    if pool is not None:
        pool.__dict__.setdefault(BUFFER_ATTR, []).append(buf)
    else:
        _orphans.append(buf)  # allocated outside a hooked pool: keep it alive with the process
    log.info("xputune host KV buffer: %.2f GiB, %s", nbytes / 2**30, _describe(buf))
    stats.add("host_buffer_bytes", nbytes)
    stats.set_info(host_buffer=type(buf).__name__, host_buffer_name=getattr(buf, "name", None))
    return tensor


_orphans: list[Any] = []


def _describe(buf: Any) -> str:
    placement = getattr(buf, "placement", None)
    shown = placement.describe() if placement is not None else "placement unchecked"
    return f"{type(buf).__name__} registered={getattr(buf, 'registered_with', None)}, {shown}"


def _init_kv_buffer(original: Any, pool: Any) -> Any:
    previous = getattr(_state, "pool", None)
    _state.pool = pool
    try:
        return original(pool)
    finally:
        _state.pool = previous


def _backup(original: Any, pool: Any, *args: Any, **kwargs: Any) -> Any:
    shared = pool.__dict__.get(SHARED_ATTR)
    if shared is not None and not shared.writes_to_host:
        stats.add("tp_shared_skipped_d2h")
        return None  # TP rank 0 writes the shared buffer; the acks still go through SGLang
    return original(pool, *args, **kwargs)


def install(hooks: Hooks, cfg: PluginConfig) -> None:
    _settings["cfg"] = cfg
    funcs = resolve(POOL_COMMON + ".ALLOC_MEMORY_FUNCS")
    default = resolve(POOL_COMMON + ".alloc_with_host_register")
    for key in [k for k, v in funcs.items() if v is default]:
        hooks.set_item(funcs, key, xputune_alloc)
    hooks.set_global(funcs, "default_factory", lambda: xputune_alloc)
    hooks.around(POOL_MLA + ".init_kv_buffer", _init_kv_buffer)
    hooks.around(POOL_MHA + ".init_kv_buffer", _init_kv_buffer)
    if cfg.tp_shared:
        hooks.around(POOL_MLA + ".backup_from_device_all_layer", _backup)


SHAPES = (Shape("0.5.20", TARGETS, install),)
