"""``paraplan search --cluster`` and ``--non-uniform`` take ``--framework`` (issue 31): the per-stage searches
price with the profile's stack and plan defaults exactly as ``estimate --plan --framework`` does, so every
returned plan passes the per-stage plan check and re-estimates to the same step time through it; under a
profile with a launcher (search.launch) every returned plan is one its exporters write, as the uniform
search's rows are (the same rules: search.launch.stage_plan_allowed)."""

from __future__ import annotations

import json
import random

import pytest
import yaml

from paraplan.catalog import load_framework, load_system
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.cost.frameworks import framework_cluster, framework_plan_fields
from paraplan.export import export_plan
from paraplan.search import launch
from paraplan.search.staged.hetero import HeteroProblem, profile_fields, search_cluster
from paraplan.search.staged.non_uniform import search_non_uniform
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.plan import PlanSpec, runtime_fields_of
from paraplan.specs.recompute import plan_fields as mode_plan_fields
from paraplan.specs.recompute import stage_mode
from paraplan.specs.stage_plan import (
    StagePlanSpec,
    check_stage_plan,
    settled_stage_plan,
    stage_plan_from_dict,
    stage_plan_to_dict,
)
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.step.stage_links import StageSetting
from tests.hetero.test_hetero_cli_and_cases import MIXED, MODEL, run

REL = 1e-9
# profiles with a launcher (search.launch.TARGETS, through their base) and without one
LAUNCHED = ("torchtitan", "deepspeed", "megatron-core", "nemo-24.09")
FRAMEWORKS = (*LAUNCHED, "pytorch-compile", "megatron-deepspeed", "hf-transformers")


def re_estimate(model, cluster, framework: str, plan) -> float:
    """The plan's step time as ``estimate --plan --framework`` prices it (cli.hetero_cmd.estimate_plan_file)."""
    profile = load_framework(framework)
    data = framework_plan_fields(profile, stage_plan_to_dict(plan))
    est = estimate_stage_plan(
        model, framework_cluster(profile, cluster), stage_plan_from_dict(data)
    )
    return est.step_time_s


def as_uniform_plan(plan: StagePlanSpec, model: ModelSpec, cluster) -> PlanSpec:
    """The uniform plan a per-stage plan states when every stage has one tp, dp and recompute mode (what a
    launcher runs): its split as ``stage_layers`` unless it is the default one."""
    first = plan.stages[0]
    mode = stage_mode(first.recompute, first.recompute_ops)  # a policy mode: op_sac, save_dots
    assert mode is not None, "per-op recompute that is no mode: no launcher states it"
    assert all(
        (s.tp, s.data_parallel, stage_mode(s.recompute, s.recompute_ops))
        == (first.tp, first.data_parallel, mode)
        for s in plan.stages
    )
    n = model.layers + 2  # embedding, decoder layers, output (step.blocks.model_blocks)
    layers = [b - a - (a == 0) - (b == n) for a, b in (s.blocks for s in plan.stages)]
    fields = dict(
        gpus=plan.gpus,
        tp=first.tp,
        dp=first.data_parallel,
        pp=plan.pp,
        micro_batch=plan.global_batch // (first.data_parallel * plan.n_microbatches),
        global_batch=plan.global_batch,
        seq_length=plan.seq_length,
        dtype=plan.dtype,
        attention=plan.attention,
        **mode_plan_fields(mode),
        zero=plan.zero,
        # a searched plan leaves it to its pools where it is their default (search.staged.hetero._plan_from)
        overlap_dp_grad_reduce=settled_stage_plan(plan, cluster).overlap_dp_grad_reduce,
        overlap_param_gather=plan.overlap_param_gather,
        overlap_tp_comm=plan.overlap_tp_comm and first.tp > 1,
        sequence_parallel=plan.sequence_parallel and first.tp > 1,
        schedule=plan.schedule,
        **runtime_fields_of(plan),
    )
    default = PlanSpec(**fields)
    if [g.layers for g in default.split(model.layers) for _ in range(int(g.count))] == layers:
        return default
    return PlanSpec(**fields, stage_layers=layers)


