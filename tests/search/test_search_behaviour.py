"""Search results beyond exactness: infeasible problems, ordering and counts, input checks,
``max_global_batch`` rounding, and the one-knob explanation of the winner."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_model, load_system
from paraplan.step.estimate import estimate
from paraplan.search.explain import explain
from paraplan.search.run import search
from paraplan.search.space import SearchProblem, grid, plan_of, rows
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.units import GiB

VERDICTS = {"slower", "does not fit", "invalid", "equal", "faster"}


def problem(model: str, system: str, **fields) -> SearchProblem:
    return SearchProblem(model=load_model(model), system=load_system(system), **fields)


# ---- no feasible plan --------------------------------------------------------------------------
def test_nothing_fits_gives_empty_plans_and_nearest_miss():
    p = problem(
        "llama3-405b", "dgx-a100-40gb", gpus=8, global_batch=8, seq_length=2048, vary_offload=False
    )
    result = search(p, top_k=5)
    assert result.plans == []
    assert result.feasible == 0
    assert (
        result.evaluated == result.candidates > 0
    )  # nothing to prune against: everything was tried
    miss = result.nearest_miss
    assert miss is not None
    assert miss["overflow_gib"] > 0
    assert math.isclose(
        miss["peak_memory_gib"] - miss["capacity_gib"], miss["overflow_gib"], rel_tol=1e-9
    )
    # the reported plan is a real plan of the space whose estimate agrees
    plan = PlanSpec.model_validate(miss["plan"])
    e = estimate(p.model, p.system, plan)
    assert not e.fits
    assert math.isclose(e.peak_stage.peak_bytes / GiB, miss["peak_memory_gib"], rel_tol=1e-9)
    assert not plan.offload_weights and not plan.offload_activations and not plan.offload_optimizer
    assert result.to_dict()["nearest_miss"] == miss


def test_nearest_miss_is_the_smallest_overflow():
    """Checked against every candidate of a small space, each through the scalar estimator."""
    p = problem(
        "llama3-70b",
        "dgx-a100-40gb",
        gpus=8,
        global_batch=8,
        seq_length=4096,
        tp=(4, 8),
        micro_batch=(1,),
        vary_offload=False,
        vary_placement=False,
        vary_overlap=False,
    )
    result = search(p, top_k=3)
    assert result.plans == []
    peaks = [
        estimate(p.model, p.system, plan_of(p, row, option)).peak_stage.peak_bytes
        for row in rows(p)
        for option in grid(p, row)
    ]
    assert len(peaks) == result.candidates == result.evaluated
    capacity = p.system.accelerator.hbm_capacity
    assert min(peaks) > capacity
    assert math.isclose(result.nearest_miss["peak_memory_gib"], min(peaks) / GiB, rel_tol=1e-9)
    assert math.isclose(
        result.nearest_miss["overflow_gib"], (min(peaks) - capacity) / GiB, rel_tol=1e-9
    )


# ---- a feasible search ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def feasible_result():
    p = problem("gpt3-13b", "dgx-a100-40gb", gpus=16, global_batch=32, seq_length=2048)
    return p, search(p, top_k=25)


def test_feasible_plans_fit_and_are_sorted(feasible_result):
    p, result = feasible_result
    assert len(result.plans) == 25
    assert [r.rank for r in result.plans] == list(range(1, 26))
    objectives = [r.objective for r in result.plans]
    assert objectives == sorted(objectives)
    keys = [(r.objective, r.key) for r in result.plans]
    assert keys == sorted(keys)  # ties in canonical order
    assert len({r.key for r in result.plans}) == 25
    capacity = p.system.accelerator.hbm_capacity
    for r in result.plans:
        assert r.estimate.fits
        assert r.estimate.peak_stage.peak_bytes <= capacity
        assert r.plan.tp * r.plan.pp * r.plan.cp * r.plan.dp == p.gpus
        assert r.plan.global_batch == 32
        # the time objective is seconds per token of this plan
        assert math.isclose(r.objective, r.estimate.step_time_s / (32 * 2048), rel_tol=1e-9)
        # the ranked estimate is the estimator's own answer for the plan
        assert math.isclose(
            estimate(p.model, p.system, r.plan).step_time_s, r.estimate.step_time_s, rel_tol=1e-12
        )


def test_counts_are_consistent(feasible_result):
    _, result = feasible_result
    assert result.candidates >= result.evaluated >= result.feasible >= len(result.plans)
    assert result.rows >= result.rows_evaluated > 0
    assert result.candidates > result.evaluated  # the bound pruned something on this problem
    d = result.to_dict()
    for key in (
        "plans",
        "candidates",
        "evaluated",
        "feasible",
        "seconds",
        "rows",
        "rows_evaluated",
        "nearest_miss",
    ):
        assert key in d
    assert d["nearest_miss"] is None


def test_faster_infeasible_are_faster_and_do_not_fit(feasible_result):
    p, result = feasible_result
    best = result.plans[0].objective
    for item in result.faster_infeasible:
        assert item["objective"] < best
        assert not estimate(p.model, p.system, item["plan"]).fits


def test_top_k_larger_than_the_feasible_set():
    p = problem(
        "gpt3-350m",
        "dgx-a100-80gb",
        gpus=8,
        global_batch=8,
        seq_length=2048,
        tp=(8,),
        pp=(1,),
        micro_batch=(1,),
        recompute=("none",),
        vary_offload=False,
        vary_overlap=False,
        vary_placement=False,
    )
    result = search(p, top_k=1000)
    assert 0 < len(result.plans) == result.feasible <= result.candidates < 1000


# ---- input checks --------------------------------------------------------------------------------
BASE = dict(model="gpt3-1.3b", system="dgx-a100-80gb", gpus=8, seq_length=2048, global_batch=32)


def check_error(**changes) -> str:
    fields = dict(BASE, **changes)
    p = problem(**fields)
    with pytest.raises(InputError) as info:
        p.check()
    message = str(info.value)
    assert "\n" not in message.strip()
    with pytest.raises(InputError):  # search and exhaustive_search check too
        search(p, top_k=1)
    return message


@pytest.mark.parametrize("gpus", [0, -8])
def test_check_rejects_non_positive_gpus(gpus):
    assert check_error(gpus=gpus).startswith("gpus")


def test_check_rejects_unknown_objective():
    message = check_error(objective="speed")
    assert message.startswith("objective") and "'speed'" in message


@pytest.mark.parametrize(
    "changes", [dict(global_batch=None), dict(global_batch=32, max_global_batch=64)]
)
def test_check_needs_exactly_one_batch(changes):
    assert "global_batch" in check_error(**changes)


@pytest.mark.parametrize("field", ["global_batch", "max_global_batch"])
def test_check_rejects_batch_below_minimum_dp(field):
    """gpt3-125m (12 heads, 12 layers) on 125 GPUs: tp can only be 1 (5 divides no head count),
    pp at most 12, cp must be a power of two dividing seq/2 -> 1, so every split has dp >= 25."""
    fields = dict(model="gpt3-125m", gpus=125, global_batch=None, max_global_batch=None)
    fields[field] = 16
    p = problem(**dict(BASE, **fields))
    min_dp = min(f.dp for f in p.factorizations)
    assert 16 < min_dp
    with pytest.raises(InputError) as info:
        p.check()
    message = str(info.value)
    assert message.startswith(field)
    assert str(min_dp) in message


@pytest.mark.parametrize(
    "changes",
    [dict(global_batch=0), dict(seq_length=0), dict(global_batch=None, max_global_batch=-1)],
)
def test_check_rejects_non_positive_sizes(changes):
    check_error(**changes)


# ---- max_global_batch ----------------------------------------------------------------------------
@pytest.mark.parametrize("max_batch", [100, 64, 7])
def test_max_global_batch_rounds_down_to_dp_times_micro_batch(max_batch):
    p = problem(
        "gpt3-1.3b",
        "dgx-a100-80gb",
        gpus=8,
        seq_length=2048,
        max_global_batch=max_batch,
        vary_placement=False,
        vary_offload=False,
    )
    result = search(p, top_k=20, collect_all=True)
    assert result.plans
    checked = [r.plan for r in result.plans] + [item["plan"] for item in result.all_feasible]
    for plan in checked:
        unit = plan.dp * plan.micro_batch
        assert plan.global_batch == (max_batch // unit) * unit
        assert 0 < plan.global_batch <= max_batch
    if (
        max_batch == 100
    ):  # not a power of two: some plans lose part of the batch, some keep all of it
        assert {plan.global_batch for plan in checked} >= {96, 100}


def test_max_global_batch_objective_is_per_token():
    """Plans with different batches are ranked by time per token, not by step time."""
    p = problem(
        "gpt3-1.3b",
        "dgx-a100-80gb",
        gpus=8,
        seq_length=2048,
        max_global_batch=100,
        vary_placement=False,
        vary_offload=False,
    )
    result = search(p, top_k=50)
    for r in result.plans:
        assert math.isclose(
            r.objective, r.estimate.step_time_s / (r.plan.global_batch * 2048), rel_tol=1e-9
        )


# ---- explain -------------------------------------------------------------------------------------
UNRESTRICTED = [
    dict(model="gpt3-1.3b", system="dgx-a100-80gb", gpus=8, global_batch=32, seq_length=2048),
    dict(model="gpt3-13b", system="dgx-a100-40gb", gpus=32, global_batch=64, seq_length=2048),
    dict(model="llama3-8b", system="dgx-h100-80gb", gpus=16, global_batch=16, seq_length=8192),
    dict(model="llama3-70b", system="dgx-h100-80gb", gpus=64, global_batch=128, seq_length=4096),
]


@pytest.mark.parametrize("fields", UNRESTRICTED, ids=lambda f: f"{f['model']}-{f['gpus']}")
def test_explain_finds_no_faster_neighbour_in_an_unrestricted_space(fields):
    p = problem(**fields)
    result = search(p, top_k=1)
    best = result.plans[0]
    alternatives = explain(p, best.plan, best.estimate)
    assert alternatives
    assert {a.verdict for a in alternatives} <= VERDICTS
    assert "slower" in {a.verdict for a in alternatives}
    faster = [(a.knob, a.change, a.delta_s) for a in alternatives if a.verdict == "faster"]
    assert not faster, faster
    for a in alternatives:
        if a.verdict in ("slower", "equal", "does not fit"):
            assert a.step_time_s is not None and a.delta_s is not None
        if a.verdict == "slower":
            assert a.delta_s > 0
        if a.verdict == "invalid":
            assert a.step_time_s is None and a.reason


def test_explain_reports_faster_when_an_axis_is_restricted():
    """Restricting micro-batches to 1 leaves a faster micro-batch-2 neighbour outside the space."""
    fields = dict(UNRESTRICTED[0], micro_batch=(1,))
    p = problem(**fields)
    free = search(problem(**UNRESTRICTED[0]), top_k=1).plans[0]
    assert free.plan.micro_batch > 1  # the restriction does cost something
    best = search(p, top_k=1).plans[0]
    alternatives = explain(p, best.plan, best.estimate)
    assert any(a.verdict == "faster" and a.knob == "micro_batch" for a in alternatives)


def test_explain_max_global_batch_neighbours_stay_in_the_space():
    p = problem("llama3-8b", "dgx-a100-80gb", gpus=8, seq_length=2048, max_global_batch=16)
    best = search(p, top_k=1).plans[0]
    alternatives = explain(p, best.plan, best.estimate)
    faster = [(a.knob, a.change, a.delta_s) for a in alternatives if a.verdict == "faster"]
    assert not faster, faster


# ---- the canonical space loses nothing ----------------------------------------------------------
def _est(p: SearchProblem, **fields):
    return estimate(p.model, p.system, PlanSpec(**fields))


@pytest.mark.parametrize("pp", [1, 2])
def test_collapsed_knobs_never_beat_their_canonical_value(pp):
    """The space keeps one value of knobs that 'cannot change anything' (SP and TP overlap at
    tp = 1; ZeRO and DP-overlap switches at dp·cp = 1; the gather switch at ZeRO 0; gpipe at pp = 1).
    The dropped variants must be no faster and need no less memory, or the search could miss a plan
    (and explain() could show them as 'faster')."""
    p = problem("llama3-8b", "dgx-h100-80gb", gpus=8, global_batch=16, seq_length=4096)
    pairs = []
    tp1 = dict(gpus=4 * pp, tp=1, pp=pp, dp=4, micro_batch=1, global_batch=16, seq_length=4096)
    pairs += [(tp1, dict(tp1, sequence_parallel=True)), (tp1, dict(tp1, overlap_tp_comm=True))]
    dp1 = dict(gpus=8 * pp, tp=8, pp=pp, dp=1, micro_batch=1, global_batch=16, seq_length=4096)
    pairs += [(dp1, dict(dp1, zero=z)) for z in (1, 2, 3)]
    pairs += [
        (dp1, dict(dp1, overlap_dp_grad_reduce=False)),
        (dp1, dict(dp1, overlap_param_gather=False)),
    ]
    dp2 = dict(gpus=8 * pp * 2, tp=8, pp=pp, dp=2, micro_batch=1, global_batch=16, seq_length=4096)
    pairs += [(dp2, dict(dp2, overlap_param_gather=False))]
    pairs += [
        (
            dict(dp2, zero=3),
            dict(dp2, zero=3, overlap_param_gather=False, overlap_dp_grad_reduce=False),
        )
    ]
    if pp == 1:
        pairs += [(tp1, dict(tp1, schedule="gpipe"))]
    for canonical, dropped in pairs:
        a, b = _est(p, **canonical), _est(p, **dropped)
        assert b.step_time_s >= a.step_time_s * (1 - 1e-12), (dropped, a.step_time_s, b.step_time_s)
        assert b.peak_stage.peak_bytes >= a.peak_stage.peak_bytes * (1 - 1e-12), dropped


def test_search_leaves_the_garbage_collector_as_it_found_it():
    """io.collector.cyclic_gc_paused (a search runs under it) turns the cyclic collector off during a search and back on after; what the
    search allocated ends in the oldest generation (gc.freeze + gc.unfreeze) unless the caller keeps objects frozen,
    whose frozen set it leaves alone; a caller that had the collector off keeps it off."""
    import gc

    from paraplan.io.collector import cyclic_gc_paused

    assert gc.isenabled()
    with cyclic_gc_paused():
        assert not gc.isenabled()
        garbage = [[i] for i in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() == 0 and gc.get_count()[0] < 1000
    del garbage
    kept = [[i] for i in range(100)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with cyclic_gc_paused():
            more = [[i] for i in range(100)]
        assert (
            0 < gc.get_freeze_count() <= frozen
        )  # not released, nothing added (some frozen objects may be freed)
        del more
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    del kept
