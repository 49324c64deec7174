"""The search prices ZeRO-3 / FSDP beside expert parallelism as the estimate does (step.inputs.zero3_group_calls
on the search's arrays): the fast path equals the exhaustive one and each plan's objective is its estimate."""

from __future__ import annotations

import math

import numpy as np

from paraplan.catalog import load_model, load_system
from paraplan.search import run
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.grid_index import GridIndex, evaluate_groups, expand
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.search.table import RowTable
from paraplan.step.estimate import estimate


def _problem() -> SearchProblem:
    """qwen3-30b-a3b on two H100 nodes under ZeRO-3, ep 2 to 16 (edp 8 to 1, inside and across the domains),
    tp 1-2, pp 1-2."""
    return SearchProblem(
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


def test_zero3_moe_search_equals_exhaustive_and_the_estimate():
    p = _problem()
    got, want = search(p, top_k=10), exhaustive_search(p, top_k=10)
    assert [r.key for r in got.plans] == [r.key for r in want.plans]
    assert all(r.plan.zero == 3 and r.plan.ep > 1 for r in got.plans)
    tokens = p.global_batch * p.seq_length
    for ranked in got.plans:
        step = estimate(p.model, p.system, ranked.plan).step_time_s
        assert math.isclose(ranked.objective * tokens, step, rel_tol=1e-12)


def test_zero3_moe_candidates_step_and_peak_are_the_estimate():
    """Candidates across the rows: the vectorised step time and peak memory (the gathered MoE layer with its
    experts, step.stage_memory.zero3_unit_params) equal estimate() of the plan."""
    p = _problem()
    table = RowTable(p)
    options = GridIndex(p, table)
    rows = [r for r in range(table.size) if options.lengths[r]][::3][:16]
    group_row, group_start = options.groups(np.array(rows))
    index, grid_index = expand(group_row, group_start, options.group_size[group_row])
    step, peak, _ = evaluate_groups(table, options, group_row, group_start)
    for i in range(0, len(index), 3):
        plan = run.plan_of(
            p, table.row(int(index[i])), options.option(int(index[i]), int(grid_index[i]))
        )
        e = estimate(p.model, p.system, plan)
        assert plan.zero == 3
        assert math.isclose(step[i], e.step_time_s, rel_tol=1e-12)
        assert math.isclose(peak[i], e.peak_stage.peak_bytes, rel_tol=1e-12)
