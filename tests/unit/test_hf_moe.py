"""Mixture-of-experts Hugging Face config.json files: read faithfully or refused, never read as dense."""

import json

import pytest

from paraplan.catalog import load_model
from paraplan.catalog.hf import model_from_hf_config
from paraplan.specs.errors import InputError

# Key subsets of the published config.json files (Hugging Face model repositories named per dict).
MIXTRAL_8X7B = {  # mistralai/Mixtral-8x7B-v0.1
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}
QWEN3_30B = {  # Qwen/Qwen3-30B-A3B
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "mlp_only_layers": [],
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
QWEN15_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B (model_type qwen2_moe)
    "architectures": ["Qwen2MoeForCausalLM"],
    "model_type": "qwen2_moe",
    "decoder_sparse_step": 1,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "num_attention_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "shared_expert_intermediate_size": 5632,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "first_k_dense_replace": 3,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "v_head_dim": 128,
    "vocab_size": 129280,
}
GPT_OSS_120B = {  # openai/gpt-oss-120b
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "attention_bias": True,
    "head_dim": 64,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072,
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "num_local_experts": 128,
    "sliding_window": 128,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "vocab_size": 201088,
}


@pytest.mark.parametrize(
    "config, catalog",
    [
        (MIXTRAL_8X7B, "mixtral-8x7b"),
        (QWEN3_30B, "qwen3-30b-a3b"),
        (DEEPSEEK_V3, "deepseek-v3"),
        (GPT_OSS_120B, "gpt-oss-120b"),
    ],
)
def test_configs_match_the_catalog_entries(config, catalog):
    model = model_from_hf_config(config, name="x")
    expected = load_model(catalog)
    fields = (
        "layers",
        "hidden",
        "heads",
        "n_kv_heads",
        "vocab",
        "experts",
        "top_k",
        "moe_ffn_hidden",
        "shared_experts",
        "dense_layers",
        "moe_layer_interval",
        "attention_type",
        "q_lora_rank",
        "kv_lora_rank",
        "glu_clamp",
        "mtp_layers",
        "sliding_window",
        "sliding_window_pattern",
        "tie_embeddings",
        "router_groups",
        "router_group_topk",
    )
    assert {f: getattr(model, f) for f in fields} == {f: getattr(expected, f) for f in fields}
    assert model.total_params == expected.total_params


def test_qwen2_moe_shared_expert():
    m = model_from_hf_config(QWEN15_MOE, name="qwen15")
    assert (m.experts, m.top_k, m.shared_experts, m.shared_ffn_hidden) == (60, 4, 1, 5632)


def test_group_limited_routing_is_read_when_it_limits():
    ds = model_from_hf_config(DEEPSEEK_V3, name="d")
    assert (ds.router_groups, ds.router_group_topk) == (8, 4)
    one_group = model_from_hf_config(DEEPSEEK_V3 | {"n_group": 1, "topk_group": 1}, name="k")
    assert (one_group.router_groups, one_group.router_group_topk) == (None, None)  # Kimi-K2's
    # DeepSeek-V2's remote gate: "greedy" top-k over every expert, "group_limited_greedy" by the groups
    greedy = model_from_hf_config(DEEPSEEK_V3 | {"topk_method": "greedy"}, name="g")
    assert (greedy.router_groups, greedy.router_group_topk) == (None, None)
    limited = model_from_hf_config(DEEPSEEK_V3 | {"topk_method": "group_limited_greedy"}, name="l")
    assert (limited.router_groups, limited.router_group_topk) == (8, 4)


def test_moe_layer_patterns_fit_or_are_refused():
    every_other = model_from_hf_config(QWEN3_30B | {"decoder_sparse_step": 2}, name="q")
    assert every_other.moe_layers == tuple(range(1, 48, 2))
    leading = model_from_hf_config(QWEN3_30B | {"mlp_only_layers": [0, 1]}, name="q")
    assert (leading.dense_layers, leading.moe_layer_interval) == (2, 1)
    with pytest.raises(InputError, match="mlp_only_layers"):
        model_from_hf_config(QWEN3_30B | {"mlp_only_layers": [5, 17]}, name="q")
    ds = model_from_hf_config(
        DEEPSEEK_V3 | {"first_k_dense_replace": 1, "moe_layer_freq": 2}, name="d"
    )
    assert ds.moe_layers == tuple(range(2, 61, 2))  # DeepSeek's rule: i >= 1 and i % 2 == 0


@pytest.mark.parametrize(
    "config, field",
    [
        (QWEN3_30B | {"use_sliding_window": True}, "model.use_sliding_window"),
        (
            GPT_OSS_120B | {"layer_types": ["full_attention"] * 3 + ["sliding_attention"] * 33},
            "model.layer_types",
        ),
        (
            {k: v for k, v in MIXTRAL_8X7B.items() if k != "num_local_experts"},
            "model.num_local_experts",
        ),
        # families hf_moe does not read: hf.py's MoE refusal (never read as dense)
        (
            {"model_type": "dbrx", "hidden_size": 6144, "num_hidden_layers": 40},
            "model: a mixture-of-experts config",
        ),
        (
            {
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "vocab_size": 100,
                "num_local_experts": 4,
            },
            "model: a mixture-of-experts config (num_local_experts=4)",
        ),
    ],
)
def test_unrepresentable_moe_configs_are_refused(config, field):
    with pytest.raises(InputError) as err:
        model_from_hf_config(config, name="x")
    assert str(err.value).startswith(field)


def test_architectures_alone_pick_the_moe_family(tmp_path):
    config = {k: v for k, v in QWEN3_30B.items() if k != "model_type"}
    path = tmp_path / "Qwen3-30B-A3B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    model = load_model(str(path))
    assert model.name == "Qwen3-30B-A3B" and model.experts == 128