def assert_launched(plan: StagePlanSpec, model: ModelSpec, framework: str, cluster) -> None:
    """Every exporter of the framework's launcher writes the plan (ExportRefused otherwise), its
    run-wide values settled on ``cluster`` (the priced cluster of the search)."""
    uniform = as_uniform_plan(plan, model, cluster)
    for target in launch.targets(framework):
        export_plan(target, uniform, model)


def write_inputs(tmp_path) -> tuple[str, str]:
    model = tmp_path / "model.yaml"
    model.write_text(yaml.safe_dump(MODEL))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(MIXED))
    return str(model), str(cluster)


def test_search_takes_the_framework(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    model, cluster = write_inputs(tmp_path)
    argv = ["search", "-m", model, "--cluster", cluster, "--global-batch", "16"]
    argv += ["--seq-length", "512", "--dtype", "fp16", "--top", "1", "--time-budget", "2", "--json"]
    code, out, err = run(capsys, *argv, "--framework", "megatron-deepspeed")
    assert code == 0, err
    found = json.loads(out)["plans"]
    code, plain, err = run(capsys, *argv)
    assert code == 0, err
    assert found and found[0]["step_time_s"] != json.loads(plain)["plans"][0]["step_time_s"]
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(found[0]["plan"]))
    argv = ["estimate", "-m", model, "--plan", str(path), "--cluster", cluster]
    code, out, err = run(capsys, *argv, "--framework", "megatron-deepspeed", "--json")
    assert code in (0, 1), err
    assert json.loads(out)["step_time_s"] == pytest.approx(found[0]["step_time_s"], rel=REL)


def test_search_under_a_launcher_returns_plans_it_exports(capsys, tmp_path, monkeypatch):
    """torchtitan runs FSDP2 (ZeRO 2/3) with sequence parallelism at tp > 1, one tp and recompute on
    every stage: the per-stage search's plans were ZeRO 0 (and per-stage tp) before it read the launcher."""
    monkeypatch.setenv("COLUMNS", "200")
    model, _ = write_inputs(tmp_path)
    argv = ["search", "-m", model, "--system", "dgx-a100-80gb", "--gpus", "8", "--non-uniform"]
    argv += ["--global-batch", "16", "--seq-length", "512", "--top", "3", "--time-budget", "2"]
    code, out, err = run(capsys, *argv, "--json", "--framework", "torchtitan")
    assert code == 0, err
    found = json.loads(out)["plans"]
    assert found
    spec = ModelSpec(name="tiny", **MODEL)
    priced, _ = profile_fields(
        load_framework("torchtitan"), uniform_cluster(load_system("dgx-a100-80gb"), 8)
    )
    for row in found:
        assert_launched(stage_plan_from_dict(row["plan"]), spec, "torchtitan", priced)


def test_search_refuses_a_setting_the_launcher_cannot_state(capsys):
    argv = [
        "search",
        "-m",
        "gpt3-125m",
        "--system",
        "dgx-a100-80gb",
        "--gpus",
        "8",
        "--non-uniform",
    ]
    code, _, err = run(
        capsys, *argv, "--global-batch", "8", "--dtype", "fp16", "--framework", "torchtitan"
    )
    assert code == 2 and "dtype" in err and "torchtitan" in err and "Traceback" not in err


def test_search_refuses_an_unknown_framework(capsys):
    argv = ["search", "-m", "gpt3-125m", "--system", "dgx-a100-80gb", "--gpus", "8"]
    code, _, err = run(capsys, *argv, "--non-uniform", "--global-batch", "8", "--framework", "nope")
    assert code == 2 and "--framework" in err and "Traceback" not in err


