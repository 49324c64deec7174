"""specs.rules_stack.engine_dp_overlap_rule: DeepSpeed's PipelineEngine never overlaps the data-parallel
reduction with the backward (enable_backward_allreduce = False, pipe/engine.py at 0050fdad), so with pp > 1
a plan stating overlap_dp_grad_reduce true is refused on every path (the uniform estimate, the per-stage
plan, the uniform search's state options, the per-stage searches' depths), and at pp = 1 (DeepSpeedEngine,
whose ZeRO-1 optimizer's overlap_comm hooks may overlap) both paths price the switch alike. The defect: GPT-3
1.3B on 8 A100s, pp 2, zero 1, bf16 priced 0.94222 s uniform against 0.94583 s per stage under `deepspeed`
(1.08118 against 1.08821 s under `megatron-deepspeed`). At any depth DeepSpeedEngine reduces after the
backward (buffered_allreduce_fallback, engine.py at 0050fdad) at ZeRO 0 and under the BF16_Optimizer at ZeRO
1 (specs.rules_stack.deepspeed_allreduce_fallback), so the switch is refused there too. The defect: GPT-3
1.3B on 16 A100s, mb 4, gb 64, bf16, zero 0, pp 1 under `deepspeed` priced 0.44474 s with the overlap
against 0.47661 s without, and the search ranked the overlap first."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.cost.frameworks import apply_framework, framework_cluster, framework_system
from paraplan.specs.errors import InputError
from paraplan.specs.rules_stack import deepspeed_allreduce_fallback, engine_dp_overlap_rule
from paraplan.specs.plan import PlanSpec, runtime_of
from paraplan.specs.stage_plan import settled_stage_plan, stage_plan_from_dict
from paraplan.step.estimate import estimate
from tests.unit.test_one_path import assert_same, both_paths

PLAN = {"gpus": 8, "tp": 1, "micro_batch": 4, "global_batch": 64, "seq_length": 2048, "zero": 1}


def pool_cluster(framework: str | None, system: str = "dgx-a100-80gb", nodes: int = 1):
    """One pool ``p`` of ``system`` under ``framework``'s stack (None: the system as it is)."""
    cluster = cluster_from_dict({"pools": [{"name": "p", "system": system, "nodes": nodes}]})
    return cluster if framework is None else framework_cluster(load_framework(framework), cluster)


def test_the_rule_names_field_value_and_allowed():
    rule = engine_dp_overlap_rule("deepspeed", True, 2)
    assert rule == (
        "DeepSpeed's PipelineEngine (pipeline engine deepspeed) reduces the data-parallel gradients "
        "after the last backward (enable_backward_allreduce = False) with pp=2; allowed: false (or pp=1)"
    )
    assert engine_dp_overlap_rule("deepspeed", False, 2) is None
    assert engine_dp_overlap_rule("deepspeed", True, 1) is None  # DeepSpeedEngine, no pipeline
    assert engine_dp_overlap_rule("megatron", True, 4) is None
    fallback = (
        "DeepSpeedEngine reduces the data-parallel gradients after the backward "
        "(buffered_allreduce_fallback) at ZeRO 0 and under the BF16_Optimizer at ZeRO 1; allowed: false"
    )
    assert engine_dp_overlap_rule("none", True, 1, True) == fallback
    assert engine_dp_overlap_rule("deepspeed", False, 1, True) is None


def test_the_fallback_is_zero_0_and_the_bf16_optimizer_at_zero_1():
    """engine.py allreduce_gradients at 0050fdad: zero 0 falls back whatever the optimizer; zero 1 only
    where the optimizer has no reduce_gradients (the BF16_Optimizer); ZeRO 2/3 hook the backward."""
    assert deepspeed_allreduce_fallback(0, False) and deepspeed_allreduce_fallback(0, True)
    assert deepspeed_allreduce_fallback(1, True)
    assert not deepspeed_allreduce_fallback(1, False)
    assert not deepspeed_allreduce_fallback(2, True) and not deepspeed_allreduce_fallback(3, True)


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
    # left unset: decided with the pools (specs.stage_plan.settled_stage_plan): false with pp > 1 and at
    # zero 0, true with one stage at zero 1 with bf16 gradients; on Megatron's engine false over this
    # profile's pools (DeepSpeed's optimizers: DeepSpeedEngine falls back at zero 0), true over a plain pool
    pools = pool_cluster(framework)

    def settled(fields: dict, cluster=pools) -> bool:
        return settled_stage_plan(
            stage_plan_from_dict(data | fields), cluster
        ).overlap_dp_grad_reduce

    assert stage_plan_from_dict(data | {"stages": stages}).overlap_dp_grad_reduce is None
    assert settled({"stages": stages}) is False
    assert settled({"stages": stages[:1]}) is False
    zero1 = {"stages": stages[:1], "zero": 1, "grad_dtype": "bf16"}  # the ZeRO-1 optimizer
    assert settled(zero1) is True
    bf16_optimizer = zero1 | {"grad_dtype": "fp32"}  # the BF16_Optimizer at zero 1
    assert settled(bf16_optimizer) is False
    assert settled({"stages": stages, "engine": "megatron"}) is False
    assert settled({"stages": stages, "engine": "megatron"}, pool_cluster(None)) is True


