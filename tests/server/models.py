"""Tiny models with random weights, built at test time (no download): MLA and MHA.

  mla  2-layer DeepSeek-V2-style config (kv_lora_rank 32, rope 16, dense MLP, yarn rope: the
       CPU rotary path of sglang 0.5.20 takes DeepSeek's yarn only)
  mha  2-layer Llama-style config (4 heads, 2 KV heads)
Both share one byte-level BPE tokenizer trained here in milliseconds by `tokenizers`. The
lm_head is scaled up so greedy decoding has clear winners: with random weights the next-token
distribution is otherwise almost flat, and a float rounding difference between two correct
paths (a full prefill and a cached one) could flip an argmax.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 512
LM_HEAD_SCALE = 60.0


def _tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    text = ["alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"] * 20
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.save_pretrained(out)


def build(kind: str, out: Path, seed: int = 0) -> Path:
    """A HF model folder (config, safetensors, tokenizer) for `kind` in {"mla", "mha"}."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    _tokenizer(out)
    torch.manual_seed(seed)
    common = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    if kind == "mla":
        from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

        cfg = DeepseekV2Config(
            **common, num_key_value_heads=4, moe_intermediate_size=32, kv_lora_rank=32,
            q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32,
            n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            first_k_dense_replace=2,
            rope_parameters={
                "rope_type": "yarn", "rope_theta": 10000.0, "factor": 1.0,
                "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                "mscale": 1.0, "mscale_all_dim": 1.0,
            },
        )  # fmt: skip
        model = DeepseekV2ForCausalLM(cfg)
    elif kind == "mha":
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(**common, num_key_value_heads=2))
    else:
        raise ValueError(f"unknown model kind {kind!r}")
    with torch.no_grad():
        model.lm_head.weight.mul_(LM_HEAD_SCALE)
    model.to(torch.bfloat16).save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    if kind == "mla":
        config.setdefault("moe_layer_freq", 1)  # read by sglang's DeepseekV2 layers
    config["torch_dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out
