"""Memory realism (issue 8): gradient dtype, Transformer Engine's fp8 weight copies, recompute by module."""

from __future__ import annotations

import pytest

from paraplan import api
from paraplan.catalog import load_framework, load_model
from paraplan.cost.memory import (
    StateBytes,
    fp8_weight_copy_bytes_per_param,
    layer_activation_bytes,
    recomputed_module_bytes,
    state_bytes_per_param,
)
from paraplan.graph.transformer import LayerShape
from paraplan.units import GiB

# Llama 3 8B decoder layer by hand: h·(q + 2kv) + q·h + 2·h·f + f·h matrices + one RMSNorm weight per norm
LLAMA3_8B_LAYER = (
    4096 * (4096 + 2 * 1024) + 4096 * 4096 + 2 * 4096 * 14336 + 14336 * 4096 + 2 * 4096
)  # 218,112,000
PLAN = dict(gpus=8, seq_length=8192, global_batch=32, recompute="full", zero=1)


def _stage0(**kw) -> dict:
    est = api.estimate("llama3-8b", "dgx-h100-80gb", **{**PLAN, **kw})
    return est.to_dict()["memory"]["per_stage"][0] | {"dp_comm_s": est.breakdown.dp_comm_s}


def test_state_bytes_by_gradient_dtype():
    assert state_bytes_per_param("bf16") == StateBytes(2.0, 4.0, 12.0)  # 18 B: Korthikanti Fig. 1
    assert state_bytes_per_param("bf16", "bf16") == StateBytes(2.0, 2.0, 12.0)  # 16 B: ZeRO §3.1
    assert state_bytes_per_param("fp32", "bf16") == StateBytes(
        4.0, 4.0, 8.0
    )  # fp32 training keeps fp32 grads


def test_bf16_gradients_halve_gradient_memory_and_reduce_traffic():
    fp32, bf16 = _stage0(), _stage0(grad_dtype="bf16")
    # 8.03 B parameters, ZeRO-1 keeps every gradient: 4 B vs 2 B each
    assert fp32["gradients_gib"] == pytest.approx(2 * bf16["gradients_gib"], rel=1e-12)
    assert fp32["weights_gib"] == bf16["weights_gib"]
    assert bf16["dp_comm_s"] < fp32["dp_comm_s"]


def test_fp8_weight_copies_by_hand():
    assert (
        fp8_weight_copy_bytes_per_param("fp8", True) == 2.0
    )  # rowwise + transposed columnwise fp8 copy
    assert (
        fp8_weight_copy_bytes_per_param("fp8", False) == 0.0
    )  # fp8 primary weights replace the bf16 weight
    assert fp8_weight_copy_bytes_per_param("bf16", True) == 0.0
    plain, copies = _stage0(dtype="fp8"), _stage0(dtype="fp8", fp8_weight_copies=True)
    # 32 decoder layers × 2 B, not the embedding and LM head (not Transformer Engine GEMMs)
    assert copies["weights_gib"] - plain["weights_gib"] == pytest.approx(
        32 * LLAMA3_8B_LAYER * 2 / GiB, rel=1e-9
    )
    assert (
        _stage0(fp8_weight_copies=True)["weights_gib"] == _stage0()["weights_gib"]
    )  # bf16: no copies


def test_framework_profiles_set_the_memory_defaults():
    assert (
        load_framework("megatron-core").fp8_weight_copies is False
    )  # NeMo 2.0 fp8 recipes: fp8_params=True
    assert load_framework("deepspeed").fp8_weight_copies is True
    est = api.estimate("llama3-8b", "dgx-h100-80gb", framework="deepspeed", dtype="fp8", **PLAN)
    # DeepSpeed's get_data_types: gradients in the model's bf16 under ZeRO (the fp8 recipe keeps bf16 weights)
    assert est.plan["fp8_weight_copies"] is True and est.plan["grad_dtype"] == "bf16"


# ---- selective recomputation by module, dense layers --------------------------------------------
GPT13 = load_model("gpt3-1.3b")  # h 2048, f 8192, 16 heads, GeLU, dropout
SHAPE = LayerShape(
    tp=2,
    cp=1,
    micro_batch=1,
    seq_length=2048,
    sequence_parallel=True,
    attention="unfused",
    dtype="bf16",
)


