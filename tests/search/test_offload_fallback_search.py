"""The uniform search and the estimate agree on DeepSpeed's fallback with the optimizer offloaded (issue 33):
under the BF16_Optimizer's zero-1 case (megatron-deepspeed: bf16, fp32 gradients) DeepSpeed runs its ZeRO-1
optimizer instead where the optimizer is offloaded (specs.rules_stack.runs_bf16_optimizer), whose hooks may
overlap the reduction, so the estimate prices zero 1 with the overlap and the optimizer offloaded. The search
decided its state options before the offload ones and refused that plan: GPT-3 1.3B on 16 A100s, mb 4, gb 64,
pp 1, zero 1 priced 0.43088 s (overlap, optimizer offloaded) against the 0.46249 s the search offered with
the optimizer offloaded. Now the stated options are kept beside the ones run on the GPU and the candidates
the estimate refuses dropped (search.grid_axes.GridAxes.refused), the fast search exact against the
exhaustive one."""

from __future__ import annotations

import math

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_search_fields, framework_system
from paraplan.search import row_scan
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem, grid, plan_of, rows
from paraplan.step.estimate import estimate


def _problem(**fields) -> SearchProblem:
    fw = load_framework("megatron-deepspeed")
    return SearchProblem(
        model=load_model("gpt3-1.3b"),
        system=framework_system(fw, load_system("dgx-a100-80gb")),
        **{"gpus": 16, "global_batch": 64, "seq_length": 2048, "micro_batch": (4,)},
        **{"recompute": ("none",), "tp": (1,), "pp": (1,), "cp": (1,)},
        **framework_search_fields(fw) | {"vary_overlap": True, "vary_placement": False} | fields,
    )


def test_every_candidate_is_a_plan_the_estimate_prices():
    """zero 1 with the overlap: a candidate with the optimizer offloaded only; every other candidate the
    estimate prices, none refused."""
    problem = _problem(zero=(1,))
    assert problem.offload_fallback
    seen = set()
    for row in rows(problem):
        for option in grid(problem, row):
            plan = plan_of(problem, row, option)
            refused = bool(
                problem.refused(plan.zero, plan.overlap_dp_grad_reduce, plan.offload_optimizer)
            )
            assert refused == (plan.overlap_dp_grad_reduce and not plan.offload_optimizer)
            if not refused:
                assert estimate(problem.model, problem.system, plan).step_time_s > 0
            seen.add((plan.overlap_dp_grad_reduce, plan.offload_optimizer))
    assert seen == {(True, True), (True, False), (False, True), (False, False)}


def test_the_search_returns_zero_1_overlapped_with_the_optimizer_offloaded(monkeypatch):
    problem = _problem(zero=(1,))
    monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", 1)
    fast, ref = search(problem, top_k=6), exhaustive_search(problem, top_k=6)
    assert [p.key for p in fast.plans] == [p.key for p in ref.plans]
    for a, b in zip(fast.plans, ref.plans):
        assert math.isclose(a.estimate.step_time_s, b.estimate.step_time_s, rel_tol=1e-9)
    plans = [q for p in fast.plans for q in (p.plan, *p.equivalents)]
    assert any(q.overlap_dp_grad_reduce and q.offload_optimizer for q in plans)
    assert not any(q.overlap_dp_grad_reduce and not q.offload_optimizer for q in plans)


def test_zero2_offloaded_candidates_are_priced_as_the_estimate(monkeypatch):
    """DeepSpeed's ZeRO 2 with and without the optimizer offloaded (whose partition passes are not priced,
    step.constants.offloaded_partition_accumulation): both searched, the fast search equal to the
    exhaustive one (its bound admissible), every returned row re-estimating to its step."""
    problem = _problem(zero=(2,))
    seen = {
        plan_of(problem, r, o).offload_optimizer for r in rows(problem) for o in grid(problem, r)
    }
    assert seen == {True, False}
    monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", 1)
    fast, ref = search(problem, top_k=8), exhaustive_search(problem, top_k=8)
    assert [p.key for p in fast.plans] == [p.key for p in ref.plans]
    for p in fast.plans:
        again = estimate(problem.model, problem.system, p.plan).step_time_s
        assert math.isclose(again, p.estimate.step_time_s, rel_tol=1e-9)
