"""Eager stacks with a measured kernel table attached (cost.kernel_tables, cost.compute; issue 32)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.compute import memory_time_s
from paraplan.cost.frameworks import framework_system
from paraplan.specs.plan import PlanSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.estimate import estimate

H100_TABLE = "h100-sxm5-80gb"


def attached(system: SystemSpec, ref: str = H100_TABLE) -> SystemSpec:
    acc = system.accelerator.model_copy(update={"kernel_tables": ref})
    return SystemSpec.model_validate({**system.model_dump(), "accelerator": acc.model_dump()})


def test_the_eager_traffic_factor_applies_with_a_table_attached_too():
    base = load_system("dgx-h100-80gb")
    eager = load_framework("pytorch-eager")
    f = eager.eager_traffic_factor
    assert f > 1
    for system in (base, attached(base)):
        fused = framework_system(load_framework("pytorch-compile"), system).accelerator
        slow = framework_system(eager, system).accelerator
        for size in (3e7, 4e8, 3e9):
            assert memory_time_s(size, slow) == pytest.approx(memory_time_s(f * size, fused))
            assert memory_time_s(size, slow) > memory_time_s(size, fused)


def test_an_eager_step_is_slower_than_the_same_step_fused_with_a_table_attached():
    model = load_model("gpt3-350m")
    plan = PlanSpec(gpus=1, micro_batch=4, global_batch=4, seq_length=2048, dtype="bf16")
    system = attached(load_system("dgx-h100-80gb"))
    eager = load_framework("pytorch-eager")
    fused = eager.model_copy(update={"fused_kernels": True})
    t_eager = estimate(model, framework_system(eager, system), plan).step_time_s
    t_fused = estimate(model, framework_system(fused, system), plan).step_time_s
    assert t_eager > 1.02 * t_fused