def test_recomputed_module_bytes_by_hand():
    tokens = 2048
    mlp = 2 * tokens * 8192 / 2 * 2  # ab · tokens · f/t · 2 (GeLU input and output)
    norms = 2 * 2 * tokens * 2048 / 2  # two norm outputs, ab · tokens · h each, ÷t with SP
    core = (
        16 * tokens * 2048 * (2 * 2 + 1) / 2
    )  # 5·a·s per token (softmax 2, dropout mask 1, dropout output 2) ÷t
    assert recomputed_module_bytes(GPT13, SHAPE, ("mlp",)) == mlp
    assert recomputed_module_bytes(GPT13, SHAPE, ("layernorm",)) == norms
    assert recomputed_module_bytes(GPT13, SHAPE, ("core_attn",)) == core
    assert (
        recomputed_module_bytes(GPT13, SHAPE, ("moe_act", "mla_up_proj")) == 0.0
    )  # not in a dense layer
    none = layer_activation_bytes(GPT13, SHAPE, "none")
    selective = SHAPE._replace(recompute_modules=("core_attn", "mlp"))
    assert layer_activation_bytes(GPT13, selective, "selective") == none - core - mlp
    # the default module list is Megatron-LM's core attention: Korthikanti's 34·s·b·h/t with SP
    assert layer_activation_bytes(GPT13, SHAPE, "selective") == pytest.approx(
        34 * tokens * 2048 / 2
    )


def test_recompute_time_follows_the_modules():
    def recompute_s(modules: str) -> float:
        est = api.estimate(
            "llama3-8b",
            "dgx-h100-80gb",
            gpus=8,
            tp=2,
            sequence_parallel=True,
            seq_length=8192,
            global_batch=32,
            zero=1,
            recompute="selective",
            recompute_modules=modules.split(","),
        )
        return est.breakdown.recompute_s

    attn, mlp, both = recompute_s("core_attn"), recompute_s("mlp"), recompute_s("core_attn,mlp")
    assert mlp > attn > 0 and both == pytest.approx(attn + mlp, rel=1e-9)


def test_recompute_flops_follow_the_modules():
    from paraplan.cost.flops import causal_attention_flops_per_token, recompute_flops_per_token

    model = load_model("llama3-8b")
    attention = causal_attention_flops_per_token(model, 8192, passes=1.0)
    mlp = 2.0 * 32 * 3 * 4096 * 14336  # 2 · L · (p·h·f + f·h), SwiGLU p = 2
    assert recompute_flops_per_token(model, 8192, "selective") == attention
    assert recompute_flops_per_token(model, 8192, "selective", ("mlp",)) == mlp
    assert (
        recompute_flops_per_token(model, 8192, "selective", ("core_attn", "mlp", "layernorm"))
        == attention + mlp
    )


# ---- full recomputation of some layers (Megatron-LM --recompute-method block) ----------------------
def _partial(**kw):
    base = dict(gpus=8, seq_length=8192, global_batch=32, zero=1, recompute="full")
    return api.estimate("llama3-8b", "dgx-h100-80gb", **{**base, **kw})


def test_block_recompute_is_linear_in_the_recomputed_layers():
    full, none = _partial(), _partial(recompute="none")
    quarter, half = _partial(recompute_num_layers=8), _partial(recompute_num_layers=16)
    # 8 of 32 layers re-run their forward: a quarter of full recomputation's seconds
    assert quarter.breakdown.recompute_s == pytest.approx(full.breakdown.recompute_s / 4, rel=1e-12)
    acts = [
        e.peak_stage.activations_bytes for e in (quarter, half, _partial(recompute_num_layers=24))
    ]
    assert acts[0] - acts[1] == pytest.approx(
        acts[1] - acts[2], rel=1e-12
    )  # each 8 layers save the same
    assert (
        _partial(recompute_num_layers=32).step_time_s == full.step_time_s
    )  # every layer: plain full recompute
    assert none.breakdown.recompute_s == 0 < quarter.breakdown.recompute_s
    # HFU counts the recomputed quarter's FLOPs only
    assert quarter.hardware_flops_per_step - quarter.model_flops_per_step == pytest.approx(
        (full.hardware_flops_per_step - full.model_flops_per_step) / 4, rel=1e-12
    )


def test_block_recompute_counts_per_pipeline_chunk():
    kw = dict(gpus=8, pp=2, vpp=2, tp=1, seq_length=4096, global_batch=16, zero=1)
    full = _partial(**kw)
    # 16 layers per stage in 2 chunks: N = 4 per chunk recomputes 8 of each stage's 16
    assert _partial(recompute_num_layers=4, **kw).breakdown.recompute_s == pytest.approx(
        full.breakdown.recompute_s / 2, rel=1e-12
    )
    assert (
        _partial(recompute_num_layers=10, **kw).breakdown.recompute_s == full.breakdown.recompute_s
    )  # capped


def test_block_recompute_rules():
    from paraplan.specs.errors import InputError

    with pytest.raises(InputError, match="recompute_num_layers.*needs recompute=full"):
        _partial(recompute="selective", recompute_num_layers=4)
    with pytest.raises(InputError, match="recompute_num_layers"):
        api.estimate(
            "mixtral-8x7b",
            "dgx-h100-80gb",
            gpus=8,
            ep=8,
            seq_length=4096,
            global_batch=8,
            recompute="full",
            recompute_num_layers=4,
            zero=1,
        )
