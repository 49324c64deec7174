"""The search prices ZeRO-3 / FSDP beside expert parallelism as the estimate does (step.inputs.zero3_group_calls
on the search's arrays): the fast path equals the exhaustive one and each plan's objective is its estimate."""

from __future__ import annotations

import math

from paraplan.catalog import load_model, load_system
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.step.estimate import estimate


def test_zero3_moe_search_equals_exhaustive_and_the_estimate():
    """qwen3-30b-a3b on two H100 nodes under ZeRO-3, ep 2 to 16 (edp 8 to 1, inside and across the domains),
    tp 1-2, pp 1-2."""
    p = SearchProblem(
        model=load_model("qwen3-30b-a3b"),
        system=load_system("dgx-h100-80gb"),
        gpus=16,
        seq_length=4096,
        global_batch=64,
        tp=(1, 2),
        pp=(1, 2),
        micro_batch=(1,),
        recompute=("full",),
        zero=(3,),
        ep=(2, 4, 8, 16),
        dispatchers=("alltoall",),
        vary_offload=False,
        vary_placement=False,
    )
    got, want = search(p, top_k=10), exhaustive_search(p, top_k=10)
    assert [r.key for r in got.plans] == [r.key for r in want.plans]
    assert all(r.plan.zero == 3 and r.plan.ep > 1 for r in got.plans)
    tokens = p.global_batch * p.seq_length
    for ranked in got.plans:
        step = estimate(p.model, p.system, ranked.plan).step_time_s
        assert math.isclose(ranked.objective * tokens, step, rel_tol=1e-12)
