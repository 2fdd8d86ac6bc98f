"""KV-cache bytes per token: what one token of prefix costs in host memory and on the wire.

Why: every capacity tier is a number of tokens, while the operator buys gigabytes; and a
fitted transfer slope (seconds per token) only becomes a bandwidth once bytes per token are
known. The two attention families differ in the way that matters most for TP:

- MLA (DeepSeek-V3, GLM-5): each layer stores one latent of kv_lora_rank + qk_rope_head_dim
  elements per token, plus the sparse-attention indexer key where the model has one (DSA:
  DeepSeek-V3.2, GLM-5). The latent is not split across TP ranks: every rank holds the same
  bytes, so private host pools at TP 8 hold 8 identical copies.
- MHA/GQA (Qwen3, Llama): K and V of num_key_value_heads heads of head_dim, split across TP
  ranks by KV head (a rank keeps at least one head when TP exceeds the KV heads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xputune.errors import XputuneError

DTYPE_BYTES = {
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "int8": 1,
    "fp32": 4,
    "float32": 4,
    "float": 4,
}
# SGLang's DSA indexer key cache: fp8 values plus one fp32 scale per 128-value block.
_INDEXER_QUANT_BLOCK = 128


class ModelConfigError(XputuneError):
    """A model config without the fields the KV geometry needs."""


@dataclass(frozen=True)
class KVGeometry:
    """Bytes of KV per token on one TP rank, and what a TP group's host pools hold."""

    name: str
    attention: str  # "mla" or "mha"
    layers: int
    tp: int
    dtype: str
    kv_bytes_per_token_layer: int  # latent, or K+V of this rank's heads
    indexer_bytes_per_token_layer: int  # DSA indexer key (0 when none)
    ranks_per_copy: int  # TP ranks holding identical bytes: tp for MLA, tp/kv_heads if > 1
    kv_heads_per_rank: int | None = None

    @property
    def replicated(self) -> bool:
        """Every TP rank holds the same bytes (always so for MLA)."""
        return self.ranks_per_copy == self.tp

    @property
    def bytes_per_token_layer(self) -> int:
        return self.kv_bytes_per_token_layer + self.indexer_bytes_per_token_layer

    @property
    def bytes_per_token(self) -> int:
        """One rank, all layers: what one token costs a rank's host pool (--hicache-size)."""
        return self.bytes_per_token_layer * self.layers

    @property
    def group_bytes_per_token(self) -> int:
        """All TP ranks with private host pools (SGLang's default)."""
        return self.bytes_per_token * self.tp

    @property
    def shared_group_bytes_per_token(self) -> int:
        """All TP ranks sharing one host buffer: each distinct byte stored once."""
        return self.group_bytes_per_token // self.ranks_per_copy


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        known = ", ".join(sorted(DTYPE_BYTES))
        raise ModelConfigError(f"unknown dtype {dtype!r} (known: {known})") from None


#: a config.json size field (layers, heads, widths) above this is no model's
FIELD_MAX = 1 << 24


def _field(config: dict[str, Any], key: str, name: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= FIELD_MAX:
        raise ModelConfigError(
            f"{name}: config field {key!r} must be a positive integer up to {FIELD_MAX}, "
            f"got {repr(value)[:40]}"
        )
    return value


def geometry_from_config(
    config: dict[str, Any],
    *,
    tp: int = 1,
    dtype: str = "bf16",
    indexer_dtype: str = "fp8",
    name: str | None = None,
) -> KVGeometry:
    """KV geometry from a Hugging Face config.json (already parsed)."""
    if tp < 1:
        raise ModelConfigError(f"tp must be >= 1, got {tp}")
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
        config = config["text_config"]  # multimodal wrappers keep the LM under text_config
    label = name or str(config.get("model_type") or "model")
    layers = _field(config, "num_hidden_layers", label)
    width = dtype_bytes(dtype)
    if config.get("kv_lora_rank"):
        latent = _field(config, "kv_lora_rank", label) + _field(config, "qk_rope_head_dim", label)
        indexer = 0
        if config.get("index_head_dim"):
            dim = _field(config, "index_head_dim", label)
            if dtype_bytes(indexer_dtype) == 1:
                indexer = dim + -(-dim // _INDEXER_QUANT_BLOCK) * 4
            else:
                indexer = dim * dtype_bytes(indexer_dtype)
        return KVGeometry(label, "mla", layers, tp, dtype, latent * width, indexer, tp)
    heads = _field(config, "num_attention_heads", label)
    kv_heads = (
        _field(config, "num_key_value_heads", label) if config.get("num_key_value_heads") else heads
    )
    if config.get("head_dim"):
        head_dim = _field(config, "head_dim", label)
    else:
        hidden = _field(config, "hidden_size", label)
        if hidden % heads:
            raise ModelConfigError(
                f"{label}: hidden_size {hidden} is not a multiple of "
                f"num_attention_heads {heads}; give head_dim"
            )
        head_dim = hidden // heads
    if kv_heads >= tp:
        if kv_heads % tp:
            raise ModelConfigError(f"{label}: {kv_heads} KV heads do not split over TP {tp}")
        per_rank, copies = kv_heads // tp, 1
    else:
        if tp % kv_heads:
            raise ModelConfigError(f"{label}: TP {tp} is not a multiple of {kv_heads} KV heads")
        per_rank, copies = 1, tp // kv_heads  # each head lives on tp / kv_heads ranks
    return KVGeometry(
        label, "mha", layers, tp, dtype, 2 * per_rank * head_dim * width, 0, copies, per_rank
    )
