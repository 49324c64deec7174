"""specs.rules_stack: what a stack's runtime runs. DeepSpeed's PipelineEngine runs its TrainSchedule (1F1B, one
chunk per stage) only (engine_schedule_rule); a profile's ``parallelism`` names the model-parallel kinds its
training loop runs (stack_parallelism_rules); a uniform plan restated stage by stage takes the profile's engine
(specs.uniform_stages.stage_engine)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework
from paraplan.specs.parallel import ParallelDims
from paraplan.specs.rules_stack import (
    engine_schedule_rule,
    stack_gpus_rule,
    stack_parallelism_rules,
)
from paraplan.specs.runtime import PARALLELISMS
from paraplan.specs.uniform_stages import stage_engine


@pytest.mark.parametrize(
    "schedule, vpp", [("interleaved", 2), ("gpipe", 1), ("zb-h1", 1), ("dualpipe", 1)]
)
def test_deepspeed_engine_refuses_every_schedule_but_1f1b_with_pipeline_stages(schedule, vpp):
    rule = engine_schedule_rule("deepspeed", schedule, vpp, 2)
    assert rule and "TrainSchedule" in rule and f"schedule={schedule}" in rule
    assert "allowed: schedule 1f1b with vpp 1" in rule


def test_deepspeed_engine_takes_1f1b_and_any_schedule_without_a_pipeline():
    assert engine_schedule_rule("deepspeed", "1f1b", 1, 4) is None
    assert engine_schedule_rule(
        "deepspeed", "1f1b", 2, 4
    )  # a chunked 1F1B is the interleaved schedule
    assert (
        engine_schedule_rule("deepspeed", "gpipe", 1, 1) is None
    )  # pp = 1: no PipelineEngine schedule
    for engine in ("megatron", "torch", "none"):
        assert engine_schedule_rule(engine, "interleaved", 2, 4) is None
        assert engine_schedule_rule(engine, "gpipe", 1, 4) is None


def test_stack_parallelism_rules_name_each_kind_the_loop_does_not_run():
    dims = ParallelDims(tp=2, cp=2, dp=1, pp=2, ep=2)
    assert stack_parallelism_rules(PARALLELISMS, dims, True, True) == []
    fields = [f for f, _, _ in stack_parallelism_rules((), dims, True, True)]
    assert fields == [
        "plan.tp",
        "plan.sequence_parallel",
        "plan.overlap_tp_comm",
        "plan.pp",
        "plan.cp",
        "plan.ep",
    ]
    refused = stack_parallelism_rules(("tp", "sp", "cp", "ep"), dims, True, True)
    assert [(f, v) for f, v, _ in refused] == [("plan.overlap_tp_comm", True), ("plan.pp", 2)]
    assert "allowed: 1" in refused[1][2] and "pipeline parallelism" in refused[1][2]
    # a loop stating no kind runs one process on one device: dp > 1 refused, named with what is allowed
    assert stack_parallelism_rules((), ParallelDims(tp=1, dp=8)) == [
        (
            "plan.dp",
            8,
            "the stack's training loop runs no data parallelism (its framework profile's parallelism: none: "
            "one process on one device); allowed: 1",
        )
    ]
    assert stack_parallelism_rules(("dp",), ParallelDims(tp=1, dp=8)) == []
    assert stack_parallelism_rules((), ParallelDims()) == []  # one GPU


def test_a_one_device_loop_refuses_more_than_one_gpu():
    """stack_gpus_rule, the searches' check before they split the GPUs: a loop running none of dp, tp, pp, cp
    refuses gpus > 1; any one of them (or one GPU) passes."""
    assert "runs on one device" in stack_gpus_rule((), 8) and "allowed: 1" in stack_gpus_rule((), 8)
    assert stack_gpus_rule(("sp", "ep"), 2)  # carved out of the others: no GPUs of their own
    assert stack_gpus_rule((), 1) is None
    for kind in ("dp", "tp", "pp", "cp"):
        assert stack_gpus_rule((kind,), 8) is None


@pytest.mark.parametrize(
    "framework, runs",
    [
        ("hf-transformers", ("dp", "tp", "sp", "cp", "ep")),
        ("hf-transformers-fsdp", ("dp",)),
        ("hf-transformers-deepspeed", ("dp",)),
        ("pytorch-eager", ()),
        ("pytorch-eager-bf16", ()),
        ("pytorch-compile", ("dp",)),  # its speedrun cases: DDP over the compiled model
        ("llm-foundry", ("dp",)),  # Composer v0.17.2: DDP / FSDP only, no pipeline
        ("megatron-lm-2019", ("dp", "tp")),
        ("megatron-lm-v1.0", ("dp", "tp")),
        ("megatron-lm-2021", ("dp", "tp", "sp", "pp")),
        ("torchtitan", ("dp", "tp", "sp", "pp", "cp")),  # AsyncTP needs compile
        ("torchtitan-compiled", ("dp", "tp", "sp", "tp_overlap", "pp", "cp")),
        ("deepspeed-2021", ("dp", "tp", "pp", "ep")),
        ("megatron-core", PARALLELISMS),
        ("megatron-bridge-25.11", PARALLELISMS),
        ("megatron-deepspeed", ("dp", "tp", "sp", "pp", "cp", "ep")),
    ],
)
def test_profiles_state_the_parallelism_their_loops_run(framework, runs):
    assert load_framework(framework).parallelism == runs


def test_every_profile_states_its_parallelism_with_a_citation():
    """No profile leaves ``parallelism`` at the default: each states it, or takes it from its base profile,
    with its source (the field's value is a claim about the stack's code, read at the profile's version)."""
    from paraplan.catalog import framework_names

    for name in framework_names():
        profile = load_framework(name)
        assert "parallelism" in profile.sources, name


def test_a_uniform_plan_restated_stage_by_stage_keeps_the_profiles_engine():
    assert stage_engine("deepspeed") == "deepspeed"
    assert stage_engine("megatron") == "megatron"
    assert stage_engine("torch") == stage_engine("none") == "megatron"


def _t5_plan(**fields):
    from paraplan.specs.plan import PlanSpec

    base = {"gpus": 8, "tp": 1, "pp": 2, "dp": 4, "micro_batch": 1, "global_batch": 64}
    return PlanSpec(**base, seq_length=512, **fields)


def test_uniform_stage_plan_takes_the_engine_and_keeps_its_rules():
    from paraplan.catalog import load_model
    from paraplan.specs.errors import InputError
    from paraplan.specs.uniform_stages import uniform_stage_plan

    model = load_model("t5-3b")
    assert uniform_stage_plan(_t5_plan(), model, "p").engine == "megatron"
    off = {"overlap_dp_grad_reduce": False}  # the PipelineEngine's (engine_dp_overlap_rule)
    assert uniform_stage_plan(_t5_plan(**off), model, "p", "deepspeed").engine == "deepspeed"
    assert uniform_stage_plan(_t5_plan(), model, "p", "torch").engine == "megatron"
    assert uniform_stage_plan(_t5_plan(schedule="gpipe"), model, "p").schedule == "gpipe"
    with pytest.raises(InputError, match="TrainSchedule"):
        uniform_stage_plan(_t5_plan(schedule="gpipe", **off), model, "p", "deepspeed")
    with pytest.raises(InputError, match="ZeRO-2"):
        uniform_stage_plan(_t5_plan(zero=2, **off), model, "p", "deepspeed")
    with pytest.raises(InputError, match="overlap_dp_grad_reduce=True.*allowed: false"):
        uniform_stage_plan(_t5_plan(), model, "p", "deepspeed")


def test_per_stage_check_refuses_parallelism_a_pools_stack_does_not_run():
    from paraplan.catalog import load_model, load_system
    from paraplan.cost.frameworks import framework_cluster
    from paraplan.specs.cluster import uniform_cluster
    from paraplan.specs.stage_plan import stage_plan_from_dict, stage_plan_violations

    model = load_model("gpt3-1.3b")
    plain = uniform_cluster(load_system("dgx-a100-80gb"), 8)
    fsdp = framework_cluster(load_framework("hf-transformers-fsdp"), plain)

    def plan(tp: int, pp: int):
        stage = {"pool": plain.pools[0].name, "gpus": 8 // pp, "tp": tp, "layers": 24 // pp}
        data = {"global_batch": 64, "seq_length": 2048, "microbatches": 8}
        return stage_plan_from_dict(data | {"stages": [stage] * pp})

    def fields(cluster, p):
        return [v.field for v in stage_plan_violations(p, model, cluster)]

    assert fields(plain, plan(2, 2)) == [] and fields(fsdp, plan(1, 1)) == []
    assert fields(fsdp, plan(2, 2)) == [
        "plan.tp",
        "plan.pp",
    ]  # named once, though two stages use them
    # a one-device loop: the plan's 8 GPUs are refused first, as the uniform estimate names them
    eager = framework_cluster(load_framework("pytorch-eager"), plain)
    assert fields(eager, plan(1, 1)) == ["gpus"]


def test_a_parallelism_list_names_each_kind_once():
    """A kind stated twice is refused (the rule reads the list as a set: a repeated kind once let a list of
    the right length but without tp_overlap skip every check, review of session 20)."""
    from pydantic import ValidationError

    from paraplan.specs.runtime import StackRuntimeFields

    with pytest.raises(ValidationError, match="tp stated more than once"):
        StackRuntimeFields(parallelism=["tp", "tp", "sp", "pp", "cp", "ep"])
    dims = ParallelDims(tp=2, pp=1, dp=4, cp=1, ep=1, etp=1)
    rules = stack_parallelism_rules(
        ("dp", "tp", "sp", "pp", "cp", "ep"), dims, overlap_tp_comm=True
    )
    assert [field for field, *_ in rules] == ["plan.overlap_tp_comm"]


def test_per_stage_searches_refuse_a_one_device_loop_over_more_than_one_gpu():
    """The per-stage searches' problem (search.staged.problem.HeteroProblem) refuses a cluster of 8 GPUs under
    pytorch-eager (parallelism []: one process on one device) before it splits it (stack_gpus_rule); the same
    cluster under hf-transformers-fsdp (dp) passes."""
    from paraplan.catalog import load_model, load_system
    from paraplan.cost.frameworks import framework_cluster
    from paraplan.search.staged.problem import HeteroProblem
    from paraplan.specs.cluster import uniform_cluster
    from paraplan.specs.errors import InputError

    model, plain = load_model("gpt3-1.3b"), uniform_cluster(load_system("dgx-a100-80gb"), 8)
    eager = framework_cluster(load_framework("pytorch-eager"), plain)
    with pytest.raises(InputError, match="cluster: 8 GPUs is not allowed; .*runs on one device"):
        HeteroProblem(model, eager, global_batch=64, seq_length=2048)
    fsdp = framework_cluster(load_framework("hf-transformers-fsdp"), plain)
    assert HeteroProblem(model, fsdp, global_batch=64, seq_length=2048).cluster.gpus == 8