def draw_problem(rng: random.Random):
    """A small problem: a 2-6 layer decoder on 8 GPUs of one system or the mixed V100/T4 cluster (fp16:
    not the launchers'), a profile other than the default, a global batch of 8-32; the AMP-style or the
    Aceso-style search."""
    layers = rng.choice((2, 4, 6))
    model = ModelSpec(name=f"tiny{layers}", **(MODEL | {"layers": layers}))
    framework = rng.choice(FRAMEWORKS)
    if rng.random() < 0.3 and framework not in LAUNCHED:
        cluster = cluster_from_dict(MIXED)
    else:
        cluster = uniform_cluster(load_system(rng.choice(("dgx-a100-80gb", "dgx-h100-80gb"))), 8)
    return model, cluster, framework, rng.choice((8, 16, 32)), rng.random() < 0.5


def test_every_searched_plan_checks_re_estimates_and_launches_under_the_framework():
    rng = random.Random(31)
    checked = launched = 0
    for _ in range(12):
        model, cluster, framework, batch, non_uniform = draw_problem(rng)
        priced, fields = profile_fields(load_framework(framework), cluster)
        if (
            cluster.name == "mixed"
        ):  # V100 and T4: fp16, unfused attention (specs.rules_precision.accelerator_rules)
            fields |= {"attention": "unfused"}
        dtype = "fp16" if cluster.name == "mixed" else "bf16"
        problem = HeteroProblem(model, priced, batch, 512, dtype, **fields)
        search = search_non_uniform if non_uniform and cluster.is_uniform else search_cluster
        result = search(problem, top_k=3, time_budget_s=1.0)
        for c in result.plans:
            check_stage_plan(c.plan, model, priced)
            assert re_estimate(model, cluster, framework, c.plan) == pytest.approx(
                c.step_time_s, rel=REL
            ), (framework, c.label)
            checked += 1
            if framework in LAUNCHED:
                assert_launched(c.plan, model, framework, priced)
                launched += 1
    assert checked >= 12 and launched >= 6


def test_a_launcher_refuses_what_its_exporter_cannot_state():
    """The problem-wide rules of search.launch.problem_violations refuse, by name, before any search."""
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    priced, fields = profile_fields(load_framework("deepspeed"), cluster)
    with pytest.raises(InputError, match="recompute"):
        HeteroProblem(
            ModelSpec(name="t", **MODEL), priced, 8, 512, recompute=("selective",), **fields
        )


def test_deepspeed_plans_keep_the_one_split_its_exporter_writes():
    """DeepSpeed's config states partition "uniform" only (search.launch.fixed_split): the split solver
    takes that split's ranges alone, and every plan exports."""
    model = ModelSpec(name="tiny6", **(MODEL | {"layers": 6}))
    priced, fields = profile_fields(
        load_framework("deepspeed"), uniform_cluster(load_system("dgx-a100-80gb"), 8)
    )
    problem = HeteroProblem(model, priced, 16, 512, pps=(4,), **fields)
    result = search_cluster(problem, top_k=3, time_budget_s=2.0)
    assert result.plans
    for c in result.plans:
        layers = [b - a - (a == 0) - (b == 8) for a, b in (s.blocks for s in c.plan.stages)]
        assert tuple(layers) == launch.fixed_split("deepspeed", 6, 4) == (1, 2, 2, 1)
        assert_launched(c.plan, model, "deepspeed", priced)


def test_nemo_plans_run_tp_overlap_with_sequence_parallelism():
    """NeMo's profile overlaps TP communication, which Megatron-LM runs with --sequence-parallel only
    (search.launch.tp_overlap_allowed): its per-stage plans state sequence parallelism (staged_fields)."""
    cluster = uniform_cluster(load_system("dgx-h100-80gb"), 8)
    priced, fields = profile_fields(load_framework("nemo-24.09"), cluster)
    assert fields["sequence_parallel"] and fields["overlap_tp_comm"]
    problem = HeteroProblem(ModelSpec(name="t", **MODEL), priced, 16, 512, tps=(2,), **fields)
    result = search_cluster(problem, top_k=2, time_budget_s=2.0)
    assert result.plans and all(c.plan.sequence_parallel for c in result.plans)
    for c in result.plans:
        assert_launched(c.plan, ModelSpec(name="t", **MODEL), "nemo-24.09", priced)


