"""The per-stage searches vary the uniform search's recomputation modes (issue 31: one rule, in
specs.recompute and search.launch.searched_modes): for every framework profile, and without one, the
Aceso-style alleviation switches a stage to exactly the modes the uniform search varies with that
framework (op_sac with torchtitan, save_dots with maxtext: a stage states a policy mode as its per-op list,
specs.recompute.stage_fields), the AMP-style search takes the same modes from ``--recompute``, and a
per-stage plan prices a policy mode as the uniform estimator does."""

from __future__ import annotations

import pytest

from paraplan.catalog import framework_names, load_framework, load_system
from paraplan.search.space import SearchProblem
from paraplan.search.staged import hetero, non_uniform
from paraplan.search.staged.alleviate import StageConfig, recompute_label
from paraplan.search.staged.hetero import HeteroProblem, profile_fields, search_cluster
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.recompute import MODES, OP_SAC, SAVE_DOTS, stage_fields, stage_mode
from paraplan.specs.stage_plan import check_stage_plan, stage_plan_from_dict
from tests.hetero.test_hetero_cli_and_cases import MODEL
from tests.hetero.test_search_framework import assert_launched, re_estimate
from tests.unit.test_one_path import assert_same, both_paths

# the profiles whose loops run on more than one GPU (a one-device loop's per-stage searches are refused:
# test_one_device_loops_have_no_per_stage_search)
ONE_DEVICE = tuple(n for n in framework_names() if not load_framework(n).parallelism)
FRAMEWORKS = (None, *(n for n in framework_names() if n not in ONE_DEVICE))
SWIGLU = ModelSpec(name="tiny-swiglu", **(MODEL | {"mlp": "swiglu"}))
SYSTEM = "dgx-a100-80gb"


class Captured(Exception):
    """Raised by the stand-in alleviation once it has the modes the search passed it."""


def cluster_for(framework: str | None):
    cluster = uniform_cluster(load_system(SYSTEM), 8)
    if framework is None:
        return cluster, {}
    return profile_fields(load_framework(framework), cluster)


def problem_for(framework: str | None, **given) -> HeteroProblem:
    cluster, fields = cluster_for(framework)
    return HeteroProblem(SWIGLU, cluster, 16, 512, **(fields | given))


def uniform_modes(framework: str | None) -> tuple[str, ...]:
    """The modes the uniform search varies for this model at tp 1, cp 1 (SearchProblem.layer_knobs)."""
    problem = SearchProblem(SWIGLU, load_system(SYSTEM), 8, 512, 16, framework=framework)
    return tuple(dict.fromkeys(k.recompute for k in problem.layer_knobs(1, 1)))


def alleviation_modes(framework: str | None, monkeypatch) -> tuple[str, ...]:
    """The modes the non-uniform search hands its alleviation (search.staged.non_uniform._alleviate)."""
    seen: dict[str, tuple[str, ...]] = {}

    def stand_in(start, evaluate, time_budget_s, recompute=()):
        seen["modes"] = tuple(m for m in (stage_mode(*r) for r in recompute) if m is not None)
        raise Captured

    monkeypatch.setattr(non_uniform, "alleviate", stand_in)
    start = (StageConfig.of(SWIGLU.layers + 2, 8),)
    with pytest.raises(Captured):
        non_uniform._alleviate(problem_for(framework), start, 1, 1.0)
    return seen["modes"]


def cluster_search_modes(framework: str | None, recompute, monkeypatch) -> tuple[str, ...]:
    """The modes of the stage settings the AMP-style search tries (hetero.launchable sees each)."""
    seen: list[str] = []

    def record(problem, settings):
        seen.extend(stage_mode(s.recompute, s.recompute_ops) for s in settings)
        return False

    monkeypatch.setattr(hetero, "launchable", record)
    search_cluster(problem_for(framework, recompute=recompute, pps=(1,)), top_k=1)
    return tuple(dict.fromkeys(seen))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_both_searches_vary_the_same_modes(framework, monkeypatch):
    uniform = uniform_modes(framework)
    assert set(uniform) >= {"none", "full"}
    assert alleviation_modes(framework, monkeypatch) == uniform
    assert cluster_search_modes(framework, uniform, monkeypatch) == uniform


