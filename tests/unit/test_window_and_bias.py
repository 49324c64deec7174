"""Sliding-window attention and q/k/v-only biases (issue 12, item 11), against hand-computed values."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.cost.flops import matmul_params, model_flops_per_token
from paraplan.step.estimate import estimate
from paraplan.graph.transformer import LayerShape, attention_ops, layer_weight_params
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec

LLAMA = load_model("llama3-8b")  # 32 layers, q width 4096, kv width 1024
WINDOWED = ModelSpec.model_validate({**LLAMA.model_dump(), "sliding_window": 1024})


def test_mean_visible_keys_by_hand():
    tiny = ModelSpec(layers=1, hidden=8, heads=1, ffn_hidden=8, vocab=8, sliding_window=3)
    assert tiny.mean_visible_keys(8) == pytest.approx(
        21 / 8
    )  # min(i, 3) for i = 1..8: 1+2+3·6 = 21
    assert tiny.mean_visible_keys(3) == pytest.approx(2.0)  # window >= s: plain causal, (3+1)/2
    assert LLAMA.mean_visible_keys(4096) == pytest.approx(4097 / 2)


def test_model_flops_with_a_window():
    # 6N + 3 passes · 4 · L · k · q with k = (1024·1025/2 + 3072·1024)/4096 = 896.125
    k = (1024 * 1025 / 2 + 3072 * 1024) / 4096
    assert k == pytest.approx(896.125)
    expected = 6 * matmul_params(LLAMA) + 12 * 32 * k * 4096
    assert model_flops_per_token(WINDOWED, 4096) == pytest.approx(expected, rel=1e-12)


def test_flash_attention_computes_only_the_window():
    shape = LayerShape(
        tp=1,
        cp=1,
        micro_batch=1,
        seq_length=4096,
        sequence_parallel=False,
        attention="flash",
        dtype="bf16",
    )
    (full,) = attention_ops(LLAMA, shape)
    (windowed,) = attention_ops(WINDOWED, shape)
    assert (
        full.fwd_flops == windowed.fwd_flops
    )  # listed over all keys; the fraction enters the time
    assert windowed.causal_fraction == pytest.approx(896.125 / 4096)
    assert full.causal_fraction == pytest.approx(4097 / 8192)


def test_a_window_makes_long_sequences_cheaper_and_mfu_stays_bounded():
    system = load_system("dgx-h100-80gb")
    plan = PlanSpec(
        gpus=8,
        tp=8,
        dp=1,
        micro_batch=1,
        global_batch=1,
        seq_length=32768,
        sequence_parallel=True,
        recompute="selective",
    )
    full, windowed = estimate(LLAMA, system, plan), estimate(WINDOWED, system, plan)
    assert windowed.step_time_s < full.step_time_s
    assert windowed.model_flops_per_step < full.model_flops_per_step
    assert 0 < windowed.mfu <= windowed.hfu <= 1


def test_qkv_bias_adds_the_projection_biases_split_by_tp():
    with_bias = ModelSpec.model_validate({**LLAMA.model_dump(), "qkv_bias": True})
    # (q + 2·kv) / tp = (4096 + 2·1024) / 8 = 768 parameters per layer per GPU
    assert layer_weight_params(with_bias, 8) - layer_weight_params(LLAMA, 8) == pytest.approx(768)
    gpt = load_model("gpt3-1.3b")  # bias: true implies the q/k/v biases
    assert gpt.has_qkv_bias


def test_position_warning():
    from paraplan.specs.limits import position_warning

    assert position_warning(LLAMA, 8192) is None
    assert "longer than llama3-8b's 8,192 positions (it was trained with" in position_warning(
        LLAMA, 16384
    )
    assert "learned position table" in position_warning(load_model("gpt3-125m"), 4096)
