"""ZeRO-3 gathered per weight tensor (DeepSpeed <= 0.5.4, profile deepspeed-2021): the tensors a block holds,
and the extra step time against a layer-at-once gather, both against hand-computed values."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.estimate import estimate
from paraplan.export import export_plan
from paraplan.frameworks import framework_plan_fields
from paraplan.graph.ops import weight_tensor_count
from paraplan.graph.params import parameter_counts
from paraplan.graph.transformer import LayerShape
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.stages import BLOCK_KINDS


def _tensors(model_name: str, kind: str) -> float:
    model = load_model(model_name)
    graph = BLOCK_KINDS[kind].graph(model, LayerShape(1, 1, 1, 2048, False, "flash", "bf16"))
    return weight_tensor_count(graph, model.has_bias, model.has_qkv_bias, model.norm == "layernorm", model.learned_positions)


def test_weight_tensors_of_a_gpt_and_a_llama_layer():
    """GPT (biases, LayerNorm): QKV, projection, MLP in, MLP out with their biases (8) + two LayerNorms with
    scale and shift (4) = 12; word + position tables = 2; final LayerNorm (2) + output layer (1) = 3.
    Llama (no biases, RMSNorm): 4 weights + 2 norm scales = 6."""
    assert _tensors("gpt3-175b", "decoder") == 12
    assert _tensors("gpt3-175b", "embedding") == 2
    assert _tensors("gpt3-175b", "head") == 3
    assert _tensors("llama3-8b", "decoder") == 6


def test_per_tensor_gather_adds_latency_and_list_copies():
    """GPT-3 1.3B on 16 A100s (2 nodes), ZeRO-3, no overlap: each of the two gathers per micro-batch becomes
    T = 24·12 + 2 + 3 = 293 calls instead of B = 26, each paying the flat-ring latency 14·5 µs + 1·10 µs, and
    every call copies its result into 16 per-rank outputs (16 kernels of 4 µs) and moves the gathered bytes once
    more (2·S / (2039 GB/s · 0.8)), S = 2 bytes per parameter."""
    model, system = load_model("gpt3-1.3b"), load_system("dgx-a100-80gb")
    fields = dict(gpus=16, tp=1, pp=1, dp=16, micro_batch=1, global_batch=16, seq_length=2048, zero=3, dtype="bf16",
                  overlap_param_gather=False, zero3_prefetch_layers=0)
    layer = estimate(model, system, PlanSpec(**fields)).step_time_s
    tensor = estimate(model, system, PlanSpec(**fields, zero3_gather_unit="tensor")).step_time_s
    gathered_bytes = 2.0 * parameter_counts(model).total
    tensors, blocks = 24 * 12 + 2 + 3, 24 + 2
    per_gather = (tensors - blocks) * (14 * 5e-6 + 10e-6) + tensors * 16 * 4e-6 + 2 * gathered_bytes / (2039e9 * 0.8)
    assert tensor - layer == pytest.approx(2 * per_gather, rel=1e-9)


def test_the_2021_deepspeed_profile_gathers_per_tensor_without_overlap():
    fields = framework_plan_fields(load_framework("deepspeed-2021"), {})
    assert fields["zero3_gather_unit"] == "tensor"
    assert fields["overlap_param_gather"] is False and fields["zero3_prefetch_layers"] == 0
    assert framework_plan_fields(load_framework("deepspeed"), {})["zero3_gather_unit"] == "layer"


def test_exporters_refuse_per_tensor_gathers():
    """No launcher option selects a 2021 DeepSpeed's per-parameter gather: every exporter refuses it by name."""
    plan = PlanSpec(gpus=16, tp=1, pp=1, dp=16, micro_batch=1, global_batch=16, seq_length=2048, zero=3,
                    zero3_gather_unit="tensor")
    for framework in ("megatron", "deepspeed", "torchtitan"):
        with pytest.raises(InputError, match="zero3_gather_unit"):
            export_plan(framework, plan)
    below = PlanSpec(gpus=16, tp=1, pp=1, dp=16, micro_batch=1, global_batch=16, seq_length=2048, zero=1,
                     zero3_gather_unit="tensor")
    assert export_plan("megatron", below)  # nothing is gathered per layer below ZeRO-3: the knob is moot
