"""xputune's SGLang cache plugin: wires xputune.hicache into SGLang's HiCache, 0.5.20 to 0.5.23.

SGLang discovers it through the entry point group ``sglang.srt.plugins`` (name ``xputune``,
``xputune.sglang.plugin:register``) and runs it in the engine and every scheduler process. It
hooks through SGLang's HookRegistry, never a fork. Every supported server builds
UnifiedRadixCache with HiCache attached; the hooks sit there, in its tree core and host pools
and in the L2 transfer engine. Each feature detects, when the plugin loads, which shape of
SGLang is installed (targets.py): the targets it hooks must resolve with the parameters it was
written against, whatever the release number says; a feature whose target moved is off with
one line naming it, the rest are on, and a release outside the tested range (0.5.20 and 0.5.23
are proven by the lanes) says so. Once the server's cache exists, each feature is proven to act
on that very instance and one INFO line names the features and the classes hooked
(xputune.sglang.live). Importing this package imports neither sglang nor torch.

Contract with the launcher (environment variables; everything is off when unset, "1" turns a
switch on, "0" or empty leaves it off, any other value stops the process with one line):

  XPUTUNE_HICACHE_LIFO=1        host KV pool reuses the most recently freed page first
                                (HostKVCache.alloc/free/available_size/clear).
  XPUTUNE_HICACHE_COUNT_ONCE=1  a request bumps a radix node's hit count once, not once per
                                insert (cache_unfinished_req + cache_finished_req), so
                                write_through_selective means "two distinct requests";
                                built into sglang 0.5.22+, where nothing is hooked.
  XPUTUNE_HICACHE_GHOST=1       leaves dropped from L1 without a host copy go to a ghost list
                                of page hashes; a later insert backs up exactly the prefix the
                                list proves reused. Only acts under write_through_selective,
                                and needs the Python tree core
                                (SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python, which the
                                launcher sets with it).
  XPUTUNE_HICACHE_GHOST_CAPACITY=<pages>  ghost list bound (default 262144 page hashes).
  XPUTUNE_HICACHE_ASYNC=1       D2H and H2D copies are launched by two lane threads instead of
                                the scheduler thread (L2TransferEngine submit_*).
  XPUTUNE_HICACHE_NUMA=<nodes>  host KV buffer bound to the i-th listed NUMA node for local
                                card i, e.g. "1 1 3 3 5 5 7 7", with huge pages and
                                registration after placement.
  XPUTUNE_HICACHE_TP_SHARED=1   MLA host KV shared by the TP group in one /dev/shm buffer;
                                only TP rank 0 writes it. Implies the LIFO allocator (its
                                decisions are cross-checked between ranks).
  XPUTUNE_HICACHE_KERNELS=1     the host pools' copies use xputune.kernels' operators (same
                                names as sgl_kernel.kvcacheio, counted as kernel_<name>):
                                layer_first and page_first with --hicache-io-backend kernel
                                (transfer_kv_per_layer[_mla], _all_layer[_mla], and their
                                _pf_lf / _lf_pf forms), layer_first and page_first_direct
                                with --hicache-io-backend direct (transfer_kv_direct,
                                transfer_kv_*_direct_pf_lf / _lf_pf); the pools' JIT paths
                                are switched off. L3 stores such as mooncake rewrite
                                layer_first to page_first / page_first_direct: both served.
  XPUTUNE_HICACHE_HOST_BUFFER=1 the host KV buffer is an xputune HostBuffer (registered with
                                the device runtime where there is one, plain memory on a
                                CPU-only host, where SGLang's own cudaHostRegister fails).
  XPUTUNE_HICACHE_STATS=<dir>   each scheduler process keeps <dir>/xputune-stats-<pid>.json
                                current: backups written, copies run, LIFO allocations, lane
                                jobs, double counts suppressed, ghost drops and backups.
  XPUTUNE_HICACHE_ON_MISMATCH=warn|exit  what a feature whose target moved (or that cannot act
                                on the server's cache) does: off with one WARNING line
                                "xputune cache plugin: <feature> off: <target>: <reason>"
                                while the rest serve (default), or stop the process with
                                "xputune cache plugin refused: <feature>: ...".

SGLang's own SGLANG_PLUGINS=<names> whitelist still applies: include "xputune" if it is set.
"""

from __future__ import annotations

ENTRY_POINT_GROUP = "sglang.srt.plugins"
ENTRY_POINT_NAME = "xputune"
ENTRY_POINT_VALUE = "xputune.sglang.plugin:register"
