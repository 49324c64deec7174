"""The per-stage searches take mixture-of-experts models (issue 31): ``search --cluster`` and ``--non-uniform``
search one ep and etp per plan and the (dispatcher, a2a overlap) switches with the uniform search's rules
(search.expert_axes), an MoE stage on one pool (specs.rules_moe.stage_pools_rule). Every plan they return passes
the per-stage plan's check and re-estimates through ``estimate --plan`` (a plan file) to the step time they
report; the split's pruning bound (search.staged.splits.lower_bound) and the split objective's pipeline part stay
at or below the composed step of MoE candidates (the branch and bound's admissibility)."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.hetero.test_staged_plans_valid import CHECK as STAGED_CHECK

from paraplan.catalog import load_model
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.search.expert_axes import expert_axes_violations, expert_degrees
from paraplan.search.staged import hetero
from paraplan.search.staged.balance import pipeline_objective
from paraplan.search.staged.experts import expert_options, expert_space_factor
from paraplan.search.staged.hetero import HeteroProblem, search_cluster
from paraplan.search.staged.non_uniform import search_non_uniform
from paraplan.search.staged.splits import lower_bound, split_stages, stage_matrices
from paraplan.specs.errors import InputError
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.stage_plan import (
    stage_plan_from_dict,
    stage_plan_to_dict,
    stage_plan_violations,
)
from paraplan.step.per_stage import estimate_stage_plan, tied_embedding_sync_s

CHECK = settings(STAGED_CHECK, max_examples=4)  # derandomized, no deadline, no database
POOLS = {
    "h100": {"name": "h100", "system": "dgx-h100-80gb", "nodes": 1},
    "a100": {"name": "a100", "system": "dgx-a100-80gb", "nodes": 1},
}
# (model, the pools its searches run on, the axes kept small so that a search takes well under a second)
CASES = {
    "mixtral-8x7b": (("h100", "a100"), {"tps": (4,), "pps": (2,), "micro_batches": (4,)}),
    "qwen3-30b-a3b": (("h100",), {"tps": (1, 2), "pps": (1, 2), "micro_batches": (2,)}),
}


def _problem(name: str, one_pool: bool = False, **fields) -> tuple[HeteroProblem, dict]:
    """(the problem of CASES' ``name``, its cluster's file form); ``one_pool``: as many H100 nodes as the case has
    pools, in one pool (the non-uniform search's cluster)."""
    names, axes = CASES[name]
    pools = [POOLS[p] for p in names]
    cluster = {"pools": [POOLS["h100"] | {"nodes": len(names)}] if one_pool else pools}
    fields = axes | {"recompute": ("none",), "ep": (4, 8)} | fields
    problem = HeteroProblem(load_model(name), cluster_from_dict(cluster), 16, 2048, **fields)
    return problem, cluster


def _reestimated_s(cli, tmp_path, problem: HeteroProblem, cluster: dict, plan) -> float:
    """``paraplan estimate --plan FILE --cluster FILE --json``'s step time of a searched plan."""
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(stage_plan_to_dict(plan)))
    argv = ["--model", problem.model.name, "--cluster", str(tmp_path / "cluster.yaml")]
    code, out, err = cli("estimate", *argv, "--plan", str(tmp_path / "plan.yaml"), "--json")
    assert code in (0, 1), err
    return json.loads(out)["step_time_s"]


