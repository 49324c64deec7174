"""search.ranking: ties ordered by memory then simplicity; equivalent plans grouped; one ranking for
the fast and the exhaustive search (a problem small enough to compare them on every K)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from paraplan.catalog import load_model, load_system
from paraplan.step.estimate import estimate
from paraplan.search import ranking, row_scan
from paraplan.search.ranking import (
    Candidate,
    kth_group_objective,
    non_default_knobs,
    rank_key,
    tie_value,
    top_groups,
)
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.specs.plan import PlanSpec

BASE = dict(gpus=8, global_batch=8, seq_length=2048)


def plan(**fields) -> PlanSpec:
    return PlanSpec(**{**BASE, **fields})


# ---- unit: the keys ------------------------------------------------------------------------------
def test_non_default_knobs_by_hand():
    assert non_default_knobs(plan()) == 0
    assert non_default_knobs(plan(schedule="1f1b")) == 0  # the schedule the vpp implies is no knob
    assert non_default_knobs(plan(tp=2, zero=1)) == 2
    assert (
        non_default_knobs(plan(tp=2, pp=2, vpp=2, global_batch=16, schedule="interleaved")) == 3
    )  # tp, pp, vpp
    assert (
        non_default_knobs(
            plan(pp=2, schedule="gpipe", offload_weights=True, overlap_dp_grad_reduce=False)
        )
        == 4
    )


def test_tie_value_rounds_to_ten_significant_digits():
    assert tie_value(0.1 + 0.2) == tie_value(0.3)
    assert tie_value(1.0000000001) != tie_value(1.000000001)
    assert list(tie_value(np.array([2.5e-6, -3.0, 0.0]))) == [2.5e-6, -3.0, 0.0]


def test_rank_key_orders_ties_by_offloads_then_simplicity_then_memory_then_canonical_order():
    """At equal time the plan a user can act on first (issue 34): no offload before offload, fewer
    non-default knobs, then less memory, then the canonical order."""
    simple, knobby = plan(zero=1), plan(zero=1, offload_weights=True)
    a = Candidate(1.0, 1.0, 50.0, knobby, (5, 0))  # an offload: after every tie without one
    b = Candidate(1.0, 1.0, 60.0, simple, (0, 0))  # more memory than c: after c
    c = Candidate(1.0 + 1e-13, 1.0, 50.0, simple, (9, 9))  # equal to 10 digits
    d = Candidate(0.9, 1.2, 70.0, knobby, (7, 0))  # better objective: first
    e = Candidate(1.0, 1.0, 40.0, plan(zero=1, tp=2), (1, 0))  # one knob more than b and c
    assert sorted([a, b, c, d, e], key=rank_key) == [d, c, b, e, a]


def test_groups_and_the_kth_group_objective():
    p1, p2, p3 = plan(zero=1), plan(zero=1, placement="tp-dp-cp-pp"), plan(zero=2)
    same = [
        Candidate(1.0, 2.0, 50.0, p2, (1, 0)),
        Candidate(1.0, 2.0, 50.0, p1, (2, 0)),
    ]  # differ in placement only
    other = Candidate(
        1.0, 2.0, 40.0, p3, (3, 0)
    )  # same time, less memory: its own group, ranked first
    worse = Candidate(2.0, 4.0, 10.0, p1, (4, 0))
    groups = top_groups([*same, other, worse], 2)
    assert [[c.key for c in g] for g in groups] == [
        [(3, 0)],
        [(2, 0), (1, 0)],
    ]  # simpler placement represents
    objectives, steps, peaks = [1.0, 1.0, 1.0, 2.0], [2.0, 2.0, 2.0, 4.0], [50.0, 50.0, 40.0, 10.0]
    assert kth_group_objective(objectives, steps, peaks, 2) == 1.0
    assert kth_group_objective(objectives, steps, peaks, 3) == 2.0
    assert kth_group_objective(objectives, steps, peaks, 4) == math.inf
    assert ranking.within(1.0 + 1e-12, 1.0) and not ranking.within(1.001, 1.0)


# ---- both searches, a problem with equivalent plans ------------------------------------------------
@pytest.fixture(scope="module")
def grouped():
    """llama3-8b on 64 H100 with cp 4: the tp-cp-dp-pp and tp-dp-cp-pp placements give the same time
    and memory for some plans (40 candidates, every K checked against the exhaustive search)."""
    problem = SearchProblem(
        model=load_model("llama3-8b"),
        system=load_system("dgx-h100-80gb"),
        gpus=64,
        global_batch=64,
        seq_length=8192,
        tp=(4,),
        cp=(2, 4),
        pp=(1,),
        micro_batch=(1, 2),
        recompute=("none",),
        zero=(2,),
        vary_offload=False,
        vary_overlap=False,
    )
    return problem, exhaustive_search(problem, top_k=40)


def test_equivalent_plans_are_one_row_with_the_same_time_and_memory(grouped):
    problem, reference = grouped
    with_equivalents = [r for r in reference.plans if r.equivalents]
    assert with_equivalents, "the problem no longer has equivalent plans"
    for ranked in with_equivalents:
        for other in ranked.equivalents:
            e = estimate(problem.model, problem.system, other)
            assert tie_value(e.step_time_s) == tie_value(ranked.estimate.step_time_s)
            assert tie_value(e.peak_stage.peak_bytes) == tie_value(
                ranked.estimate.peak_stage.peak_bytes
            )
            assert non_default_knobs(other) >= non_default_knobs(ranked.plan)
    keys = [
        ranking.group_key(r.objective, r.estimate.step_time_s, r.estimate.peak_stage.peak_bytes)
        for r in reference.plans
    ]
    assert len(set(keys)) == len(keys)  # K rows, K different choices


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_fast_and_exhaustive_agree_on_groups_for_every_k(grouped, monkeypatch, chunk):
    problem, reference = grouped
    if chunk is not None:
        monkeypatch.setattr(row_scan, "CHUNK_CANDIDATES", chunk)
    cuts = [i + 1 for i, r in enumerate(reference.plans) if r.equivalents]  # K ending on a group
    for k in sorted({1, 2, 5, *cuts[:3], len(reference.plans)}):
        fast = search(problem, top_k=k)
        assert [r.key for r in fast.plans] == [r.key for r in reference.plans[:k]], k
        assert [r.equivalents for r in fast.plans] == [
            r.equivalents for r in reference.plans[:k]
        ], k
        if chunk is None:
            assert exhaustive_search(problem, top_k=k).plans[-1].key == reference.plans[k - 1].key


def test_unique_rows_is_numpys_unique_over_rows():
    """ranking.unique_rows (the K-th group's objective, the groups a split search publishes) gives np.unique(axis=0)'s
    rows, in its order, infinities included, without the masked-array import np.unique makes."""
    from paraplan.search.ranking import unique_rows

    rng = np.random.default_rng(7)
    for _ in range(300):
        rows = rng.integers(0, 4, size=(int(rng.integers(1, 40)), 3)).astype(float)
        rows[rng.random(rows.shape) < 0.1] = np.inf
        assert np.array_equal(unique_rows(rows), np.unique(rows, axis=0))
    assert unique_rows(np.empty((0, 3))).shape == (0, 3)
