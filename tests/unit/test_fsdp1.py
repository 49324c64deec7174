"""FSDP1 (FullyShardedDataParallel's flat parameter) beside FSDP2 (issue 33, cost.runtimes.fsdp1_*): each term by
hand, selected by the llm-foundry profile, and through the step."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.runtimes import (
    fsdp1_compute_copy_bytes,
    fsdp1_gather_copy_bytes,
    fsdp1_reduce_copy_bytes,
    fsdp1_reduce_unsharded_bytes,
    runtime_costs,
)
from paraplan.specs.plan import PlanSpec
from paraplan.specs.runtime import RuntimeCosts
from paraplan.specs.system import SystemSpec
from paraplan.step.estimate import estimate


def _with_runtime(system: SystemSpec, **fields) -> SystemSpec:
    data = system.model_dump()
    data["accelerator"]["efficiency"]["runtime"] = RuntimeCosts(**fields).model_dump()
    return SystemSpec.model_validate(data)


def test_fsdp1_bytes_by_hand():
    # compute stream: only the split's backward concatenating the views' bf16 gradients (read 2, write 2);
    # the all-gather writes the flat parameter in place (no copy-in, no copy-out)
    assert fsdp1_compute_copy_bytes(2.0) == 4.0
    # before each all-gather: the fp32 shard cast into the bf16 _mp_shard; nothing without mixed precision
    assert fsdp1_gather_copy_bytes(4.0, 2.0) == 6.0 and fsdp1_gather_copy_bytes(2.0, 2.0) == 0.0
    # unsharded gradient before the reduce-scatter: pre-divide in place (bf16: 2 + 2), cast first when the
    # reduce dtype differs from the param dtype (bf16 -> fp32: 2 + 4, then 4 + 4)
    assert fsdp1_reduce_unsharded_bytes(2.0, 2.0) == 4.0
    assert fsdp1_reduce_unsharded_bytes(2.0, 4.0) == 2 + 4 + 8 == 14.0
    # shard after it: post-divide (2 + 2), cast to fp32 (2 + 4), accumulate (4 + 4 + 4)
    assert fsdp1_reduce_copy_bytes(4.0, 2.0) == 4 + 6 + 12 == 22.0


def test_llm_foundry_runs_fsdp1():
    fw = load_framework("llm-foundry")
    assert fw.fsdp_runtime == "fsdp1" and "fsdp_runtime" in fw.sources
    costs = runtime_costs(fw)  # PURE mixed precision: bf16 params and reduce, fp32 shards
    assert costs == RuntimeCosts(
        zero3_compute_copy_bytes=4.0,
        zero3_gather_copy_bytes=6.0,
        zero3_reduce_unsharded_bytes=4.0,
        zero3_reduce_copy_bytes=22.0,
    )
    # FSDP2 copies out of and into its flat buffers on the compute stream; FSDP1 does not
    fsdp2 = runtime_costs(load_framework("torchtitan"))
    assert costs.zero3_compute_copy_bytes < fsdp2.zero3_compute_copy_bytes


def test_fsdp1_unsharded_gradient_passes_lengthen_the_reduce_scatter():
    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")
    plan = PlanSpec(
        gpus=16,
        zero=3,
        global_batch=64,
        seq_length=4096,
        overlap_param_gather=False,
        overlap_dp_grad_reduce=False,
    )
    base = estimate(model, _with_runtime(system), plan).step_time_s
    side = estimate(model, _with_runtime(system, zero3_reduce_unsharded_bytes=4.0), plan)
    # nothing overlaps: every gathered (unsharded) parameter once per micro-batch, 4 B, at the HBM rate
    rate = system.accelerator.hbm_bandwidth * system.accelerator.efficiency.hbm
    expected = plan.microbatches * 8.03e9 * 4.0 / rate
    assert side.step_time_s - base == pytest.approx(expected, rel=0.01)
    # and nothing without ZeRO-3
    z1 = plan.model_copy(update={"zero": 1})
    assert (
        estimate(model, _with_runtime(system, zero3_reduce_unsharded_bytes=4.0), z1).step_time_s
        == estimate(model, _with_runtime(system), z1).step_time_s
    )