@CHECK
@given(
    st.sampled_from(sorted(CASES)),
    st.sampled_from(("cluster", "non-uniform")),
    st.sampled_from(((), ("alltoall",), ("allgather", "deepep"))),
)
def test_searched_moe_plans_pass_the_check_and_reestimate(cli, tmp_path_factory, name, kind, d):
    """Random small MoE problems: every returned plan passes the per-stage plan check, states one ep and etp on
    every stage, and ``estimate --plan`` of its file gives the reported step time at relative 1e-9."""
    tmp_path = tmp_path_factory.mktemp("moe")
    problem, cluster = _problem(name, kind == "non-uniform", dispatchers=d or None)
    if kind == "cluster":
        result = search_cluster(problem, top_k=3)
    else:
        result = search_non_uniform(problem, top_k=3, time_budget_s=30.0, seeded=False)
    assert result.plans
    for c in result.plans:
        assert stage_plan_violations(c.plan, problem.model, problem.cluster) == []
        assert len({(s.ep, s.etp) for s in c.plan.stages}) == 1 and c.plan.stages[0].ep in (4, 8)
        assert c.plan.moe_dispatcher in (d or ("alltoall", "allgather", "deepep"))
        step = _reestimated_s(cli, tmp_path, problem, cluster, c.plan)
        assert step == pytest.approx(c.step_time_s, rel=1e-9), c.label


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_bounds_stay_admissible_for_moe_candidates(name):
    """For every candidate of the AMP-style search (each ep, etp, dispatcher and a2a overlap): the pruning bound
    is at most the composed step of the split found, and the split objective's pipeline part plus the tied
    all-reduce (the solver's cutoff test, splits.split_stages) is at most that step too."""
    problem, _ = _problem(name)
    stream = hetero._candidates(
        problem, hetero.pool_orders(problem.cluster), list(hetero._degrees(problem)), 1e300, [0, 0]
    )
    checked = 0
    for settings_, m, _, priced in stream:
        bound, arrays = lower_bound(priced, settings_)
        found = split_stages(priced, settings_, m, arrays)
        if found is None:
            continue
        checked += 1
        assert bound <= found.step_s * (1 + 1e-12)
        times, _ = stage_matrices(priced, settings_, arrays)
        b = found.bounds
        work = [times[i, b[i], b[i + 1]] for i in range(len(settings_))]
        tied = tied_embedding_sync_s(
            priced.model, priced.cluster, priced.common, settings_[0], settings_[-1]
        )
        assert pipeline_objective(work, m) + tied <= found.step_s * (1 + 1e-12)
    assert checked >= 4


def test_expert_options_follow_the_uniform_rules():
    """Mixtral on 16 GPUs, stages of tp 4, dp 2: ep over the divisors of 8 with ep·etp dividing 8, etp in
    {1, 4} (search.expert_axes.expert_degrees, the uniform search's rule); each pair's switches: three
    dispatchers, the a2a overlap only where ep·etp > 1; the space factor counts them before the rules."""
    problem, _ = _problem("mixtral-8x7b", ep=None)
    dims = [ParallelDims(tp=4, dp=2, pp=2)] * 2
    stacks = [p.system.accelerator.efficiency.runtime.parallelism for p in problem.cluster.pools]
    pairs = expert_degrees(problem.model, dims, None, None, stacks)
    assert pairs == [(1, 1), (1, 4), (2, 1), (2, 4), (4, 1), (8, 1)]
    options = expert_options(problem, dims)
    assert len(options) == 3 + 5 * 6  # (1, 1): no overlap
    assert {(o[1].moe_dispatcher, o[1].moe_a2a_overlap) for o in options if o[0][0].ep == 8} == {
        (d, ov) for d in ("alltoall", "allgather", "deepep") for ov in (False, True)
    }
    assert all(d.ep == o[0][0].ep for o in options for d in o[0])  # one ep on every stage
    assert (
        expert_space_factor(problem, [4]) == 3 + 7 * 6
    )  # ep in 1,2,4,8 x etp in 1,4 before the rules


def test_an_moe_stage_takes_one_pool():
    """A candidate whose stage straddles the two pools is left out for an MoE model (stage_pools_rule): the
    AMP-style search on two 8-GPU pools at pp 1 (one stage of 16 GPUs) lists none."""
    problem, _ = _problem("mixtral-8x7b", pps=(1,))
    assert search_cluster(problem, top_k=1).evaluated == 0


