"""The per-stage searches' run-wide axes (issue 31, search.staged.axes): cp (``--cp``), the schedules of
``--schedule`` (1f1b, gpipe, zb-h1; DualPipe refused) and the offload switches (``vary_offload``). Extends the
checks tests/hetero/test_staged_plans_valid.py and test_search_reestimates.py make for the other axes: every
plan returned passes the per-stage plan check (specs.stage_plan.stage_plan_violations) and re-estimates
through ``estimate --plan`` (step.per_stage.estimate_stage_plan) to its step at 1e-9, with cp > 1, ZB-H1 and
offload among the draws; the split's bounds stay admissible (splits.lower_bound and the solver's cutoff,
splits.pipeline_cutoff_s, at most the composed step of every split of a candidate); the spaces are counted
in closed form as listed; the default space is the one searched before."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.hetero.test_search_reestimates import CHECK, TINY, _cluster

from paraplan.search.staged import axes, hetero
from paraplan.search.staged.balance import all_splits, pipeline_objective
from paraplan.search.staged.hetero import HeteroProblem, search_cluster
from paraplan.search.staged.non_uniform import (
    _compositions,
    non_uniform_space_size,
    search_non_uniform,
)
from paraplan.search.staged.pool_orders import pool_orders
from paraplan.search.staged.splits import lower_bound, pipeline_cutoff_s, pipeline_floor_s
from paraplan.specs.errors import InputError
from paraplan.specs.stage_plan import stage_plan_violations
from paraplan.step.blocks import model_blocks
from paraplan.step.layout import stage_at
from paraplan.step.per_stage import compose_stages, estimate_stage_plan, tied_embedding_sync_s

CHECK = settings(CHECK, max_examples=8)


CLUSTERS = {
    "a100": _cluster([("dgx-a100-80gb", 4)]),
    "mixed": _cluster([("dgx-a100-80gb", 4), ("dgx-h100-80gb", 4)]),
}
# the axes a draw lists: cp degrees, schedules (None: 1f1b alone), offload varied or not
AXES = st.tuples(
    st.sampled_from(((1,), (1, 2), (2,))),
    st.sampled_from((None, ("1f1b", "zb-h1"), ("zb-h1",), ("gpipe", "zb-h1"))),
    st.booleans(),
)


CLUSTER_NAMES = tuple(sorted(CLUSTERS))


@st.composite
def problems(draw, clusters=CLUSTER_NAMES) -> HeteroProblem:
    cps, schedules, vary_offload = draw(AXES)
    return HeteroProblem(
        TINY,
        CLUSTERS[draw(st.sampled_from(clusters))],
        global_batch=2 ** draw(st.integers(2, 4)),
        seq_length=512,
        recompute=("none",),
        zero=draw(st.sampled_from((0, 1))),
        cps=cps,
        schedules=schedules,
        vary_offload=vary_offload,
    )


def _assert_checked_and_reestimated(problem: HeteroProblem, result) -> None:
    """Every plan passes the per-stage check and re-estimates to its step at 1e-9."""
    for cand in result.plans:
        broken = stage_plan_violations(cand.plan, problem.model, problem.cluster)
        assert not broken, (cand.label, [str(v) for v in broken])
        est = estimate_stage_plan(problem.model, problem.cluster, cand.plan)
        assert est.step_time_s == pytest.approx(cand.step_time_s, rel=1e-9), cand.label


@pytest.mark.slow
@settings(CHECK, max_examples=5)
@given(problems())
def test_cluster_search_plans_with_cp_zb_h1_offload_pass_the_check_and_reestimate(problem):
    result = search_cluster(problem, top_k=3)
    assert result.plans
    _assert_checked_and_reestimated(problem, result)


@pytest.mark.slow
@CHECK
@given(problems(("a100",)), st.sampled_from((0, 3000)))
def test_non_uniform_plans_with_cp_zb_h1_offload_pass_the_check_and_reestimate(problem, exact):
    """exact_limit 0: the alleviation path (from the uniform seeds of the same axes); 3000 the exact one."""
    result = search_non_uniform(problem, top_k=3, exact_limit=exact, time_budget_s=5.0)
    assert result.plans
    _assert_checked_and_reestimated(problem, result)


def test_the_draws_return_plans_of_every_new_axis():
    """cp 2, ZB-H1 and an offload are each in some returned plan (the draws above are not vacuous)."""
    problem = HeteroProblem(
        TINY, CLUSTERS["a100"], 8, 512, cps=(2,), schedules=("zb-h1",), vary_offload=True
    )
    plans = [c.plan for c in search_cluster(problem, top_k=40).plans]
    assert plans and all(p.schedule == "zb-h1" and p.stages[0].cp == 2 for p in plans)
    assert any(p.offload_optimizer or p.offload_weights or p.offload_activations for p in plans)


def _split_steps(problem: HeteroProblem, settings_):
    """(step, per-stage works, tied all-reduce) of every split of the blocks over these stages."""
    arrays = lower_bound(problem, settings_)[1]
    first, last = settings_[0], settings_[-1]
    tied = tied_embedding_sync_s(problem.model, problem.cluster, problem.common, first, last)
    for bounds in all_splits(len(model_blocks(problem.model)), len(settings_)):
        stages = tuple(
            stage_at(arr.blocks, i, a, b)
            for i, (arr, a, b) in enumerate(zip(arrays, bounds, bounds[1:]))
        )
        step, _, works, _ = compose_stages(stages, tied)
        yield step, works, tied


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_the_bounds_are_admissible_for_every_split_of_every_candidate(schedule):
    """splits.lower_bound and the solver's cutoff floor (pipeline_cutoff_s + the tied all-reduce) never
    exceed the composed step of any split of any candidate, cp 1 and 2, offload on and off."""
    problem = HeteroProblem(
        TINY, CLUSTERS["mixed"], 8, 512, cps=(1, 2), schedules=(schedule,), vary_offload=True
    )
    degrees = list(hetero._degrees(problem))
    orders = list(pool_orders(problem.cluster))
    checked, over = 0, 0
    for settings_, m, _, run in hetero._candidates(problem, orders, degrees, math.inf, [0, 0]):
        if len(settings_) > 3 or settings_[0].micro_batch != 2:
            continue  # a few of each depth and cp keep the test short
        bound = lower_bound(run, settings_)[0]
        for step, works, tied in _split_steps(run, settings_):
            assert bound <= step * (1 + 1e-12)
            assert pipeline_cutoff_s(run, works, m) + tied <= step * (1 + 1e-12)
            # the 1F1B objective the cutoff took before: above ZB-H1's step where a pipeline runs
            over += pipeline_objective(works, m) + tied > step * (1 + 1e-12)
            checked += 1
    assert checked > 50
    assert (over > 0) == (schedule == "zb-h1")


def test_pipeline_floor_against_hand_computed_values():
    """W = 12 s of work per micro-batch on pp = 3 stages, m = 4: 1F1B / GPipe 12·(1 + 3/3) = 24; ZB-H1
    m·W/pp = 16 (its bubble's floor at ρ = 1 is 0); the cutoff of works (2, 4, 6): 1F1B 12 + 3·6 = 30,
    ZB-H1 4·6 = 24."""
    base = HeteroProblem(TINY, CLUSTERS["a100"], 8, 512)
    zb = HeteroProblem(TINY, CLUSTERS["a100"], 8, 512, schedule="zb-h1")
    gpipe = HeteroProblem(TINY, CLUSTERS["a100"], 8, 512, schedule="gpipe")
    assert pipeline_floor_s(base, 12.0, 4, 3) == pipeline_floor_s(gpipe, 12.0, 4, 3) == 24.0
    assert pipeline_floor_s(zb, 12.0, 4, 3) == 16.0
    assert pipeline_cutoff_s(base, (2.0, 4.0, 6.0), 4) == 30.0
    assert pipeline_cutoff_s(zb, (2.0, 4.0, 6.0), 4) == 24.0


def test_the_default_space_is_the_one_searched_before():
    """No listed axis: one variant, the problem itself, at cp 1 (the space and pricing unchanged)."""
    problem = HeteroProblem(TINY, CLUSTERS["mixed"], 8, 512)
    assert axes.variants(problem) == [problem] and axes.variants(problem)[0] is problem
    assert {d.dims.cp for d in hetero._degrees(problem)} == {1}


def test_variants_list_schedules_and_offloads_like_the_uniform_search():
    """zb-h1 and gpipe with offload: 2 schedules × 8 offload options; interleaved is left to the seeds."""
    problem = HeteroProblem(
        TINY, CLUSTERS["a100"], 8, 512, schedules=("interleaved", "gpipe", "zb-h1")
    )
    assert [v.schedule for v in axes.variants(problem)] == ["gpipe", "zb-h1"]
    offloading = HeteroProblem(TINY, CLUSTERS["a100"], 8, 512, vary_offload=True)
    assert len(axes.variants(offloading)) == 8
    with pytest.raises(InputError, match="cp: '0' is not allowed"):  # --cp 0 looped forever
        HeteroProblem(TINY, CLUSTERS["a100"], 8, 512, cps=(0,))
    with pytest.raises(InputError, match="schedules: 'dualpipe' is not allowed"):
        HeteroProblem(TINY, CLUSTERS["a100"], 8, 512, schedules=("1f1b", "dualpipe"))


@pytest.mark.parametrize(
    ("field", "option"),
    [("micro_batches", "micro-batch"), ("tps", "tp"), ("pps", "pp"), ("cps", "cp")],
)
def test_a_zero_degree_or_micro_batch_is_refused_in_one_line(field, option):
    """--micro-batch 0 ended in an internal ZeroDivisionError (the session's review): every listed degree and
    micro-batch size is a positive count, refused by the command's option name otherwise."""
    with pytest.raises(InputError, match=f"^{option}: '0' is not allowed; give positive integers$"):
        HeteroProblem(TINY, CLUSTERS["a100"], 8, 512, **{field: (0,)})


def test_cluster_space_size_counts_the_listed_candidates_with_cp_and_variants(monkeypatch):
    """cluster_space_size against the candidate stream with the per-stage rules switched off."""
    problem = HeteroProblem(
        TINY, CLUSTERS["mixed"], 8, 512, cps=(1, 2), schedules=("1f1b", "zb-h1")
    )
    monkeypatch.setattr(hetero, "_stage_ok", lambda *args: True)
    monkeypatch.setattr(hetero, "launchable", lambda *args: True)
    monkeypatch.setattr(hetero, "takes_depth", lambda *args: True)
    listed, degrees = [0, 0], list(hetero._degrees(problem))
    for _ in hetero._candidates(problem, pool_orders(problem.cluster), degrees, math.inf, listed):
        pass
    assert listed[1] == hetero.cluster_space_size(problem) > 0


def test_non_uniform_space_size_with_cp_equals_the_listed_count():
    """Σ over cp of every composition whose stages cp divides, each stage's tp a power of two with tp·cp
    dividing its GPUs, × modes × micro-batch counts × variants."""
    cluster = _cluster([("dgx-a100-80gb", 8)])
    problem = HeteroProblem(TINY, cluster, 16, 512, cps=(1, 2, 4), schedules=("1f1b", "zb-h1"))
    counts, modes = [1, 2], len(problem.recompute)
    total = 0
    for cp, pp in itertools.product(problem.cps, range(1, 4)):
        for comp in _compositions(8, pp):
            ways = 1
            for g in comp:
                ways *= modes * sum(1 for t in (1, 2, 4, 8) if g % (t * cp) == 0)
            total += ways
    assert non_uniform_space_size(problem, 3, counts) == total * len(counts) * 2


def test_cli_honours_cp_and_schedule_and_refuses_what_it_cannot_search(capsys):
    from paraplan.cli import main

    base = ["search", "-m", "gpt3-125m", "--system", "dgx-a100-80gb", "--gpus", "4"]
    base += ["--global-batch", "8", "--seq-length", "512", "--json", "--time-budget", "10"]
    with pytest.raises(SystemExit) as info:
        main([*base, "--non-uniform", "--cp", "2", "--schedule", "1f1b,zb-h1"])
    assert info.value.code in (0, None)
    import json

    plans = json.loads(capsys.readouterr().out)["plans"]
    assert plans and all(p["plan"]["stages"][0]["cp"] == 2 for p in plans)
    with pytest.raises(SystemExit) as info:
        main([*base, "--non-uniform", "--schedule", "dualpipe"])
    assert info.value.code == 2 and "'dualpipe' is not allowed" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["search", "-m", "t5-3b", *base[3:], "--cp", "2"])
    assert info.value.code == 2 and "--cp: '2' is not allowed" in capsys.readouterr().err


def _refusal(problem: HeteroProblem, seeded: bool) -> str:
    """The command's message for what axes_violations refuses ("" when nothing)."""
    refused = axes.axes_violations(problem, seeded)
    return str(InputError.from_violations(refused)) if refused else ""


def test_a_cp_no_stage_runs_is_refused_in_the_rule_s_words():
    """axes_violations names --cp with the first rule that refuses it at every tp: the sequence (cp_rule: 2·cp
    must divide it), DeepSpeed's launcher (no ring context parallelism); --schedule interleaved alone only
    where no uniform seed runs it (the AMP-style search)."""
    odd = HeteroProblem(TINY, CLUSTERS["a100"], 8, 500, cps=(4,))
    assert (
        _refusal(odd, True)
        == "--cp: '4' is not allowed; seq_length 500 must be divisible by 2·cp = 8"
    )
    ring = HeteroProblem(TINY, CLUSTERS["a100"], 8, 512, cps=(2,), framework="deepspeed")
    assert "deepspeed's launcher does not run it" in _refusal(ring, True)
    listed = HeteroProblem(TINY, CLUSTERS["a100"], 8, 512, schedules=("interleaved",))
    assert _refusal(listed, True) == ""
    assert _refusal(listed, False).startswith("--schedule: 'interleaved' is not allowed")
