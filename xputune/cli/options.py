"""Options several commands share, declared once (cli/spec.py), so they read the same
everywhere: the host to read, the output format, the model and its TP size, the plan's choices
and the L3 tier's. A command that reads an option its own way takes `OPT.but(help=...)`.
"""

from __future__ import annotations

from enum import StrEnum

from xputune.cli.output import Format
from xputune.cli.spec import Opt

# Bounds of the number options. Each is beyond any real use, so a typo, a negative, nan, inf,
# 1e300 or 5000 digits is one usage line before anything runs.
#: --tp: more ranks than any machine (or cluster) serves one model with.
MAX_TP = 1024
#: --expiry of NFD labels (labels, watch), minutes: a year; 0 means they never expire.
MAX_EXPIRY_MINUTES = 525_600
#: A measured time in ms, or a cost in us per token: about 2.8 hours.
MAX_MS = 1e7
#: A bandwidth in GB/s.
MAX_GBPS = 1e5
#: A memory size in GB (an L3 pool or segment): 10 PB.
MAX_GB = 1e7
#: Tokens, or bytes per token, in a model's arithmetic.
MAX_COUNT = 1e12
#: Tokens per trace block, or per page.
MAX_BLOCK = 1 << 20
#: Tokens moved per layer (kernels plan, bench copy): 16M, far beyond any context.
MAX_TOKENS = 1 << 24
#: Layers of a model.
MAX_LAYERS = 4096
#: Bytes of one token of one layer.
MAX_ITEM = 1 << 24
#: Rounds, repeats or threads of a check or a benchmark.
MAX_RUNS = 10_000
#: A NUMA node number (the kernel's MAX_NUMNODES is at most 1024).
MAX_NODE = 1023
#: A seed (numpy's generators take 32 bits).
MAX_SEED = 2**32 - 1

ROOT = Opt(
    "root", ("--root",),
    "Read this host instead of the live one: a recording made by `xputune record` "
    "(.tar.gz/.bz2/.xz) or a folder holding sys/ and proc/ (an extracted recording's folder "
    "too).",
    kind="path", metavar="PATH",
)  # fmt: skip
EXAMPLE = Opt(
    "example", ("--example",), "Use a recording shipped with xputune (see `xputune examples`).",
    kind="name", metavar="NAME", complete="complete_examples",
)  # fmt: skip
FORMAT = Opt(
    "fmt", ("--format", "-f"), "table for people; json or yaml for scripts.",
    kind="choice", choices=tuple(f.value for f in Format), default=Format.table, cast=Format,
    metavar="table|json|yaml", complete="complete_formats",
)  # fmt: skip
PROFILE = Opt(
    "profile", ("--profile", "-p"),
    "Tuning profile: a name from `xputune profiles`, or a YAML file. Default: the one "
    "`xputune recommend` picks for the host.",
    kind="name", metavar="NAME", complete="complete_profiles",
)  # fmt: skip
MODEL = Opt(
    "model", ("--model", "-m"),
    "The model: a preset (glm-5, deepseek-v3, deepseek-v3.2, qwen3-32b, qwen3-235b-a22b, "
    "qwen3-30b-a3b, llama-3-70b), a Hugging Face id (zai-org/GLM-5) or a config.json (file "
    "or folder).",
    kind="name", metavar="MODEL", complete="complete_models",
)  # fmt: skip
CONFIG = Opt(
    "config", ("--config",), "A Hugging Face config.json (same as --model FILE).",
    kind="path", metavar="FILE",
)  # fmt: skip
TP = Opt(
    "tp", ("--tp",),
    "Tensor-parallel size (ranks = cards). Default: the number of cards of the host.",
    kind="int", min=1, max=MAX_TP,
)  # fmt: skip
#: Commands that read no host (model, tiers): the number of cards is unknown.
TP_NO_HOST = TP.but(
    help="Tensor-parallel size; needed with --model/--config (this command reads no host, so "
    "the number of cards is unknown)."
)
DTYPE = Opt("dtype", ("--dtype",), "KV cache dtype (bf16, fp8, fp32).", default="bf16")
STRATEGY = Opt(
    "strategy", ("--strategy", "-s"),
    "local: process and host KV on the card's node (safe, may leave nodes idle); all-nodes: a "
    "node per card (needs PCIe IDO on shared switches); shared: one TP-shared host buffer "
    "interleaved over all nodes (MLA models).",
    kind="choice", choices=("local", "all-nodes", "shared"), default="local",
    complete="complete_strategies",
)  # fmt: skip
TIER = Opt(
    "tier", ("--tier",),
    "L2 size: a ladder step (1, 2, ...), a size like 64GB, or max. Default: the middle of "
    "the ladder; climb while the hit rate still rises.",
)  # fmt: skip
CARDS = Opt(
    "cards", ("--cards",),
    "Card order for ranks 0..N-1 as CUDA/XPU visible order, e.g. xpu4,xpu5 or 4,5. Default: "
    "bus order.",
)  # fmt: skip
WRITE_POLICY = Opt(
    "write_policy", ("--write-policy",),
    "HiCache's write policy: write_through, write_back or write_through_selective (backs up "
    "prefixes hit at least twice).",
    kind="choice", choices=("write_through", "write_back", "write_through_selective"),
    default="write_through",
)  # fmt: skip
NODE_RESERVE = Opt(
    "node_reserve_gb", ("--node-reserve-gb",),
    "GB each NUMA node keeps out of L2's budget: RDMA buffers, page tables, the kernel's "
    "watermarks (default 20). A node's budget is its free memory less this, its L3 "
    "segments and its ranks' own memory, over its cards.",
    kind="float", min=0, max=MAX_GB, metavar="GB",
)  # fmt: skip
FORCE_IDO = Opt(
    "force", ("--force",), "Plan all-nodes even when IDO is off, and a TP size SGLang "
    "refuses (warns instead).", kind="flag", default=False,
)  # fmt: skip

