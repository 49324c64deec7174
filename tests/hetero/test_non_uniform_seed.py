"""``search --non-uniform`` never returns a plan slower than the best uniform plan a per-stage plan can
state (search.staged.uniform_seed): the uniform exact search (search.run.search) restricted to cp 1, the
per-stage schedules, no offload, the default placement and split and tp inside a node, its plans restated
stage by stage (specs.uniform_stages). Checked on a fixed problem in both modes (exact enumeration and
bottleneck alleviation) and over random small problems; every returned plan passes the per-stage plan
check (specs.stage_plan.stage_plan_violations) and re-estimates to its step time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.catalog import load_model, load_system
from paraplan.search.run import search
from paraplan.search.staged.hetero import HeteroProblem, search_cluster
from paraplan.search.staged.non_uniform import search_non_uniform
from paraplan.search.staged.uniform_seed import uniform_problem, uniform_seeds
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.stage_plan import stage_plan_violations
from paraplan.specs.uniform_stages import unsupported_field_violations
from paraplan.step.per_stage import estimate_stage_plan

REL = 1e-9


def uniform_best_expressible(problem: HeteroProblem) -> float:
    """The best step of the uniform exact search over the plans a per-stage plan states (its problem,
    search.staged.uniform_seed.uniform_problem, checked here to be restricted so: cp 1, schedules 1f1b /
    interleaved / gpipe, no offload, default placement, 1-D tp within a node), plans with a field a
    per-stage plan lacks (specs.uniform_stages.unsupported_field_violations) left out."""
    sp = uniform_problem(problem)
    assert sp.cp == (1,) and set(sp.schedules) == {"1f1b", "interleaved", "gpipe"}
    assert not sp.vary_offload and not sp.vary_placement and sp.tp_layouts == ("1d",)
    assert max(sp.tp) <= problem.cluster.pools[0].gpus_per_node
    plans = [r for r in search(sp, top_k=20, workers=1).plans]
    steps = [r.estimate.step_time_s for r in plans if not unsupported_field_violations(r.plan)]
    return min(steps) if steps else float("inf")


def assert_no_worse_and_valid(problem: HeteroProblem, result) -> None:
    """The best returned step is at most the uniform best expressible; every plan passes the per-stage
    check and re-estimates to its step."""
    best = uniform_best_expressible(problem)
    if best < float("inf"):
        assert result.plans, "a uniform plan fits, so the per-stage search returns one"
        assert result.plans[0].step_time_s <= best * (1 + REL)
    for c in result.plans:
        assert stage_plan_violations(c.plan, problem.model, problem.cluster) == []
        est = estimate_stage_plan(problem.model, problem.cluster, c.plan)
        assert est.step_time_s == pytest.approx(c.step_time_s, rel=REL)
    steps = [c.step_time_s for c in result.plans]
    assert steps == sorted(steps)


def _problem(model: str, gpus: int, batch: int, seq: int) -> HeteroProblem:
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), gpus)
    return HeteroProblem(load_model(model), cluster, batch, seq)


@pytest.mark.parametrize("exact_limit", [3000, 0])
def test_non_uniform_is_never_slower_than_the_uniform_best(exact_limit):
    """gpt3-1.3b on 16 A100s, batch 64, seq 2048: the uniform best (found with interleaving, sequence
    parallelism or ZeRO, which the per-stage search's own candidates do not vary) is kept, in the exact
    mode (a small space: max_stages 2) and in the alleviation mode (exact_limit 0), where the AMP-style
    start alone is slower."""
    problem = _problem("gpt3-1.3b", 16, 64, 2048)
    result = search_non_uniform(problem, max_stages=2, exact_limit=exact_limit, time_budget_s=5.0)
    assert result.mode == ("exact" if exact_limit else "alleviation")
    assert_no_worse_and_valid(problem, result)
    seeds = uniform_seeds(problem, float("inf"))
    assert seeds and seeds[0].step_time_s == pytest.approx(
        uniform_best_expressible(problem), rel=REL
    )


def test_the_seed_beats_the_amp_style_start_here():
    """The case the seed is for: on this problem the AMP-style search (1f1b, no ZeRO, no sequence
    parallelism: the per-stage search's own run-wide settings) is slower than the uniform best, and the
    per-stage search now returns at most the latter."""
    problem = _problem("gpt3-1.3b", 16, 64, 2048)
    amp = search_cluster(problem, top_k=1).plans[0].step_time_s
    best = uniform_best_expressible(problem)
    assert best < amp
    result = search_non_uniform(problem, exact_limit=0, time_budget_s=5.0)
    assert result.plans[0].step_time_s <= best * (1 + REL)


def test_no_seed_without_the_megatron_engine():
    """The uniform path prices Megatron-LM's pipeline runtime only: a DeepSpeed-engine problem has no seed."""
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    problem = HeteroProblem(load_model("gpt3-350m"), cluster, 32, 1024, engine="deepspeed")
    assert uniform_seeds(problem, float("inf")) == []


@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    model=st.sampled_from(["gpt3-125m", "gpt3-350m", "gpt3-1.3b"]),
    gpus=st.sampled_from([2, 4, 8, 16]),
    batch=st.sampled_from([16, 32, 64]),
    seq=st.sampled_from([512, 2048]),
    exact_limit=st.sampled_from([0, 3000]),
)
def test_never_slower_than_the_uniform_best_on_random_small_problems(
    model, gpus, batch, seq, exact_limit
):
    problem = _problem(model, gpus, batch, seq)
    result = search_non_uniform(problem, max_stages=3, exact_limit=exact_limit, time_budget_s=3.0)
    assert_no_worse_and_valid(problem, result)
