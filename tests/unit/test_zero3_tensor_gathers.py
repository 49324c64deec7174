"""ZeRO-3 gathered per weight tensor (DeepSpeed <= 0.5.4, profile deepspeed-2021): the tensors a block holds,
and the extra step time against a layer-at-once gather, both against hand-computed values."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.step.estimate import estimate
from paraplan.export import export_plan
from paraplan.cost.frameworks import framework_plan_fields
from paraplan.graph.ops import weight_stat_fields, weight_tensor_stats
from paraplan.graph.params import parameter_counts
from paraplan.graph.transformer import LayerShape
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.step.build import BLOCK_KINDS


def _tensors(model_name: str, kind: str) -> float:
    model = load_model(model_name)
    graph = BLOCK_KINDS[kind].graph(model, LayerShape(1, 1, 1, 2048, False, "flash", "bf16"))
    return weight_tensor_stats(graph, *weight_stat_fields(model))[0]


def test_weight_tensors_of_a_gpt_and_a_llama_layer():
    """GPT (biases, LayerNorm): QKV, projection, MLP in, MLP out with their biases (8) + two LayerNorms with
    scale and shift (4) = 12; word + position tables = 2; final LayerNorm (2) + output layer (1) = 3.
    Llama (no biases, RMSNorm): 4 weights + 2 norm scales = 6."""
    assert _tensors("gpt3-175b", "decoder") == 12
    assert _tensors("gpt3-175b", "embedding") == 2
    assert _tensors("gpt3-175b", "head") == 3
    assert _tensors("llama3-8b", "decoder") == 6


def test_per_tensor_gather_adds_latency_and_list_copies():
    """GPT-3 1.3B on 16 A100s (2 nodes), ZeRO-3, no overlap, one micro-batch per step. Of the T = 24·12 + 2 + 3 − 1 = 292
    weight tensors (the output layer's weight is the word table it is tied to, on the one stage: one tensor, review
    finding 8), the 24·8 + 2 biases and norm weights are below DeepSpeed's persistence threshold (1e5 elements) and
    stay gathered, so each of the two gathers per micro-batch is G = 24·4 + 2 = 98 calls instead of B = 26, each
    paying the flat-ring latency 14·5 µs + 1·10 µs, its 16 list copies (4 µs kernels) and 16 partition views (1.4 µs),
    the measured fixed host time 380 µs − 8·(1.4 + 4) µs, and moving the gathered bytes three more times (zeroed
    buffer: S, list copies: 2·S; S = 2 bytes per parameter over 2039 GB/s · 0.8). Once per step the persistent
    tensors are gathered in one call (its latency, 16 copies and 16 views) and copied back in a loop over the 16 ranks
    (pieces ⌈s/⌈s/16⌉⌉ = 16 each: 3 views and 1 copy kernel per piece, plus the own-partition copy per tensor)."""
    model, system = load_model("gpt3-1.3b"), load_system("dgx-a100-80gb")
    fields = dict(
        gpus=16,
        tp=1,
        pp=1,
        dp=16,
        micro_batch=1,
        global_batch=16,
        seq_length=2048,
        zero=3,
        dtype="bf16",
        overlap_param_gather=False,
        zero3_prefetch_layers=0,
    )
    layer = estimate(model, system, PlanSpec(**fields)).step_time_s
    tensor = estimate(model, system, PlanSpec(**fields, zero3_gather_unit="tensor")).step_time_s
    gathered_bytes = 2.0 * parameter_counts(model).total
    hbm = 2039e9 * 0.8
    latency, kernel, view = 14 * 5e-6 + 10e-6, 4e-6, 1.4e-6
    calls, blocks, small = 24 * 4 + 2, 24 + 2, 24 * 8 + 2  # word + position tables, no second copy
    per_gather = (
        (calls - blocks) * latency
        + calls * 16 * (kernel + view)
        + 3 * gathered_bytes / hbm
        + calls * (380e-6 - 8 * (view + kernel))
    )
    post_step = latency + 16 * kernel + 16 * view + small * (kernel + 16 * (3 * view + kernel))
    assert tensor - layer == pytest.approx(2 * per_gather + post_step, rel=1e-9)


def test_persistent_tensors_are_the_biases_and_norms():
    """DeepSpeed keeps parameters under 1e5 elements gathered: a GPT-3 175B layer's four biases (3h, h, 4h, h) and
    two LayerNorms' scale and shift (h each), h = 12288; Llama's RMSNorm scales (4096); no weight matrix."""

    def small(name: str, kind: str) -> list[float]:
        model = load_model(name)
        graph = BLOCK_KINDS[kind].graph(model, LayerShape(1, 1, 1, 2048, False, "flash", "bf16"))
        return sorted(weight_tensor_stats(graph, *weight_stat_fields(model))[2])

    h = 12288.0
    assert small("gpt3-175b", "decoder") == sorted([3 * h, h, 4 * h, h] + [h] * 4)
    assert small("gpt3-175b", "head") == [h, h] and small("gpt3-175b", "embedding") == []
    assert small("llama3-8b", "decoder") == [4096.0, 4096.0]


def test_the_2021_deepspeed_profile_gathers_per_tensor_without_overlap():
    fields = framework_plan_fields(load_framework("deepspeed-2021"), {})
    assert fields["zero3_gather_unit"] == "tensor" and fields["zero3_reduce_unit"] == "tensor"
    assert fields["zero3_regather_recompute"] is True and fields["grad_dtype"] == "bf16"
    assert fields["overlap_param_gather"] is False and fields["zero3_prefetch_layers"] == 0
    modern = framework_plan_fields(load_framework("deepspeed"), {})
    assert modern["zero3_gather_unit"] == "layer" and modern["zero3_reduce_unit"] == "layer"
    assert modern["zero3_regather_recompute"] is False


def test_exporters_refuse_per_tensor_gathers():
    """No launcher option selects a 2021 DeepSpeed's per-parameter gather: every exporter refuses it by name."""
    plan = PlanSpec(
        gpus=16,
        tp=1,
        pp=1,
        dp=16,
        micro_batch=1,
        global_batch=16,
        seq_length=2048,
        zero=3,
        zero3_gather_unit="tensor",
    )
    for framework in ("megatron", "deepspeed", "torchtitan"):
        with pytest.raises(InputError, match="zero3_gather_unit"):
            export_plan(framework, plan)
    for knob, value in (("zero3_reduce_unit", "tensor"), ("zero3_regather_recompute", True)):
        other = PlanSpec(
            gpus=16,
            tp=1,
            pp=1,
            dp=16,
            micro_batch=1,
            global_batch=16,
            seq_length=2048,
            zero=3,
            **{knob: value},
        )
        for framework in ("megatron", "deepspeed", "torchtitan"):
            with pytest.raises(InputError, match=knob):
                export_plan(framework, other)
    below = PlanSpec(
        gpus=16,
        tp=1,
        pp=1,
        dp=16,
        micro_batch=1,
        global_batch=16,
        seq_length=2048,
        zero=1,
        zero3_gather_unit="tensor",
    )
    assert export_plan(
        "megatron", below
    )  # nothing is gathered per layer below ZeRO-3: the knob is moot