@pytest.mark.parametrize("framework", ONE_DEVICE)
def test_one_device_loops_have_no_per_stage_search(framework):
    """pytorch-eager and pytorch-eager-bf16 run one process on one device (parallelism []): the per-stage
    searches refuse the 8-GPU cluster by name (specs.rules_stack.stack_gpus_rule)."""
    with pytest.raises(InputError, match="cluster: 8 GPUs is not allowed; .*runs on one device"):
        problem_for(framework)


def test_the_modes_are_the_stacks():
    """Per framework, not one tuple: deepspeed drops selective, torchtitan adds op_sac, maxtext save_dots."""
    assert uniform_modes("deepspeed") == ("none", "full")
    assert uniform_modes("megatron-core") == ("none", "selective", "full")
    assert uniform_modes("torchtitan") == ("none", "full", OP_SAC)
    assert uniform_modes("maxtext") == ("none", "selective", "full", SAVE_DOTS)
    assert OP_SAC not in uniform_modes(None) and SAVE_DOTS not in uniform_modes(None)


def test_a_stage_states_every_mode_once():
    for name, mode in MODES.items():
        rc, ops = stage_fields(name)
        assert stage_mode(rc, ops) == name == recompute_label(rc, ops)
        assert (rc, ops) == ((mode.recompute, ()) if not mode.modules else ("none", mode.modules))
    assert stage_mode("none", ("mlp",)) is None and recompute_label("none", ("mlp",)) == "ops mlp"


def test_a_mode_the_stack_does_not_run_is_refused_by_name():
    with pytest.raises(InputError, match="recompute"):
        problem_for("deepspeed", recompute=(OP_SAC,))


@pytest.mark.parametrize("mode", [OP_SAC, SAVE_DOTS])
@pytest.mark.parametrize("plan", [dict(tp=2, pp=2, zero=1), dict(tp=1, pp=4, zero=3)])
def test_a_stage_prices_a_policy_mode_as_the_uniform_plan(mode, plan):
    fields = dict(gpus=8, global_batch=16, micro_batch=1, seq_length=2048) | plan
    uniform, per_stage = both_paths(
        "llama3-8b", recompute="selective", recompute_modules=[mode], **fields
    )
    assert_same(uniform, per_stage)
    assert uniform.breakdown.recompute_s > 0


def test_a_policy_is_listed_alone_on_a_stage():
    stage = {"pool": "p", "gpus": 8, "layers": 4, "recompute_ops": [OP_SAC, "mlp"]}
    plan = {"global_batch": 16, "seq_length": 512, "microbatches": 2, "stages": [stage]}
    with pytest.raises(InputError, match="op_sac is a stack's recomputation policy, listed alone"):
        stage_plan_from_dict(plan)


def test_torchtitan_op_sac_plans_check_re_estimate_and_export():
    """--recompute op_sac with torchtitan: every stage states op_sac, the plan passes the per-stage check,
    re-estimates to its step time and exports to torchtitan (selective_ac_option "op")."""
    problem = problem_for("torchtitan", recompute=(OP_SAC,))
    result = search_cluster(problem, top_k=2, time_budget_s=2.0)
    assert result.plans
    for c in result.plans:
        assert {stage_mode(s.recompute, s.recompute_ops) for s in c.plan.stages} == {OP_SAC}
        assert OP_SAC in c.label
        check_stage_plan(c.plan, SWIGLU, problem.cluster)
        cluster = uniform_cluster(load_system(SYSTEM), 8)
        assert re_estimate(SWIGLU, cluster, "torchtitan", c.plan) == pytest.approx(
            c.step_time_s, rel=1e-9
        )
        assert_launched(c.plan, SWIGLU, "torchtitan", problem.cluster)