def test_both_paths_price_the_switch_alike_at_pp_1():
    """At pp = 1, zero 1 with the ZeRO-1 optimizer (the deepspeed profile's bf16 gradients) both paths
    honour the stated switch (the per-stage engine once priced it off)."""
    framework = "deepspeed"
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


FALLBACK = (
    "plan.overlap_dp_grad_reduce: True is not allowed; DeepSpeedEngine reduces the data-parallel "
    "gradients after the backward (buffered_allreduce_fallback) at ZeRO 0 and under the "
    "BF16_Optimizer at ZeRO 1; allowed: false"
)


@pytest.mark.parametrize(
    ("framework", "zero"),
    [
        ("deepspeed", 0),
        ("megatron-deepspeed", 0),
        ("hf-transformers-deepspeed", 0),
        ("megatron-deepspeed", 1),  # grad_dtype fp32: the BF16_Optimizer at zero 1
    ],
)
def test_a_stated_overlap_where_deepspeed_falls_back_is_refused_at_pp_1(framework, zero):
    """The reviewer's case: GPT-3 1.3B, 16 A100s, mb 4, gb 64, bf16, pp 1 (once 0.44474 s with the
    overlap against 0.47661 s without under `deepspeed` at zero 0)."""
    plan = PLAN | {"gpus": 16, "pp": 1, "zero": zero, "overlap_dp_grad_reduce": True}
    system, fields = apply_framework(load_framework(framework), load_system("dgx-a100-80gb"), plan)
    with pytest.raises(InputError) as uniform:
        estimate(load_model("gpt3-1.3b"), system, PlanSpec(**fields))
    assert str(uniform.value) == FALLBACK
    off = estimate(
        load_model("gpt3-1.3b"), system, PlanSpec(**fields | {"overlap_dp_grad_reduce": False})
    )
    assert off.step_time_s > 0


def test_the_fallback_keeps_zero_1_with_the_optimizer_offloaded():
    """With the optimizer offloaded DeepSpeed runs its ZeRO-1 optimizer, not the BF16_Optimizer
    (_do_optimizer_sanity_check: not self.zero_cpu_offload()): the overlap is allowed."""
    plan = PLAN | {"pp": 1, "zero": 1, "overlap_dp_grad_reduce": True, "offload_optimizer": True}
    framework = load_framework("megatron-deepspeed")
    system, fields = apply_framework(framework, load_system("dgx-a100-80gb"), plan)
    assert estimate(load_model("gpt3-1.3b"), system, PlanSpec(**fields)).step_time_s > 0


def test_the_search_offers_no_overlap_where_deepspeed_falls_back(small_problem):
    """The uniform search at pp = 1 with every overlap varied: zero 0 (and zero 1 under the
    BF16_Optimizer, megatron-deepspeed's fp32 gradients, where no optimizer offload is searched) offers
    the overlap off only; zero 1 with the ZeRO-1 optimizer (deepspeed) and zero 2 offer both. With the
    optimizer offload searched megatron-deepspeed's zero 1 offers both too, the overlap on offloaded
    candidates only (search.grid_axes.GridAxes.refused; tests/search/test_offload_fallback_search.py)."""
    cases = (("deepspeed", {0}, True), ("megatron-deepspeed", {0, 1}, False))
    cases += (("megatron-deepspeed", {0}, True),)
    for framework, refused, vary_offload in cases:
        system = framework_system(load_framework(framework), load_system("dgx-a100-80gb"))
        profile = load_framework(framework)
        runtime = runtime_of(profile)
        problem = small_problem(
            system=system,
            framework=framework,
            vary_overlap=True,
            runtime=runtime,
            vary_offload=vary_offload,
        )
        options = problem.state_options(8, 1)
        for zero in (0, 1, 2):
            ran = {o.overlap_dp_grad_reduce for o in options if o.zero == zero}
            assert ran == ({False} if zero in refused else {True, False}), (framework, zero)
        assert problem.offload_fallback is (framework == "megatron-deepspeed" and vary_offload)
