"""The search never proposes a plan the estimator refuses by what the stack's runtime runs (specs.rules_stack):
under megatron-deepspeed (DeepSpeed's PipelineEngine: TrainSchedule, 1F1B only) no row of the uniform search has
another schedule or vpp > 1 with pp > 1, under the Hugging Face / plain PyTorch profiles none uses a parallel kind
their loop does not run; the fast search stays exact against the exhaustive one on those spaces, every row
passes the estimator's check, and the per-stage searches keep the same rules (search.staged.problem)."""

from __future__ import annotations

import math

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_search_fields, framework_system
from paraplan.search.exhaustive import exhaustive_search
from paraplan.search.run import search
from paraplan.search.space import SearchProblem
from paraplan.search.staged.hetero import HeteroProblem, search_cluster, under_profile
from paraplan.search.staged.non_uniform import search_non_uniform
from paraplan.specs.cluster import uniform_cluster
from paraplan.step.estimate import check_plan


def _problem(framework: str | None, **fields) -> SearchProblem:
    system = load_system("dgx-a100-80gb")
    fw = load_framework(framework) if framework else None
    axes = {"gpus": 16, "global_batch": 64, "seq_length": 2048, "pp": (1, 2), "tp": (1, 2)}
    return SearchProblem(
        model=load_model("gpt3-1.3b"),
        system=framework_system(fw, system) if fw else system,
        **(axes | fields),
        micro_batch=(1, 2),
        recompute=("none",),
        vary_placement=False,
        vary_offload=False,
        **(framework_search_fields(fw) if fw else {}),
    )


def _exact(problem: SearchProblem):
    fast, ref = search(problem, top_k=400), exhaustive_search(problem, top_k=400)
    assert [p.key for p in fast.plans] == [p.key for p in ref.plans]
    for a, b in zip(fast.plans, ref.plans):
        assert math.isclose(a.estimate.step_time_s, b.estimate.step_time_s, rel_tol=1e-9)
    for ranked in fast.plans:
        check_plan(problem.model, problem.system, ranked.plan)  # the estimator's own check passes
    return [p.plan for p in fast.plans]


def test_no_searched_plan_runs_a_schedule_deepspeeds_pipeline_engine_lacks():
    schedules = ("1f1b", "interleaved", "gpipe", "zb-h1")
    plans = _exact(_problem("megatron-deepspeed", schedules=schedules))
    assert {(p.pipeline_schedule, p.vpp) for p in plans if p.pp > 1} == {("1f1b", 1)}
    assert any(p.pp > 1 for p in plans)
    # Megatron-LM's runtime (no profile) runs the interleaved and GPipe schedules on the same space
    free = search(_problem(None, schedules=schedules), top_k=400).plans
    assert {"interleaved", "gpipe"} <= {p.plan.pipeline_schedule for p in free}


@pytest.mark.parametrize(
    "framework", ["hf-transformers", "hf-transformers-fsdp", "pytorch-compile"]
)
def test_no_searched_plan_runs_parallelism_the_loop_lacks(framework):
    plans = _exact(_problem(framework))
    runs = load_framework(framework).parallelism
    assert plans and all(p.pp == 1 and not p.overlap_tp_comm for p in plans)
    assert ("tp" in runs) == any(p.tp > 1 for p in plans)
    assert ("sp" in runs) == any(p.sequence_parallel for p in plans)


def test_a_one_device_loop_is_searched_on_one_gpu_only():
    """pytorch-eager's loop runs no parallel kind (parallelism []): 16 GPUs are refused by name before any
    split (specs.rules_stack.stack_gpus_rule), one GPU is searched."""
    from paraplan.specs.errors import InputError

    with pytest.raises(
        InputError, match="gpus: 16 is not allowed; .*runs on one device.*allowed: 1"
    ):
        _exact(_problem("pytorch-eager"))
    plans = _exact(_problem("pytorch-eager", gpus=1, global_batch=4, pp=None, tp=None))
    assert plans and all(p.gpus == 1 for p in plans)


def test_per_stage_searches_keep_the_engines_schedule_and_the_stacks_parallelism():
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    model = load_model("gpt3-1.3b")
    gpipe = HeteroProblem(model, cluster, 64, 2048, engine="deepspeed", schedule="gpipe")
    assert {c.plan.pp for c in search_cluster(gpipe, top_k=20).plans} == {1}
    cluster_hf, fields = under_profile(load_framework("hf-transformers-fsdp"), cluster, {})
    hf = HeteroProblem(model, cluster_hf, 64, 2048, **fields)
    for result in (search_cluster(hf, top_k=20), search_non_uniform(hf, top_k=20, seeded=False)):
        assert result.plans
        assert all(c.plan.pp == 1 and {s.tp for s in c.plan.stages} == {1} for c in result.plans)


def test_per_stage_searches_take_the_profiles_pipeline_engine():
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    _, fields = under_profile(load_framework("megatron-deepspeed"), cluster, {})
    assert fields["engine"] == "deepspeed"
    _, fields = under_profile(load_framework("megatron-core"), cluster, {})
    assert fields["engine"] == "megatron"
