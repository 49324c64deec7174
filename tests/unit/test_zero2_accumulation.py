"""ZeRO-2 under gradient accumulation (step.tail.zero2_reduces): a stack that reduces every micro-batch's gradients
(DeepSpeed stage 2, FSDP SHARD_GRAD_OP without no_sync: efficiency.runtime.zero2_reduce_per_microbatch) pays m
reduce-scatters per step, ZeRO-1 and Megatron-Core's distributed optimizer one."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.comm import GroupSpan, linear_collective
from paraplan.cost.frameworks import framework_plan_fields, framework_system
from paraplan.graph.params import parameter_counts
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate


def _dp_s(framework: str, zero: int, global_batch: int) -> float:
    fw = load_framework(framework)
    system = framework_system(fw, load_system("dgx-a100-80gb"))
    fields = {
        "gpus": 16,
        "tp": 1,
        "pp": 1,
        "dp": 16,
        "micro_batch": 1,
        "global_batch": global_batch,
        "seq_length": 2048,
        "zero": zero,
    }
    plan = PlanSpec(**framework_plan_fields(fw, fields))
    return estimate(load_model("gpt3-1.3b"), system, plan).breakdown.dp_comm_s


def test_deepspeed_zero2_reduces_each_microbatch_by_hand():
    """GPT-3 1.3B on 16 A100s (two nodes), DeepSpeed profile (overlap_comm off: every reduce-scatter exposed whole),
    4 micro-batches: ZeRO-2 pays three more reduce-scatters than ZeRO-1, each the bf16 gradients (2 B per parameter:
    DeepSpeed's get_data_types keeps a bf16 model's gradients in bf16 under ZeRO, the profile's grad_dtype) in
    ceil(P / 40M) buckets on the 16-rank group (8 per node)."""
    params = parameter_counts(load_model("gpt3-1.3b")).total
    buckets = math.ceil(params / 40e6)
    system = framework_system(load_framework("deepspeed"), load_system("dgx-a100-80gb"))
    form = linear_collective("reduce_scatter", GroupSpan(16, 8, 2), system)
    reduce_scatter = buckets * form.time_s(2.0 * params / buckets)
    zero1, zero2 = _dp_s("deepspeed", 1, 64), _dp_s("deepspeed", 2, 64)
    assert zero2 - zero1 == pytest.approx(3 * reduce_scatter, rel=1e-9)


def test_one_microbatch_and_megatron_reduce_once():
    """One micro-batch: ZeRO-2 communicates as ZeRO-1 (llmfoundry MPT-1b); Megatron-Core's distributed optimizer
    reduces once per step whatever m."""
    assert _dp_s("deepspeed", 2, 16) == pytest.approx(_dp_s("deepspeed", 1, 16), rel=1e-12)
    assert _dp_s("megatron-core", 2, 64) == pytest.approx(_dp_s("megatron-core", 1, 64), rel=1e-12)
