"""ZeRO-3's resident gathered weights: two whole layers (FSDP), or DeepSpeed's cap on live parameters
(stage3_max_live_parameters), never below the block's largest weight tensor. Hand-computed values."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.step.estimate import estimate
from paraplan.cost.frameworks import apply_framework, framework_plan_fields
from paraplan.graph.ops import largest_weight_params
from paraplan.graph.transformer import LayerShape
from paraplan.specs.plan import PlanSpec
from paraplan.step.build import BLOCK_KINDS

H_530B = 20480  # Korthikanti et al. 2022 Table 3


def _decoder(model_name: str, tp: int):
    model = load_model(model_name)
    shape = LayerShape(tp, 1, 1, 2048, False, "unfused", "fp16")
    return model, BLOCK_KINDS["decoder"].graph(model, shape)


@pytest.mark.parametrize("tp", [1, 8])
def test_largest_weight_is_the_mlp_projection(tp):
    """GPT-3 175B (h 12288, ffn 4h): QKV h×3h, projection h×h, MLP in h×4h, out 4h×h; the largest is 4h²/t."""
    _, graph = _decoder("gpt3-175b", tp)
    assert largest_weight_params(graph) == 4 * 12288**2 / tp


def _buffers(plan_fields: dict) -> float:
    model, system = load_model("mt-nlg-530b"), load_system("dgx-a100-80gb")
    plan = PlanSpec(
        gpus=640,
        tp=1,
        pp=1,
        dp=640,
        micro_batch=4,
        global_batch=2560,
        recompute="full",
        zero=3,
        seq_length=2048,
        dtype="fp16",
        attention="unfused",
        **plan_fields,
    )
    return estimate(model, system, plan).peak_stage.buffers_bytes


def test_deepspeed_cap_holds_the_largest_tensor_instead_of_two_layers():
    """530B with the 1e9 cap: min(2·layer, max(1e9, 4h²)) = 4h² = 1.68e9 parameters (the MLP weight is
    larger than the cap and must be whole), so the buffer shrinks by (2·layer − 4h²) × 2 B (fp16)."""
    _, graph = _decoder("mt-nlg-530b", 1)
    layer = graph.weight_params
    assert 4 * H_530B**2 > 1e9 and 2 * layer > 4 * H_530B**2
    uncapped, capped = _buffers({}), _buffers({"zero3_max_live_params": 1e9})
    assert math.isclose(uncapped - capped, (2 * layer - 4 * H_530B**2) * 2, rel_tol=1e-12)


def test_cap_above_two_layers_changes_nothing_and_a_small_cap_stops_at_the_largest_tensor():
    _, graph = _decoder("mt-nlg-530b", 1)
    assert _buffers({"zero3_max_live_params": 3 * graph.weight_params}) == _buffers({})
    assert _buffers({"zero3_max_live_params": 1.0}) == _buffers({"zero3_max_live_params": 1e9})


def test_deepspeed_profile_sets_the_cap_and_megatron_does_not():
    assert load_framework("deepspeed").zero3_max_live_params == 1e9
    assert framework_plan_fields(load_framework("deepspeed"), {})["zero3_max_live_params"] == 1e9
    assert (
        framework_plan_fields(load_framework("megatron-core"), {})["zero3_max_live_params"] is None
    )


def test_published_530b_zero3_run_fits_under_deepspeed():
    """Narayanan et al. 2021 Table 2 trained 530B with ZeRO-3 on 640 A100s at micro-batch 4 (the
    validation case narayanan2021-tab2-zero3-530b-640): two whole gathered layers (20 GB) would not fit."""
    model, system = load_model("mt-nlg-530b"), load_system("dgx-a100-80gb")
    fields = dict(
        gpus=640,
        tp=1,
        pp=1,
        dp=640,
        micro_batch=4,
        global_batch=2560,
        recompute="full",
        zero=3,
        seq_length=2048,
        dtype="fp16",
        attention="unfused",
    )
    profile = load_framework("deepspeed")
    ds_system, ds_fields = apply_framework(profile, system, fields)
    assert estimate(model, ds_system, PlanSpec(**ds_fields)).fits
    assert not estimate(
        model, ds_system, PlanSpec(**{**ds_fields, "zero3_max_live_params": None})
    ).fits


def _zero3(prefetch: int, overlap: bool = True, **extra):
    model, system = load_model("gpt3-13b"), load_system("dgx-a100-80gb")
    plan = PlanSpec(
        gpus=64,
        tp=1,
        pp=1,
        dp=64,
        micro_batch=1,
        global_batch=64,
        seq_length=2048,
        zero=3,
        recompute="full",
        zero3_prefetch_layers=prefetch,
        overlap_param_gather=overlap,
        **extra,
    )
    return estimate(model, system, plan)


def test_prefetch_depth_sets_the_gathered_layers_resident():
    """(1 + d) whole layers (d = prefetch depth): the buffers grow by one layer of bf16 weights (2 B per
    parameter) per prefetched layer, with or without the gather overlapped (step.compose.zero3_gathered_bytes)."""
    _, graph = _decoder("gpt3-13b", 1)
    layer_bytes = 2 * graph.weight_params
    b0, b1, b2 = (_zero3(d).peak_stage.buffers_bytes for d in (0, 1, 2))
    assert math.isclose(b1 - b0, layer_bytes, rel_tol=1e-12) and math.isclose(
        b2 - b1, layer_bytes, rel_tol=1e-12
    )
    assert _zero3(2, overlap=False).peak_stage.buffers_bytes == b2


def test_prefetch_depth_hides_gathers_and_the_profile_sets_it():
    """Depth 0 leaves every per-layer gather exposed (cost.overlap.prefetched_gather_exposed_s); the
    megatron-lm-2021 profile has no ZeRO-3 prefetch, the others prefetch one layer."""
    assert _zero3(0).step_time_s > _zero3(1).step_time_s
    assert (
        framework_plan_fields(load_framework("megatron-lm-2021"), {})["zero3_prefetch_layers"] == 0
    )
    assert framework_plan_fields(load_framework("torchtitan"), {})["zero3_prefetch_layers"] == 1