@pytest.mark.slow
def test_the_exact_non_uniform_search_takes_moe_models(cli, tmp_path):
    """The exact path of ``--non-uniform`` (every per-stage combination, here 4,980 with their expert options) on
    Qwen3-30B-A3B, 8 H100s, ep 4 or 8: stages of different tp under one ep, each plan re-estimated by its file."""
    fields = {"etp": (1,), "dispatchers": ("alltoall",), "tps": None, "pps": None}
    problem, cluster = _problem("qwen3-30b-a3b", True, micro_batches=None, **fields)
    result = search_non_uniform(problem, top_k=3, exact_limit=10**5, time_budget_s=60, seeded=False)
    assert result.mode == "exact" and not result.stopped and result.plans
    assert any(len({s.tp for s in c.plan.stages}) > 1 for c in result.plans)
    for c in result.plans:
        assert stage_plan_violations(c.plan, problem.model, problem.cluster) == []
        step = _reestimated_s(cli, tmp_path, problem, cluster, c.plan)
        assert step == pytest.approx(c.step_time_s, rel=1e-9), c.label


def test_search_cluster_cli_returns_mixtral_plans(cli, tmp_path):
    """``paraplan search --cluster FILE --model mixtral-8x7b`` returns plans (exit 0), each stating one ep on every
    stage and the dispatcher asked for; the table's labels name the expert layout."""
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"pools": list(POOLS.values())}))
    argv = ["search", "--cluster", str(tmp_path / "cluster.yaml"), "--model", "mixtral-8x7b"]
    argv += ["--global-batch", "32", "--seq-length", "2048", "--top", "2", "--tp", "4", "--pp", "2"]
    argv += ["--micro-batch", "4", "--ep", "8", "--dispatcher", "alltoall"]
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    plans = json.loads(out)["plans"]
    assert len(plans) == 2
    for p in plans:
        assert {s["ep"] for s in p["plan"]["stages"]} == {8}
        assert p["plan"].get("moe_dispatcher", "alltoall") == "alltoall"  # the default, left out
        assert "ep8 etp1 alltoall" in p["label"]
    code, out, err = cli(*argv)
    assert code == 0 and "ep8 etp1 alltoall" in out, err


@pytest.mark.slow
@pytest.mark.parametrize("name, pp", [("deepseek-v3", 16), ("gpt-oss-120b", 8)])
def test_mla_mtp_and_windowed_models_are_searched(name, pp):
    """DeepSeek-V3 (MLA, an MTP module) and GPT-OSS-120B (windowed and full layers in turn), which
    ``per_stage_model_rule`` refused by name, are searched on 16 DGX H100 + 16 DGX H200 nodes: every plan passes
    the per-stage check and re-estimates (step.per_stage.estimate_stage_plan of its dict) to the reported step."""
    cluster = cluster_from_dict(
        {
            "pools": [
                {"name": "a", "system": "dgx-h100-80gb", "nodes": 16},
                {"name": "b", "system": "dgx-h200", "nodes": 16},
            ]
        }
    )
    axes = {"tps": (2,), "pps": (pp,), "micro_batches": (1,), "ep": (8,), "recompute": ("full",)}
    problem = HeteroProblem(load_model(name), cluster, 512, 4096, dispatchers=("alltoall",), **axes)
    result = search_cluster(problem, top_k=2)
    assert result.plans and not result.stopped
    for c in result.plans:
        assert stage_plan_violations(c.plan, problem.model, cluster) == []
        plan = stage_plan_from_dict(stage_plan_to_dict(c.plan))
        est = estimate_stage_plan(problem.model, cluster, plan)
        assert est.step_time_s == pytest.approx(c.step_time_s, rel=1e-9), c.label


