"""Transformer Engine's fused grouped MLP (specs.runtime moe_fused_grouped_mlp, graph.moe_mlp.fuses_grouped_mlp)
against hand-computed values: the passes it removes and the bytes it stops keeping."""

import math

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.compute import (
    dglu_dbias_s,
    gemm_calls,
    gemm_time_s,
    grouped_gemm_time_s,
    one_kernel_grouped_s,
    op_times_s,
    scale_swizzle_s,
    te_multistream_grouped_s,
)
from paraplan.cost.frameworks import framework_system
from paraplan.cost.host import op_kernels
from paraplan.graph.moe import ExpertShape, moe_model_layer
from paraplan.graph.moe_mlp import moe_mlp_activation_bytes
from paraplan.graph.transformer import LayerShape
from paraplan.step.constants import stack_shape_fields

# one micro-batch of 4096 tokens, no TP / CP: gpt-oss-120b over EP 64, balanced, routes 4096 x top-4 = 16384
# rows to each rank (2 local experts); Qwen3-30B-A3B over EP 8 4096 x top-8 = 32768 rows (16 local experts)
FP8 = LayerShape(1, 1, 1, 4096, False, "flash", "fp8")
FUSED = FP8._replace(fused_grouped_mlp=True)
GPT_OSS = ExpertShape(ep=64, balance="forced")
QWEN = ExpertShape(ep=8, balance="forced")


def _ops(model: str, shape: LayerShape, expert: ExpertShape) -> dict:
    return {
        op.name: op
        for op in moe_model_layer(load_model(model), shape._replace(expert=expert), True).ops
    }


def test_fused_grouped_mlp_drops_the_clamp_the_sync_and_the_activation_by_hand():
    unfused = _ops("gpt-oss-120b", FP8, GPT_OSS)
    fused = _ops("gpt-oss-120b", FUSED, GPT_OSS)
    gone = {"expert_glu_clamp", "activation_host_sync", "expert_activation"}
    assert gone <= set(unfused)
    assert not gone & set(fused)
    # the GEMMs are the same shapes and FLOPs, each run as one kernel over the experts (Op.one_kernel); the fc2
    # dgrad of a model with expert biases is the dGLU + dbias kernel
    assert fused["expert_fc2"].dgrad_epilogue == "dglu_dbias"
    for name in ("expert_fc1", "expert_fc2"):
        assert fused[name].one_kernel and not unfused[name].one_kernel
        assert fused[name]._replace(one_kernel=False, dgrad_epilogue=None) == unfused[name]
    # bias: 6 bf16 passes over 16384 x 2880 each way unfused; fused, none forward and one read of the fc2
    # output gradient backward (TE's grouped dbias / dscales kernel): 2 B x 16384 x 2880
    assert unfused["expert_output_bias"].fwd_bytes == 6 * 2 * 16384 * 2880
    bias = fused["expert_output_bias"]
    assert (bias.fwd_bytes, bias.bwd_bytes) == (0.0, 2 * 16384 * 2880)


def test_fused_grouped_mlp_needs_a_block_scaled_plan():
    # a bf16 plan under the same stack runs TEGroupedMLP unfused (TE fuses only under an mxfp8 / nvfp4 recipe)
    bf16 = FP8._replace(dtype="bf16")
    assert _ops("qwen3-30b-a3b", bf16._replace(fused_grouped_mlp=True), QWEN) == _ops(
        "qwen3-30b-a3b", bf16, QWEN
    )
    # Qwen3 (SwiGLU, no clamp, no bias): only the activation pass goes, 3 x 2 B x 32768 rows x 768 forward
    unfused = _ops("qwen3-30b-a3b", FP8, QWEN)
    fused = _ops("qwen3-30b-a3b", FUSED, QWEN)
    assert set(unfused) - set(fused) == {"expert_activation"}
    assert unfused["expert_activation"].fwd_bytes == 3 * 2 * 32768 * 768


def test_fused_grouped_mlp_keeps_no_clamped_copy_by_hand():
    # the fused op saves the fc1 output, not a clamped copy beside it: 16384 rows x 5760 x 2 B less
    m = load_model("gpt-oss-120b")
    unfused = moe_mlp_activation_bytes(m, FP8, GPT_OSS, ())
    fused = moe_mlp_activation_bytes(m, FUSED, GPT_OSS, ())
    assert unfused - fused == 16384 * 5760 * 2


