"""Hardware FLOPs (HFU) under torch.utils.checkpoint's early stop: a full recomputation does not re-run a
block's MLP output GEMM (graph.ops.early_stop_tail), so the hardware FLOPs leave out its 2·f·h per token
per layer (step.stage_totals.early_stop_flops_per_token) on the uniform (step.estimate) and the per-stage
(step.per_stage) paths; docs/model.md "Full recomputation's early stop"."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost.flops import mlp_output_flops_per_token
from paraplan.cost.frameworks import apply_framework
from paraplan.graph.layers import decoder_layer
from paraplan.graph.ops import Op, early_stop_tail
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec
from paraplan.specs.runtime import PARALLELISMS
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.specs.uniform_stages import uniform_stage_plan
from paraplan.step.estimate import estimate, layer_shape
from paraplan.step.per_stage import estimate_stage_plan

# a small GPT: L = 2, h = 256, a = 4 heads, f = 1024, V = 1000, GeLU, LayerNorm, no dropout
GPT = {
    "name": "tiny-gpt",
    "layers": 2,
    "hidden": 256,
    "heads": 4,
    "ffn_hidden": 1024,
    "vocab": 1000,
    "max_position": 128,
    "mlp": "gelu",
    "norm": "layernorm",
    "position_embedding": "learned",
    "dropout": False,
}
PLAN = {"gpus": 1, "micro_batch": 2, "global_batch": 2, "seq_length": 128, "attention": "flash"}
TOKENS = 2 * 128
# by hand: matmul parameters N = L·(h·3h + h·h + h·f + f·h) + V·h = 2·786_432 + 256_000 = 1_828_864;
# attention per layer and pass 2·(s+1)/2·(h + h) = 2·64.5·512 = 66_048
MODEL_PER_TOKEN = 6 * 1_828_864 + 3 * 2 * 66_048  # 11_369_472: 6·N + 3 passes of attention
RECOMPUTE_PER_TOKEN = 2 * 1_572_864 + 2 * 66_048  # 3_277_824: 2·N_layers + one pass of attention
OUTPUT_GEMM_PER_TOKEN = 2 * 2 * 1024 * 256  # 1_048_576: 2·f·h per layer, L = 2


def _estimate(framework: str, every_parallelism: bool = False, **plan):
    """The tiny GPT under ``framework``'s profile. ``every_parallelism``: the profile with every parallel kind
    allowed (the eager profiles' one-device loops run no pipeline, specs.rules_stack.stack_parallelism_rules;
    the two-stage tests check the FLOP rule on their stack all the same)."""
    model = ModelSpec(**GPT)
    profile = load_framework(framework)
    if every_parallelism:
        profile = profile.model_copy(update={"parallelism": PARALLELISMS})
    system, fields = apply_framework(profile, load_system("dgx-h100-80gb"), PLAN | plan)
    return model, system, PlanSpec(**fields)


def test_hardware_flops_leave_out_the_output_gemm_by_hand():
    model, system, plan = _estimate("pytorch-eager", recompute="full")
    est = estimate(model, system, plan)
    assert est.model_flops_per_step == TOKENS * MODEL_PER_TOKEN  # 2_910_584_832
    # 256 · (11_369_472 + 3_277_824 − 1_048_576) = 3_481_272_320
    assert est.hardware_flops_per_step == pytest.approx(3_481_272_320, rel=1e-12)
    assert est.hardware_flops_per_step == pytest.approx(
        TOKENS * (MODEL_PER_TOKEN + RECOMPUTE_PER_TOKEN - OUTPUT_GEMM_PER_TOKEN), rel=1e-12
    )
    assert est.hfu == pytest.approx(
        3_481_272_320 / est.step_time_s / est.peak_flops_per_gpu, rel=1e-12
    )


@pytest.mark.parametrize("framework", ["pytorch-compile", "megatron-core"])
def test_a_profile_without_the_early_stop_counts_the_whole_forward(framework):
    model, system, plan = _estimate(framework, recompute="full")
    assert not system.accelerator.efficiency.checkpoint_early_stop
    # 256 · (11_369_472 + 3_277_824) = 3_749_707_776
    assert estimate(model, system, plan).hardware_flops_per_step == pytest.approx(
        3_749_707_776, rel=1e-12
    )


def test_no_tail_no_change():
    """Selective recomputation re-runs no output GEMM; a dropout before the residual add saves its mask after
    the GEMM ran (graph.ops.early_stop_tail: dropout_add), so the whole forward re-runs."""
    model, system, plan = _estimate("pytorch-eager", recompute="selective")
    assert estimate(model, system, plan).hardware_flops_per_step == pytest.approx(
        TOKENS * (MODEL_PER_TOKEN + 2 * 66_048),
        rel=1e-12,  # the attention core, one pass per layer
    )
    model, system, plan = _estimate("pytorch-eager", recompute="full")
    dropout = model.model_copy(update={"dropout": True})
    assert estimate(dropout, system, plan).hardware_flops_per_step == pytest.approx(
        TOKENS * (MODEL_PER_TOKEN + RECOMPUTE_PER_TOKEN), rel=1e-12
    )


def test_the_tail_gemm_is_two_f_h_per_token():
    """The closed form the FLOP count takes out is the graph's tail GEMM: 2·(b·s)·h·f on one GPU (tp = 1)."""
    model, system, plan = _estimate("pytorch-eager", recompute="full")
    tail = early_stop_tail(decoder_layer(model, layer_shape(plan, system)).ops)
    assert [op.name for op in tail] == ["mlp_out_projection", "mlp_residual"]
    assert tail[0].fwd_flops == TOKENS * mlp_output_flops_per_token(model) == TOKENS * 524_288