def test_the_fixed_moe_knobs_are_checked_and_sequence_parallelism_is_stated():
    """The problem refuses a router spread above √(experts/top_k − 1) (Mixtral: √(8/2 − 1) = 1.732) and a stated
    deepep dispatcher with a capacity factor, as the uniform search does; an MoE model's search states sequence
    parallelism (Megatron-Core's rule with tp > 1) unless the launcher refuses it (DeepSpeed's AutoTP), a
    dense model's keeps it off."""
    with pytest.raises(InputError, match=r"expert_load_cv: 2\.0 is not allowed.*= 1\.732"):
        _problem("mixtral-8x7b", expert_load_cv=2.0)
    with pytest.raises(InputError, match="moe_dispatcher: 'deepep' is not allowed; the deepep"):
        _problem("mixtral-8x7b", moe_dispatcher="deepep", capacity_factor=1.0)
    assert _problem("mixtral-8x7b")[0].sequence_parallel
    assert not _problem("mixtral-8x7b", framework="deepspeed", ep=(1,))[0].sequence_parallel
    problem, _ = _problem("mixtral-8x7b")
    dense = HeteroProblem(load_model("llama3-8b"), problem.cluster, 16, 2048)
    assert not dense.sequence_parallel


@pytest.mark.parametrize("kind", ("cluster", "non-uniform"))
@pytest.mark.parametrize(
    "model, ep, why",
    [
        (
            "llama3-8b",
            "2",
            "ep: [2] is not allowed; expert parallelism needs a mixture-of-experts model",
        ),
        ("mixtral-8x7b", "3", "ep: [3] is not allowed; must divide experts=8"),
    ],
)
def test_the_per_stage_searches_refuse_expert_axes_no_plan_takes(
    cli, tmp_path, kind, model, ep, why
):
    """``--ep`` on a dense model, or an ep that divides no expert count, exits 2 naming ep in the per-stage
    searches as in the uniform one (search.expert_axes.expert_axes_violations, both problems' check); it was
    ignored on the dense model (exit 0) and left "no candidate" on Mixtral (exit 1)."""
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"pools": [POOLS["h100"]]}))
    where = (
        ["--cluster", str(tmp_path / "cluster.yaml")]
        if kind == "cluster"
        else ["-s", "dgx-h100-80gb", "--gpus", "8", "--non-uniform"]
    )
    code, out, err = cli("search", "-m", model, *where, "--global-batch", "16", "--ep", ep)
    assert code == 2 and why in err + out, (code, out, err)
    uniform = ["search", "-m", model, "-s", "dgx-h100-80gb", "--gpus", "8", "--global-batch", "16"]
    code, out, err = cli(*uniform, "--ep", ep)
    assert code == 2 and why in err + out, (code, out, err)


def test_expert_axes_violations_by_hand():
    """Mixtral (8 experts of width 14336): ep 3 divides no expert count, etp 3 no width (14336 = 2^11·7), deepep
    pads to no capacity; an axis with one value some plan takes is kept; a dense model takes ep = etp = 1."""
    mixtral, dense = load_model("mixtral-8x7b"), load_model("llama3-8b")
    assert expert_axes_violations(mixtral, (2, 3), (1, 2), None, None, None) == []
    assert expert_axes_violations(mixtral, (3,), None, None, None, None) == [
        ("ep", [3], "must divide experts=8")
    ]
    assert expert_axes_violations(mixtral, None, (3,), None, None, None) == [
        ("etp", [3], "must divide moe_ffn_hidden=14336")
    ]
    refused = expert_axes_violations(mixtral, None, None, ("deepep",), 1.0, None)
    assert [(f, v) for f, v, _ in refused] == [("dispatcher", ["deepep"])]
    assert expert_axes_violations(mixtral, None, None, ("deepep", "alltoall"), 1.0, None) == []
    assert expert_axes_violations(dense, (1,), (1,), ("deepep",), None, None) == []
    assert [
        (f, v) for f, v, _ in expert_axes_violations(dense, None, (1, 2), None, None, None)
    ] == [("etp", [1, 2])]
