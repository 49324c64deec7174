"""The run-wide knobs a framework profile sets (specs.plan.RUNTIME_FIELDS: gradient dtype, fp8 weight
copies, ZeRO-3 prefetch depth and live-parameter cap, CP algorithm) reach the search's table and its
plans alike: the fast search equals the exhaustive one under non-default values, and plans carry them."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_search_fields
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.specs.plan import RuntimeFields


@pytest.mark.xdist_group("runtime-fields")
def test_fast_equals_exhaustive_under_profile_knobs():
    problem = SearchProblem(
        model=load_model("llama3-8b"),
        system=load_system("dgx-h100-80gb"),
        gpus=16,
        seq_length=16384,
        global_batch=16,
        tp=(1, 2),
        cp=(1, 2, 4),
        micro_batch=(1,),
        recompute=("none", "full"),
        zero=(1, 3),
        vary_offload=False,
        vary_placement=False,
        vary_overlap=False,
        runtime=RuntimeFields(
            grad_dtype="bf16",
            zero3_prefetch_layers=0,
            zero3_max_live_params=2e8,
            cp_algorithm="all-to-all",
            zero3_gather_unit="tensor",
            zero3_reduce_unit="tensor",
            zero3_regather_recompute=True,
        ),
    )
    fast, slow = search(problem, top_k=5), exhaustive_search(problem, top_k=5)
    assert [p.plan for p in fast.plans] == [p.plan for p in slow.plans]
    for a, b in zip(fast.plans, slow.plans):
        assert a.estimate.step_time_s == pytest.approx(b.estimate.step_time_s, rel=1e-9)
    assert all(
        p.plan.cp_algorithm == "all-to-all" and p.plan.grad_dtype == "bf16" for p in fast.plans
    )
    assert all(
        p.plan.zero3_reduce_unit == "tensor" and p.plan.zero3_regather_recompute for p in fast.plans
    )
    assert {f.cp for f in problem.factorizations} == {
        1,
        2,
        4,
    }  # Ulysses rows are in the space


def test_profile_sets_the_search_problem_runtime_fields():
    runtime = framework_search_fields(load_framework("deepspeed"))["runtime"]
    assert runtime.cp_algorithm == "all-to-all" and runtime.zero3_max_live_params == 1e9
    legacy = framework_search_fields(load_framework("megatron-lm-2021"))["runtime"]
    assert legacy.zero3_prefetch_layers == 0


def test_api_search_takes_run_wide_knobs_by_name():
    """api.search_problem folds run-wide knobs given by name into SearchProblem.runtime, and names a bad one."""
    from paraplan.api import InputError, search_problem

    args = (load_model("llama3-8b"), load_system("dgx-h100-80gb"), 16)
    problem = search_problem(
        *args, seq_length=4096, global_batch=16, grad_dtype="bf16", cp_algorithm="all-to-all"
    )
    assert problem.runtime == RuntimeFields(grad_dtype="bf16", cp_algorithm="all-to-all")
    with pytest.raises(InputError, match="grad_dtype"):
        search_problem(*args, seq_length=4096, global_batch=16, grad_dtype="fp16")


@pytest.mark.xdist_group("runtime-fields")
def test_backward_prefetch_depth_reaches_the_search():
    """zero3_backward_prefetch_layers 0 (hf-transformers-fsdp's FSDP1 NO_PREFETCH) through the search's step
    path: the fast search equals the exhaustive one, its plans carry the depth, their step times are the
    estimate's of the same plan to the bit, and no ZeRO-3 plan is faster than at the forward's depth."""
    from paraplan.step.estimate import estimate

    model, system = load_model("llama3-8b"), load_system("dgx-h100-80gb")

    def problem(runtime: RuntimeFields) -> SearchProblem:
        return SearchProblem(
            model=model,
            system=system,
            gpus=16,
            seq_length=4096,
            global_batch=32,
            tp=(1, 2),
            cp=(1,),
            micro_batch=(1, 2),
            recompute=("none", "full"),
            zero=(3,),
            vary_offload=False,
            vary_placement=False,
            vary_overlap=False,
            runtime=runtime,
        )

    none = problem(RuntimeFields(zero3_backward_prefetch_layers=0))
    fast, slow = search(none, top_k=5), exhaustive_search(none, top_k=5)
    assert [p.plan for p in fast.plans] == [p.plan for p in slow.plans] and fast.plans
    for p in fast.plans:
        assert p.plan.zero3_backward_prefetch_layers == 0
        assert p.estimate.step_time_s == estimate(model, system, p.plan).step_time_s
    ahead = search(problem(RuntimeFields()), top_k=1).plans[0]
    assert fast.plans[0].estimate.step_time_s > ahead.estimate.step_time_s
    fsdp = framework_search_fields(load_framework("hf-transformers-fsdp"))["runtime"]
    assert fsdp.zero3_backward_prefetch_layers == 0 and fsdp.zero3_prefetch_layers == 1