def test_no_tail_after_an_fp8_cast():
    gemm = Op("mlp_out_projection", "gemm", 1.0, 1.0, 2.0, 2.0)
    add = Op("mlp_residual", "memory", 0.0, 1.0, 0.0, 1.0, kernel=("add", 8.0, 4.0))
    cast = Op("fp8_cast", "memory", 0.0, 1.0, 0.0, 1.0)
    assert early_stop_tail((gemm, add)) == (gemm, add)
    assert early_stop_tail((gemm, add, cast)) == ()


def test_per_stage_counts_each_fully_recomputed_stage():
    """Stage 0 (layer 1) fully recomputed, stage 1 (layer 2) not: the hardware FLOPs add stage 0's half of
    the recomputation less its one output GEMM, 256 · (11_369_472 + 3_277_824 / 2 − 524_288)."""
    model, system, _ = _estimate("pytorch-eager", every_parallelism=True, recompute="full")
    cluster = uniform_cluster(system, 2)
    pool = cluster.pools[0].name
    plan = stage_plan_from_dict(
        {
            "global_batch": 2,
            "seq_length": 128,
            "microbatches": 1,
            "dtype": "bf16",
            "attention": "flash",
            "stages": [
                {"pool": pool, "gpus": 1, "layers": 1, "recompute": "full"},
                {"pool": pool, "gpus": 1, "layers": 1},
            ],
        }
    )
    est = estimate_stage_plan(model, cluster, plan)
    assert est.hardware_flops_per_step == pytest.approx(
        256 * (11_369_472 + 3_277_824 / 2 - 524_288), rel=1e-12
    )


@pytest.mark.parametrize("framework", ["pytorch-eager", "pytorch-eager-bf16", "pytorch-compile"])
def test_uniform_and_per_stage_hardware_flops_agree(framework):
    model, system, plan = _estimate(
        framework, every_parallelism=True, recompute="full", gpus=4, pp=2, dp=2, global_batch=4
    )
    cluster = uniform_cluster(system, plan.gpus)
    uniform = estimate(model, system, plan)
    per_stage = estimate_stage_plan(
        model, cluster, uniform_stage_plan(plan, model, cluster.pools[0].name)
    )
    assert per_stage.hardware_flops_per_step == pytest.approx(
        uniform.hardware_flops_per_step, rel=1e-12
    )
    assert per_stage.step_time_s == pytest.approx(uniform.step_time_s, rel=1e-9)