# L3: a storage tier behind L2 (SGLang's --hicache-storage-backend), shared by plan and launch.
L3 = Opt(
    "l3", ("--l3",),
    "Add an L3 tier: mooncake (the Mooncake store: DRAM pooled over the cluster) or file (a "
    "local folder, --l3-dir).",
    kind="choice", choices=("mooncake", "file"),
)  # fmt: skip
L3_POOL_GB = Opt(
    "l3_pool_gb", ("--l3-pool-gb",),
    "The Mooncake pool's size in GB over all its donors: what L3 holds (its tokens, and the "
    "hit curve's L3 point).",
    kind="float", min=0, max=MAX_GB, metavar="GB",
)  # fmt: skip
L3_SEGMENT_GB = Opt(
    "l3_segment_gb", ("--l3-segment-gb",),
    "GB this instance mounts into the pool (SGLang splits it over tp x pp ranks; default 4), "
    "or a decode node donates (--role decode; default all it can spare).",
    kind="float", min=0, max=MAX_GB, metavar="GB",
)  # fmt: skip
L3_MASTER = Opt(
    "l3_master", ("--l3-master",),
    "mooncake_master's address (default 127.0.0.1:50051).",
    kind="name", metavar="HOST:PORT",
)  # fmt: skip
L3_PROTOCOL = Opt(
    "l3_protocol", ("--l3-protocol",),
    "Mooncake's transport: rdma (default where every rank has an RDMA NIC beside it) or tcp.",
    kind="choice", choices=("tcp", "rdma"),
)  # fmt: skip
L3_DIR = Opt(
    "l3_dir", ("--l3-dir",), "The file backend's folder (one .bin per page).",
    kind="path", metavar="DIR",
)  # fmt: skip
L3_PREFETCH = Opt(
    "l3_prefetch", ("--l3-prefetch",),
    "When a request waits for its L3 pages (SGLang's --hicache-storage-prefetch-policy).",
    kind="choice", choices=("best_effort", "wait_complete", "timeout"), default="timeout",
)  # fmt: skip
L3_HOST = Opt(
    "l3_host", ("--l3-host",),
    "The address other nodes reach this one at (Mooncake's local_hostname; a donor's "
    "--host). Default: the store's own guess.",
    kind="name", metavar="ADDR",
)  # fmt: skip
ROLE = Opt(
    "role", ("--role",),
    "prefill: a serving instance that uses L3 (default); decode: a node that only donates "
    "its DRAM to the pool (one mooncake_client per RDMA NIC).",
    kind="choice", choices=("prefill", "decode"), default="prefill",
)  # fmt: skip
L3_GBPS = Opt(
    "l3_gbps", ("--l3-gbps",),
    "Measured L3 -> L2 bandwidth per rank in GB/s, for the break-even (default: from the "
    "NIC's speed and the protocol).",
    kind="float", min=0, max=MAX_GBPS, metavar="GB/S",
)  # fmt: skip
RECOMPUTE = Opt(
    "recompute_us", ("--recompute-us-per-token",),
    "Prefill cost of one token in us, for the break-even (default 28.2: the field report's "
    "GLM-5 on 8 x P800).",
    kind="float", min=0, max=MAX_MS, metavar="US",
)  # fmt: skip

