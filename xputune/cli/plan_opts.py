"""The options plan, model, tiers and launch share, so a model and a TP size read the same."""

from __future__ import annotations

from typing import Annotated

import typer

from xputune.cli.checks import MAX_TP, given
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