def test_a_launcher_runs_one_setting_on_every_stage():
    """search.launch.stage_plan_allowed: one tp, dp and recompute on every stage, no per-op recompute;
    without a launcher every candidate stands."""
    cluster = uniform_cluster(load_system("dgx-h100-80gb"), 8)
    priced, fields = profile_fields(load_framework("megatron-core"), cluster)
    problem = HeteroProblem(ModelSpec(name="t", **MODEL), priced, 16, 512, **fields)

    def settings(*stages):
        """One StageSetting per pipeline stage from its (tp, dp, recompute, recompute_ops)."""
        return [
            StageSetting((), ParallelDims(tp=tp, dp=dp, pp=len(stages)), 1, rc, ops, i, 4)
            for i, (tp, dp, rc, ops) in enumerate(stages)
        ]

    same = settings(*[(2, 2, "full", ())] * 2)
    assert launch.stage_plan_allowed("megatron-core", problem, same)
    for stages in (
        settings((2, 2, "full", ()), (1, 4, "full", ())),
        settings((2, 2, "full", ()), (2, 2, "none", ())),
        settings(*[(2, 2, "none", ("mlp",))] * 2),
    ):
        assert not launch.stage_plan_allowed("megatron-core", problem, stages)
        assert launch.stage_plan_allowed(None, problem, stages)


def test_the_python_api_searches_a_cluster_under_a_framework_as_the_command(capsys, tmp_path):
    """``api.search_cluster(..., framework=F)`` reads the profile as ``search --cluster --framework F``
    (search.staged.hetero.profile_fields): the same plans and step times; without F they differ."""
    from paraplan import api

    model, cluster = write_inputs(tmp_path)
    argv = [
        "search",
        "-m",
        model,
        "--cluster",
        cluster,
        "--global-batch",
        "16",
        "--seq-length",
        "512",
    ]
    argv += ["--dtype", "fp16", "--top", "2", "--json", "--framework", "megatron-deepspeed"]
    code, out, err = run(capsys, *argv, "--time-budget", "60")
    assert code == 0, err
    by_cli = json.loads(out)["plans"]
    options = dict(top=2, time_budget_s=60.0, seq_length=512, dtype="fp16", attention="unfused")
    by_api = api.search_cluster(MODEL, MIXED, 16, framework="megatron-deepspeed", **options)[
        "plans"
    ]
    assert [p["plan"] for p in by_api] == [p["plan"] for p in by_cli]
    for a, c in zip(by_api, by_cli, strict=True):
        assert a["step_time_s"] == pytest.approx(c["step_time_s"], rel=REL)
    plain = api.search_cluster(MODEL, MIXED, 16, **options)["plans"]
    assert plain[0]["step_time_s"] != pytest.approx(by_api[0]["step_time_s"], rel=1e-3)


@pytest.mark.parametrize("overlap, stated", [(None, None), (True, None), (False, False)])
def test_searched_plans_state_the_dp_overlap_only_off_its_default(overlap, stated):
    """A searched per-stage plan leaves overlap_dp_grad_reduce unset where the problem's equals the default
    its pools settle (true on A100s without DeepSpeed's fallback), so its file omits it, and states it where
    it differs (false); either way it re-estimates to the search's step (search.staged.hetero._plan_from)."""
    cluster = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    fields = {} if overlap is None else {"overlap_dp_grad_reduce": overlap}
    problem = HeteroProblem(ModelSpec(name="t", **MODEL), cluster, 16, 512, tps=(2,), **fields)
    result = search_cluster(problem, top_k=2, time_budget_s=2.0)
    assert result.plans
    for c in result.plans:
        assert c.plan.overlap_dp_grad_reduce is stated
        assert ("overlap_dp_grad_reduce" in stage_plan_to_dict(c.plan)) is (stated is not None)
        again = stage_plan_from_dict(stage_plan_to_dict(c.plan))
        assert settled_stage_plan(again, cluster).overlap_dp_grad_reduce is bool(
            overlap is not False
        )
        est = estimate_stage_plan(problem.model, cluster, again)
        assert est.step_time_s == pytest.approx(c.step_time_s, rel=1e-9), c.label
