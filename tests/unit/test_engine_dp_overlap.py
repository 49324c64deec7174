"""specs.rules_stack.engine_dp_overlap_rule: DeepSpeed's PipelineEngine never overlaps the data-parallel
reduction with the backward (enable_backward_allreduce = False, pipe/engine.py at 0050fdad), so with pp > 1
a plan stating overlap_dp_grad_reduce true is refused on every path (the uniform estimate, the per-stage
plan, the uniform search's state options, the per-stage searches' depths), and at pp = 1 (DeepSpeedEngine,
whose ZeRO hooks may overlap) both paths price the switch alike. The defect: GPT-3 1.3B on 8 A100s, pp 2,
zero 1, bf16 priced 0.94222 s uniform against 0.94583 s per stage under `deepspeed` (1.08118 against 1.08821 s
under `megatron-deepspeed`)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import apply_framework, framework_system
from paraplan.specs.errors import InputError
from paraplan.specs.rules_stack import engine_dp_overlap_rule
from paraplan.specs.plan import PlanSpec
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.step.estimate import estimate
from tests.unit.test_one_path import assert_same, both_paths

PLAN = {"gpus": 8, "tp": 1, "micro_batch": 4, "global_batch": 64, "seq_length": 2048, "zero": 1}


def test_the_rule_names_field_value_and_allowed():
    rule = engine_dp_overlap_rule("deepspeed", True, 2)
    assert rule == (
        "DeepSpeed's PipelineEngine (pipeline engine deepspeed) reduces the data-parallel gradients "
        "after the last backward (enable_backward_allreduce = False) with pp=2; allowed: false (or pp=1)"
    )
    assert engine_dp_overlap_rule("deepspeed", False, 2) is None
    assert engine_dp_overlap_rule("deepspeed", True, 1) is None  # DeepSpeedEngine, no pipeline
    assert engine_dp_overlap_rule("megatron", True, 4) is None


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-deepspeed"])
def test_a_stated_overlap_with_pp_is_refused_on_both_paths(framework):
    system, fields = apply_framework(
        load_framework(framework),
        load_system("dgx-a100-80gb"),
        PLAN | {"pp": 2, "overlap_dp_grad_reduce": True},
    )
    with pytest.raises(InputError) as uniform:
        estimate(load_model("gpt3-1.3b"), system, PlanSpec(**fields))
    assert str(uniform.value) == (
        "plan.overlap_dp_grad_reduce: True is not allowed; DeepSpeed's PipelineEngine (pipeline engine "
        "deepspeed) reduces the data-parallel gradients after the last backward "
        "(enable_backward_allreduce = False) with pp=2; allowed: false (or pp=1)"
    )
    stages = [{"pool": "p", "gpus": 4, "layers": 12}] * 2
    data = {"global_batch": 64, "seq_length": 2048, "microbatches": 4, "engine": "deepspeed"}
    with pytest.raises(InputError, match="overlap_dp_grad_reduce=True: DeepSpeed's PipelineEngine"):
        stage_plan_from_dict(data | {"stages": stages, "overlap_dp_grad_reduce": True})
    # left unset: the engine's (false with pp > 1, true with one stage or on Megatron's engine)
    assert not stage_plan_from_dict(data | {"stages": stages}).overlap_dp_grad_reduce
    assert stage_plan_from_dict(data | {"stages": stages[:1]}).overlap_dp_grad_reduce
    assert stage_plan_from_dict(
        data | {"stages": stages, "engine": "megatron"}
    ).overlap_dp_grad_reduce


@pytest.mark.parametrize("framework", ["deepspeed", "megatron-deepspeed"])
def test_both_paths_price_the_switch_alike_at_pp_1(framework):
    """At pp = 1 both paths honour the stated switch (the per-stage engine once priced it off)."""
    on = both_paths("gpt3-1.3b", "dgx-a100-80gb", framework, overlap_dp_grad_reduce=True, **PLAN)
    off = both_paths("gpt3-1.3b", "dgx-a100-80gb", framework, overlap_dp_grad_reduce=False, **PLAN)
    assert_same(*on)
    assert_same(*off)
    assert on[1].step_time_s < off[1].step_time_s  # the overlap is priced on the per-stage path too


def test_the_search_offers_one_state_per_zero_stage_with_pp(small_problem):
    """The uniform search's state options under a DeepSpeed profile with every overlap varied: with pp > 1
    none overlaps the reduction (no two rows for one state), at pp = 1 both are offered."""
    for framework in ("deepspeed", "megatron-deepspeed"):
        system = framework_system(load_framework(framework), load_system("dgx-a100-80gb"))
        problem = small_problem(system=system, framework=framework, vary_overlap=True)
        with_pp = problem.state_options(4, 2)
        assert with_pp and not any(o.overlap_dp_grad_reduce for o in with_pp)
        assert not problem.state_options(1, 8)[0].overlap_dp_grad_reduce
        assert {o.overlap_dp_grad_reduce for o in problem.state_options(8, 1)} == {True, False}
