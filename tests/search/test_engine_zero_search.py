"""The search never proposes a plan the estimator refuses by the pipeline runtime's ZeRO rule
(specs.rules_stack.engine_zero_rule): under megatron-deepspeed, whose PipelineEngine refuses ZeRO-2/3 with pp > 1,
no candidate of the uniform search (SearchProblem.state_options, both the fast and the exhaustive search) nor
of the per-stage searches (search.staged.problem.depth_allowed) has pp > 1 with ZeRO 2 or 3, and the fast
search stays exact against the estimator on that space."""

from __future__ import annotations

import math

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_search_fields, framework_system
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.search.staged.hetero import HeteroProblem, search_cluster
from paraplan.search.staged.non_uniform import non_uniform_space_size, search_non_uniform
from paraplan.specs.cluster import uniform_cluster
from paraplan.step.estimate import check_plan


def _problem(framework: str | None) -> SearchProblem:
    system = load_system("dgx-a100-80gb")
    fw = load_framework(framework) if framework else None
    return SearchProblem(
        model=load_model("gpt3-1.3b"),
        system=framework_system(fw, system) if fw else system,
        **{"gpus": 16, "global_batch": 64, "seq_length": 2048, "pp": (1, 2), "tp": (1, 2)},
        **{"micro_batch": (1, 2), "recompute": ("none",), "vary_placement": False},
        **{"vary_offload": False, "vary_overlap": False},
        **(framework_search_fields(fw) if fw else {}),
    )


def _states(result) -> set[tuple[int, int]]:
    """(pp, zero) of every searched plan, its equivalents included (a bf16 plan of megatron-deepspeed
    runs the same BF16_Optimizer at ZeRO 0 and 1, grad_dtype fp32: one estimate, one ranked group)."""
    plans = [q for p in result.plans for q in (p.plan, *p.equivalents)]
    return {(q.pp, q.zero) for q in plans}


def test_no_searched_plan_runs_zero2_or_3_in_deepspeeds_pipeline_engine():
    problem = _problem("megatron-deepspeed")
    fast, ref = search(problem, top_k=400), exhaustive_search(problem, top_k=400)
    assert [p.key for p in fast.plans] == [p.key for p in ref.plans]
    for a, b in zip(fast.plans, ref.plans):
        assert math.isclose(a.estimate.step_time_s, b.estimate.step_time_s, rel_tol=1e-9)
    states = _states(fast)
    assert not {(pp, zero) for pp, zero in states if pp > 1 and zero >= 2}
    assert {(2, 1), (1, 2), (1, 3)} <= states  # pipelines and ZeRO-2/3 are both searched, apart
    for ranked in fast.plans:
        check_plan(problem.model, problem.system, ranked.plan)  # the estimator's own check passes
    # the same space without a profile (Megatron-LM's pipeline runtime) keeps ZeRO-2/3 beside pipeline stages
    megatron = _states(search(_problem(None), top_k=400))
    assert any(pp > 1 and zero >= 2 for pp, zero in megatron)


def test_per_stage_searches_leave_out_depths_the_engine_refuses():
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    model = load_model("gpt3-1.3b")
    problem = HeteroProblem(model, cluster, 64, 2048, engine="deepspeed", zero=2, pps=(2,))
    assert search_cluster(problem, top_k=5).plans == []  # no pp = 2 candidate: none, not an error
    free = HeteroProblem(model, cluster, 64, 2048, engine="deepspeed", zero=2)
    assert {c.plan.pp for c in search_cluster(free, top_k=20).plans} == {1}
    result = search_non_uniform(free, top_k=20, seeded=False)
    assert result.plans and {c.plan.pp for c in result.plans} == {1}
    # the exact search's space counts one stage only: the pp = 1 term of the ZeRO-1 space
    one = HeteroProblem(model, cluster, 64, 2048, engine="deepspeed", zero=1)
    assert non_uniform_space_size(free, 1, [4]) == non_uniform_space_size(one, 1, [4])
    assert non_uniform_space_size(free, 4, [4]) == non_uniform_space_size(one, 1, [4])
    assert non_uniform_space_size(one, 4, [4]) > non_uniform_space_size(one, 1, [4])
