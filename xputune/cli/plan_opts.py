"""The options plan, model, tiers and launch share, so a model and a TP size read the same."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.checks import MAX_GB, MAX_GBPS, MAX_MS, MAX_TP, given
from xputune.cli.completion import complete_models, complete_strategies

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="The model: a preset (glm-5, deepseek-v3, deepseek-v3.2, qwen3-32b, "
        "qwen3-235b-a22b, qwen3-30b-a3b, llama-3-70b), a Hugging Face id (zai-org/GLM-5) or "
        "a config.json (file or folder).",
        metavar="MODEL",
        autocompletion=complete_models,
        callback=given,
    ),
]
# A path, taken as text: typer would turn "" into Path(".") before any check could see it.
ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--config",
        help="A Hugging Face config.json (same as --model FILE).",
        metavar="FILE",
        callback=given,
    ),
]
TpOpt = Annotated[
    int | None,
    typer.Option(
        "--tp",
        help="Tensor-parallel size (ranks = cards). Default: the number of cards of the host.",
        min=1,
        max=MAX_TP,
    ),
]
# Commands that read no host (model, tiers): the number of cards is unknown, so a model needs it.
TpNoHostOpt = Annotated[
    int | None,
    typer.Option(
        "--tp",
        help="Tensor-parallel size; needed with --model/--config (this command reads no host, "
        "so the number of cards is unknown).",
        min=1,
        max=MAX_TP,
    ),
]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="KV cache dtype (bf16, fp8, fp32).")]
StrategyOpt = Annotated[
    str,
    typer.Option(
        "--strategy",
        "-s",
        help="local: process and host KV on the card's node (safe, may leave nodes idle); "
        "all-nodes: a node per card (needs PCIe IDO on shared switches); shared: one TP-shared "
        "host buffer interleaved over all nodes (MLA models).",
        autocompletion=complete_strategies,
    ),
]
TierOpt = Annotated[
    str | None,
    typer.Option(
        "--tier",
        help="L2 size: a ladder step (1, 2, ...), a size like 64GB, or max. Default: the "
        "middle of the ladder; climb while the hit rate still rises.",
    ),
]
CardsOpt = Annotated[
    str | None,
    typer.Option(
        "--cards",
        help="Card order for ranks 0..N-1 as CUDA/XPU visible order, e.g. xpu4,xpu5 or 4,5. "
        "Default: bus order.",
    ),
]

# L3: a storage tier behind L2 (SGLang's --hicache-storage-backend), shared by plan and launch.
L3Opt = Annotated[
    str | None,
    typer.Option(
        "--l3",
        help="Add an L3 tier: mooncake (the Mooncake store: DRAM pooled over the cluster) or "
        "file (a local folder, --l3-dir).",
        metavar="mooncake|file",
    ),
]
L3PoolOpt = Annotated[
    float | None,
    typer.Option(
        "--l3-pool-gb",
        help="The Mooncake pool's size in GB over all its donors: what L3 holds (its tokens, "
        "and the hit curve's L3 point).",
        min=0,
        max=MAX_GB,
    ),
]
L3SegmentOpt = Annotated[
    float | None,
    typer.Option(
        "--l3-segment-gb",
        help="GB this instance mounts into the pool (SGLang splits it over tp x pp ranks; "
        "default 4), or a decode node donates (--role decode; default all it can spare).",
        min=0,
        max=MAX_GB,
    ),
]
L3MasterOpt = Annotated[
    str | None,
    typer.Option(
        "--l3-master",
        help="mooncake_master's address, HOST:PORT (default 127.0.0.1:50051).",
        metavar="HOST:PORT",
        callback=given,
    ),
]
L3ProtocolOpt = Annotated[
    str | None,
    typer.Option(
        "--l3-protocol",
        help="Mooncake's transport: rdma (default where every rank has an RDMA NIC beside "
        "it) or tcp.",
        metavar="tcp|rdma",
    ),
]
L3DirOpt = Annotated[
    str | None,
    typer.Option(
        "--l3-dir",
        help="The file backend's folder (one .bin per page).",
        metavar="DIR",
        callback=given,
    ),
]
L3PrefetchOpt = Annotated[
    str,
    typer.Option(
        "--l3-prefetch",
        help="When a request waits for its L3 pages: best_effort, wait_complete or timeout "
        "(SGLang's --hicache-storage-prefetch-policy).",
    ),
]
L3HostOpt = Annotated[
    str | None,
    typer.Option(
        "--l3-host",
        help="The address other nodes reach this one at (Mooncake's local_hostname; a "
        "donor's --host). Default: the store's own guess.",
        metavar="ADDR",
        callback=given,
    ),
]
RoleOpt = Annotated[
    str,
    typer.Option(
        "--role",
        help="prefill: a serving instance that uses L3 (default); decode: a node that only "
        "donates its DRAM to the pool (one mooncake_client per RDMA NIC).",
        metavar="prefill|decode",
    ),
]
L3GbpsOpt = Annotated[
    float | None,
    typer.Option(
        "--l3-gbps",
        help="Measured L3 -> L2 bandwidth per rank in GB/s, for the break-even (default: from "
        "the NIC's speed and the protocol).",
        min=0,
        max=MAX_GBPS,
    ),
]
RecomputeOpt = Annotated[
    float | None,
    typer.Option(
        "--recompute-us-per-token",
        help="Prefill cost of one token in us, for the break-even (default 28.2: the field "
        "report's GLM-5 on 8 x P800).",
        min=0,
        max=MAX_MS,
    ),
]
