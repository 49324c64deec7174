"""The search prices ZeRO-3 / FSDP beside expert parallelism as the estimate does (step.inputs.zero3_group_calls
on the search's arrays; the candidates' step and peak: test_moe_search's column test at zero 3)."""

from __future__ import annotations

import math

from tests.search.test_moe_search import mixtral_problem

from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.step.estimate import estimate


def test_zero3_moe_fast_search_equals_exhaustive_and_the_estimate():
    """ep 2 and 8 on two H100 nodes (edp 8 to 1), pp 1-2: the fast path finds the exhaustive search's plans,
    each objective its estimate's step time per token."""
    p = mixtral_problem(zero=(3,), pp=(1, 2))
    got, want = search(p, top_k=10), exhaustive_search(p, top_k=10)
    assert [r.key for r in got.plans] == [r.key for r in want.plans]
    assert all(r.plan.zero == 3 and r.plan.ep > 1 for r in got.plans)
    for ranked in got.plans:
        step = estimate(p.model, p.system, ranked.plan).step_time_s
        assert math.isclose(ranked.objective * p.global_batch * p.seq_length, step, rel_tol=1e-12)