def test_the_profile_sets_it_only_under_a_block_scaled_recipe():
    framework = load_framework("megatron-bridge-26.08-mxfp8")
    system = framework_system(framework, load_system("gb300-nvl72"))
    assert stack_shape_fields(system)["fused_grouped_mlp"] is True
    delayed = framework_system(
        framework.model_copy(update={"fp8_recipe": "delayed"}), load_system("gb300-nvl72")
    )
    assert stack_shape_fields(delayed)["fused_grouped_mlp"] is False
    # the profiles before 26.08 leave it off
    older = framework_system(
        load_framework("megatron-bridge-25.11-mxfp8"), load_system("gb300-nvl72")
    )
    assert stack_shape_fields(older)["fused_grouped_mlp"] is False
    assert (
        stack_shape_fields(system)["hybridep_budget"],
        stack_shape_fields(older)["hybridep_budget"],
    ) == (
        True,
        False,
    )


def test_a_hybridep_budget_with_the_fused_mlp_needs_no_host_sync():
    # Megatron-Core's HybridEP dispatch sized to moe_expert_rank_capacity_factor's static budget runs
    # non-blocking, and the op-fuser MLP keeps the per-expert counts on the device: no dispatch_host_sync.
    # Without the budget, without the fused MLP (tokens_per_expert.tolist()) or with another dispatcher the
    # dropless dispatch still synchronises.
    hybridep = QWEN._replace(dispatcher="hybridep")
    budget = FUSED._replace(hybridep_budget=True)
    assert "dispatch_host_sync" not in _ops("qwen3-30b-a3b", budget, hybridep)
    for shape, expert in (
        (FUSED, hybridep),
        (FP8._replace(hybridep_budget=True), hybridep),
        (budget, QWEN),
        (budget._replace(dtype="bf16"), hybridep),
    ):
        assert "dispatch_host_sync" in _ops("qwen3-30b-a3b", shape, expert)
    # the rest of the layer is unchanged
    synced = _ops("qwen3-30b-a3b", FUSED, hybridep)
    del synced["dispatch_host_sync"]
    assert synced == _ops("qwen3-30b-a3b", budget, hybridep)


def test_the_dglu_dbias_kernel_only_where_the_fused_experts_carry_a_bias():
    # TE runs the fc2 dgrad as cuDNN's grouped_gemm_dglu_wrapper_sm100 with generate_dbias = fc1_op.has_bias:
    # gpt-oss (biased experts) fused; not unfused, not Qwen3 (no bias)
    assert _ops("gpt-oss-120b", FUSED, GPT_OSS)["expert_fc2"].dgrad_epilogue == "dglu_dbias"
    assert _ops("gpt-oss-120b", FP8, GPT_OSS)["expert_fc2"].dgrad_epilogue is None
    assert _ops("qwen3-30b-a3b", FUSED, QWEN)["expert_fc2"].dgrad_epilogue is None


def test_dglu_dbias_s_by_hand():
    # cudnn-frontend PR #322: 1362.768 us with the regression, 155.632 us after the fix: r = 8.756
    assert dglu_dbias_s(0.5e-3, 8.756) == pytest.approx(4.378e-3, rel=1e-12)
    assert dglu_dbias_s(0.5e-3, 1.0) == 0.5e-3
    assert load_framework("megatron-bridge-26.06.01-mxfp8").moe_dglu_dbias_ratio == pytest.approx(
        1362.768 / 155.632, abs=5e-4
    )
    # the releases around it: v0.5.0 (cudnn-frontend 1.23.0) and v0.6.0 (1.26.0)
    for name in ("megatron-bridge-26.06-mxfp8", "megatron-bridge-26.08-mxfp8"):
        assert load_framework(name).moe_dglu_dbias_ratio == 1.0


def test_the_regressed_release_multiplies_the_fc2_dgrad_call_alone_by_hand():
    # gpt-oss-120b over EP 64: 2 local experts x 8192 rows; fc2 forward (2, 8192, 2880, 2880), its dgrad call
    # (2, 8192, 2880, 2880) of 2 x 2 x 8192 x 2880^2 FLOPs, its wgrad (2, 2880, 2880, 8192) of as many
    op = _ops("gpt-oss-120b", FUSED, GPT_OSS)["expert_fc2"]
    flops = 2.0 * 2 * 8192 * 2880 * 2880
    calls = gemm_calls(op.fwd_flops, op.bwd_flops, op.gemm_shape, op.input_grad)
    assert calls == [
        (flops, (2, 8192, 2880, 2880)),
        (flops, (2, 8192, 2880, 2880)),
        (flops, (2, 2880, 2880, 8192)),
    ]
    gb300 = load_system("gb300-nvl72")
    before = framework_system(load_framework("megatron-bridge-26.06-mxfp8"), gb300).accelerator
    after = framework_system(load_framework("megatron-bridge-26.06.01-mxfp8"), gb300).accelerator

    def call(flops, shape, acc):
        return one_kernel_grouped_s(flops, shape, acc, "fp8") + scale_swizzle_s(shape, acc, "fp8")

    dgrad, wgrad = call(*calls[1], before), call(*calls[2], before)
    forward, backward = op_times_s(op, before, "fp8")
    assert backward == pytest.approx(dgrad + wgrad, rel=1e-12)
    regressed = op_times_s(op, after, "fp8")
    assert regressed[0] == forward
    assert regressed[1] == pytest.approx(8.756 * dgrad + wgrad, rel=1e-12)
    # the same op without the marker (no bias) is priced as before under the regressed release
    assert op_times_s(op._replace(dgrad_epilogue=None), after, "fp8") == (forward, backward)