# SGLang's own environment: launch sglang, sweep and plan ask that interpreter what it has.
PYTHON = Opt(
    "python", ("--python",),
    "The Python of SGLang's environment (its venv's bin/python), which runs `-m "
    "sglang.launch_server`; its sglang release decides the flags. Default: "
    "$XPUTUNE_SGLANG_PYTHON, else the Python running xputune.",
    kind="path", metavar="PATH",
)  # fmt: skip

#: What plan and launch sglang share, in their help's order.
PLAN_SHARED = (MODEL, CONFIG, TP, STRATEGY, TIER, CARDS, DTYPE, WRITE_POLICY, NODE_RESERVE)
L3_SHARED = (L3, L3_POOL_GB, L3_SEGMENT_GB, L3_MASTER, L3_PROTOCOL, L3_DIR, L3_PREFETCH, L3_HOST)

# xputune verify's result, kept in the state directory (verify, launch sglang --verify).
KEEP = Opt(
    "keep", ("--keep",), "Keep the result as the last verification in the state directory "
    "(/var/lib/xputune; --root: the tree's), for `xputune status` and `metrics`.",
    kind="flag", default=True, negative="--no-keep",
)  # fmt: skip


class TraceFormat(StrEnum):
    auto = "auto"
    mooncake = "mooncake"
    generic = "generic"


#: What tiers, replay and sweep read: one trace, every form (userfiles.open_trace).
TRACE = Opt(
    "trace", ("--trace",), "Request trace (JSON lines, plain, gzip or zstd): Mooncake "
    "(hash_ids, timestamp, output_length) or the generic format.", kind="path", metavar="FILE",
)  # fmt: skip
TRACE_FORMAT = Opt(
    "trace_format", ("--trace-format",), "auto looks for hash_ids in the first request.",
    kind="choice", choices=tuple(f.value for f in TraceFormat), default=TraceFormat.auto,
    cast=TraceFormat,
)  # fmt: skip
BLOCK_SIZE = Opt(
    "block_size", ("--block-size",), "Tokens per trace block (Mooncake: 512; generic: its "
    "page_size).", kind="int", min=1, max=MAX_BLOCK,
)  # fmt: skip
MIN_GAIN = Opt(
    "min_gain", ("--min-gain",), "Plateau rule: a step adding fewer percentage points of hit "
    "rate than this is flat, and the rule stops before it.", kind="float", min=0.0,
    max=100.0, default=1.0, metavar="POINTS",
)  # fmt: skip
