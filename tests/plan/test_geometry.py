"""KV bytes per token: MLA replicated per rank, GQA split by KV head."""

from __future__ import annotations

import pytest

from xputune.plan.geometry import ModelConfigError, geometry_from_config
from xputune.plan.presets import preset_config, presets

MLA = {
    "model_type": "deepseek_v3",
    "num_hidden_layers": 61,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
}


def test_mla_latent_is_the_same_on_every_rank() -> None:
    one = geometry_from_config(MLA, tp=1)
    eight = geometry_from_config(MLA, tp=8)
    assert one.bytes_per_token_layer == (512 + 64) * 2
    assert eight.bytes_per_token == one.bytes_per_token == 61 * 576 * 2
    assert eight.group_bytes_per_token == 8 * eight.bytes_per_token
    assert eight.shared_group_bytes_per_token == eight.bytes_per_token
    assert eight.replicated


def test_dsa_indexer_key_adds_fp8_values_and_a_scale() -> None:
    cfg = {**MLA, "index_head_dim": 128}
    fp8 = geometry_from_config(cfg, indexer_dtype="fp8")
    bf16 = geometry_from_config(cfg, indexer_dtype="bf16")
    assert fp8.indexer_bytes_per_token_layer == 128 + 4
    assert bf16.indexer_bytes_per_token_layer == 256
    assert geometry_from_config(cfg, dtype="fp8").kv_bytes_per_token_layer == 576


def test_gqa_splits_kv_heads_over_ranks() -> None:
    cfg = {
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "hidden_size": 8192,
    }
    g = geometry_from_config(cfg, tp=4)
    assert g.kv_heads_per_rank == 2
    assert g.bytes_per_token_layer == 2 * 2 * 128 * 2
    assert g.shared_group_bytes_per_token == g.group_bytes_per_token
    assert not g.replicated


def test_gqa_with_more_ranks_than_kv_heads_replicates_heads() -> None:
    cfg = {
        "num_hidden_layers": 2,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
    }
    g = geometry_from_config(cfg, tp=8)
    assert g.kv_heads_per_rank == 1
    assert g.shared_group_bytes_per_token == g.group_bytes_per_token // 2


def test_multimodal_text_config_is_used() -> None:
    g = geometry_from_config({"text_config": MLA}, tp=2)
    assert g.layers == 61


@pytest.mark.parametrize(
    ("cfg", "kwargs", "words"),
    [
        ({"num_hidden_layers": 2}, {}, "num_attention_heads"),
        ({**MLA, "qk_rope_head_dim": None}, {}, "qk_rope_head_dim"),
        (
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 8,
                "num_key_value_heads": 6,
                "head_dim": 64,
            },
            {"tp": 4},
            "do not split",
        ),
        (MLA, {"dtype": "fp7"}, "unknown dtype"),
        (MLA, {"tp": 0}, "tp must be"),
    ],
)
def test_bad_configs_are_user_errors(cfg, kwargs, words) -> None:
    with pytest.raises(ModelConfigError, match=words):
        geometry_from_config(cfg, **kwargs)


def test_every_preset_has_a_geometry_and_aliases_resolve() -> None:
    for name in presets():
        assert geometry_from_config(preset_config(name)[1], tp=8).bytes_per_token > 0
    assert preset_config("DeepSeek-R1")[0] == "deepseek-v3"
    assert preset_config("glm5")[0] == "glm-5"


def test_glm5_matches_the_bytes_the_seed_fit_implies() -> None:
    # Seed: 13.539 us per token at a measured 7.40 GB/s: about 100 KB per token moved.
    implied = 13.539e-6 * 7.40e9
    g = geometry_from_config(preset_config("glm-5")[1], tp=8)
    assert g.bytes_per_token == pytest.approx(implied, rel=0.005)