def test_the_fused_gemms_are_priced_as_one_kernel_by_hand():
    # Qwen3-30B-A3B over EP 8: 16 local experts of 32768 / 16 = 2048 rows; fc1 (16, 2048, 2 x 768, 2048)
    system = framework_system(
        load_framework("megatron-bridge-26.08-mxfp8"), load_system("gb200-nvl72")
    )
    acc = system.accelerator
    fc1 = _ops("qwen3-30b-a3b", FUSED, QWEN)["expert_fc1"]
    assert fc1.gemm_shape == (16, 2048, 1536, 2048)
    flops = 2.0 * 16 * 2048 * 1536 * 2048
    assert fc1.fwd_flops == flops
    # one launch over the experts: the batched GEMM of the dense fp8 rate (one_kernel_grouped_s), whatever the
    # stack's grouped_gemm implementation (te-multistream here, whose fp8 loop keeps the fitted share of the
    # fp8 speed-up)
    assert acc.efficiency.runtime.grouped_gemm == "te-multistream"
    one = gemm_time_s(flops, fc1.gemm_shape, acc, "fp8", leading_dims_aligned=True)
    assert one_kernel_grouped_s(flops, fc1.gemm_shape, acc, "fp8") == one
    loop = te_multistream_grouped_s(flops, fc1.gemm_shape, acc, "fp8")
    assert grouped_gemm_time_s(flops, fc1.gemm_shape, acc, "fp8") == loop
    assert one < loop
    # the op's forward (no scale swizzle under MXFP8) and backward: dgrad (16, 2048, 2048, 1536) and wgrad
    # (16, 2048, 1536, 2048), half the backward's 2 x 2·b·m·n·k FLOPs each
    forward, backward = op_times_s(fc1, acc, "fp8")
    assert forward == one
    dgrad = gemm_time_s(flops, (16, 2048, 2048, 1536), acc, "fp8", leading_dims_aligned=True)
    wgrad = gemm_time_s(flops, (16, 2048, 1536, 2048), acc, "fp8", leading_dims_aligned=True)
    assert math.isclose(backward, dgrad + wgrad)
    # the host launches one kernel forward and two backward, not one per expert
    assert op_kernels(fc1, False) == (1, 2)
    assert op_kernels(fc1._replace(one_kernel=False), False) == (16, 32)


def test_one_kernel_fp8_against_a_measured_mxfp8_grouped_gemm():
    # pytorch/ao torchao/prototype/moe_training/README.md @ 5e79e5ed3 (2026-03-13), "Kernel Microbenchmarks:
    # Breakdown by Pass", NVIDIA B200 at its 1000 W limit, torch 2.11.0.dev20260101+cu128: the MXFP8 grouped
    # GEMM torch._scaled_grouped_mm (one CUTLASS kernel over 8 experts, DeepSeek-V3's expert shapes, 131072
    # tokens) forward (131072, 7168) @ (8, 7168, 2048) 1671.2 us, dgrad (131072, 2048) @ (8, 2048, 7168)
    # 1683.4 us, wgrad (2048, 131072) @ (131072, 7168) 2103.3 us. The one-kernel price of dgx-b200 (in-step
    # fp8 share, one ramp and one kernel overhead) is within 3 % of the first two; the 2D-2D wgrad kernel runs
    # 18 % slower than the dense rate (the README's own note: its wgrad kernel reaches lower speed-ups).
    acc = load_system("dgx-b200").accelerator
    flops = 2.0 * 131072 * 7168 * 2048
    for shape, measured_us in (((8, 16384, 2048, 7168), 1671.2), ((8, 16384, 7168, 2048), 1683.4)):
        priced = one_kernel_grouped_s(flops, shape, acc, "fp8") * 1e6
        assert abs(priced / measured_us - 1.0) < 0.03
    wgrad = one_kernel_grouped_s(flops, (8, 2048, 7168, 16384), acc, "fp8") * 1e6
    assert 0.80 < wgrad / 2103.3 < 0.85
