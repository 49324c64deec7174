"""fp8 dot-product attention (specs.runtime fp8_dot_product_attention): cuDNN's FP8 / MXFP8 SDPA backward visits
every causal key tile of a windowed layer (cost.attention_time.fp8_backward_window), against hand-computed values."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.attention_time import attention_op_s, attention_time_s, fp8_backward_window
from paraplan.cost.flops import softmax_exponentials
from paraplan.cost.frameworks import framework_system
from paraplan.graph.mla import window_fraction
from paraplan.graph.moe import ExpertShape, moe_model_layer
from paraplan.graph.transformer import LayerShape

# GPT-OSS 120B at MBS 4, 4096 tokens: b·h = 4 x 64 = 256 heads of 64, half its layers with a 128-key window
SHAPE = LayerShape(1, 1, 4, 4096, False, "flash", "fp8")._replace(expert=ExpertShape(ep=16))


def _acc(framework: str, system: str = "gb300-nvl72"):
    return framework_system(load_framework(framework), load_system(system)).accelerator


def _attention_op():
    layer = moe_model_layer(load_model("gpt-oss-120b"), SHAPE, True)
    return next(op for op in layer.ops if op.kind == "attention")


def test_the_fp8_attention_profiles():
    # the MXFP8 MoE presets of 26.06 / 26.06.01 / 26.08 set fp8_dot_product_attention; 25.11's recipe does not
    for name in (
        "megatron-bridge-26.06-mxfp8",
        "megatron-bridge-26.06.01-mxfp8",
        "megatron-bridge-26.08-mxfp8",
    ):
        assert load_framework(name).fp8_dot_product_attention
    assert not load_framework("megatron-bridge-25.11-mxfp8").fp8_dot_product_attention
    assert not load_system("gb300-nvl72").accelerator.efficiency.runtime.fp8_dot_product_attention


def test_fp8_backward_window_only_for_fp8_attention_in_a_low_precision_plan():
    fp8_stack, bf16_stack = _acc("megatron-bridge-26.08-mxfp8"), _acc("megatron-bridge-25.11-mxfp8")
    assert fp8_backward_window(fp8_stack, "fp8", 128) is None
    assert fp8_backward_window(fp8_stack, "nvfp4", 128) is None
    # a bf16 plan runs bf16 attention whatever the profile; a stack without fp8 attention keeps the window
    assert fp8_backward_window(fp8_stack, "bf16", 128) == 128
    assert fp8_backward_window(bf16_stack, "fp8", 128) == 128
    assert fp8_backward_window(fp8_stack, "fp8", None) is None


def test_the_windowed_layers_backward_is_the_full_layers_by_hand():
    op = _attention_op()
    assert op.attention_call == (4096, 4096, 64, True)
    window, share, window_cf = op.attention_window
    assert (window, share) == (128, 0.5)
    acc = _acc("megatron-bridge-26.08-mxfp8")
    call, full_cf = op.attention_call, window_fraction(None, 4096, 1)
    assert full_cf == pytest.approx((1 + 1 / 4096) / 2)

    def part(flops, cf, way, w, on=acc):
        exps = softmax_exponentials(op.fwd_flops, cf, 64)
        return attention_time_s(flops, cf, on, "fp8", call, way, exps, w)

    forward, backward = attention_op_s(op, acc, "fp8")
    # forward: half windowed (its tiles), half full, as without fp8 attention
    fwd = 0.5 * part(op.fwd_flops, window_cf, "fwd", 128) + 0.5 * part(
        op.fwd_flops, full_cf, "fwd", None
    )
    assert forward == pytest.approx(fwd, rel=1e-12)
    # backward: both halves at the full causal layer's work and time
    assert backward == pytest.approx(part(op.bwd_flops, full_cf, "bwd", None), rel=1e-12)
    # the same op on a stack without fp8 attention: the windowed half at its own tiles
    bf16_acc = _acc("megatron-bridge-25.11-mxfp8")
    windowed = part(op.bwd_flops, window_cf, "bwd", 128, bf16_acc)
    full = part(op.bwd_flops, full_cf, "bwd", None, bf16_acc)
    assert attention_op_s(op, bf16_acc, "fp8")[1] == pytest.approx(
        0.5 * windowed + 0.5 * full, rel=1e-12
    )
    assert windowed < 0.2 * full
    # cuDNN's benchmark (GB300, cuDNN 9.22, b·h 256, 4k tokens, window 128): MXFP8 backward 1.871 ms, bf16
    # 0.442 ms; the full layer's price is within 15 % of the MXFP8 time
    assert 0.85 < backward / 1.871e-3 < 1.0
