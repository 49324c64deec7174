"""The DeepSpeed engine's own rules and AMP's stack apart (step.engines.ENGINES / ENGINE_STACKS): a
per-stage plan under a DeepSpeed profile (an encoder-decoder's uniform plan, the per-stage searches)
runs the engine's rules and its profile's stack, and only a plan stating ``engine_stack: amp2022``
(AMP's trials) takes the constants calibrated on AMP's stack (host time per layer, activation memory
factor) and that stack's fp16 rules."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_system
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.plan import PlanSpec
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.specs.uniform_stages import uniform_stage_plan
from paraplan.step.engines import ENGINES, engine_rules_of, host_layer_times_s
from paraplan.step.per_stage import common_of, estimate_stage_plan
from paraplan.validate.hetero import load_hetero_cases

T5 = load_model("t5-3b")


def _t5_under(profile: str):
    """tp 2, pp 2, dp 2 on 8 A100s under ``profile``: the uniform plan's per-stage form (24 + 24
    layers)."""
    system = framework_system(load_framework(profile), load_system("dgx-a100-80gb"))
    cluster = uniform_cluster(system, 8)
    plan = PlanSpec(
        gpus=8, tp=2, pp=2, global_batch=64, micro_batch=4, seq_length=2048, dtype="bf16", zero=1
    )
    # the profile's overlap switch (off: the PipelineEngine refuses it with pp > 1, engine_dp_overlap_rule)
    plan = plan.model_copy(
        update={"overlap_dp_grad_reduce": load_framework(profile).overlap_dp_grad_reduce}
    )
    engine = system.accelerator.efficiency.runtime.pipeline_engine
    return cluster, uniform_stage_plan(plan, T5, cluster.pools[0].name, engine)


def test_a_deepspeed_profile_runs_the_engine_without_amps_constants():
    cluster, plan = _t5_under("megatron-deepspeed")
    assert (plan.engine, plan.engine_stack) == ("deepspeed", None)
    rules = common_of(plan).rules
    assert rules is ENGINES["deepspeed"]
    assert host_layer_times_s(rules) == (0.0, 0.0) and rules.activation_memory_factor == 1.0
    # had the plan taken AMP's constants, pricing it with them would cost nothing more: they add at
    # least h_f + 2·h_f = 3 ms of host time per layer and micro-batch (m = 8, 24 layers a stage)
    own = estimate_stage_plan(T5, cluster, plan).step_time_s
    amps = estimate_stage_plan(T5, cluster, plan, engine_rules_of("deepspeed", "amp2022"))
    assert amps.step_time_s - own >= plan.n_microbatches * plan.stages[0].layers * 3.0e-3


def test_amps_stack_adds_its_host_time_only_where_stated():
    """The same plan stating AMP's stack: each of the m = 8 micro-batches of the 24 layers of a
    stage pays at least h_f + 2·h_f = 3 ms of host time in the steady state (1F1B: m · the slowest
    stage's work)."""
    cluster, plan = _t5_under("megatron-deepspeed")
    plan = plan.model_copy(update={"dtype": "fp16"})  # AMP's stack trained in fp16 (STACK_FACTS)
    amp = plan.model_copy(update={"engine_stack": "amp2022"})
    m, layers, host_s = plan.n_microbatches, plan.stages[0].layers, 3.0e-3
    assert (m, layers) == (8, 24)
    slower = estimate_stage_plan(T5, cluster, amp).step_time_s
    assert slower - estimate_stage_plan(T5, cluster, plan).step_time_s >= m * layers * host_s


def test_a_stack_names_its_engine():
    data = {
        "global_batch": 8,
        "seq_length": 1024,
        "microbatches": 8,
        "engine_stack": "amp2022",
        "stages": [{"pool": "p", "gpus": 1, "layers": 24}],
    }
    with pytest.raises(ValueError, match="engine_stack=amp2022 ran on engine deepspeed"):
        stage_plan_from_dict(data)
    assert stage_plan_from_dict(data | {"engine": "deepspeed"}).engine_stack == "amp2022"


def test_amps_trials_state_their_stack():
    cases = load_hetero_cases()
    assert cases and all(c.plan.engine_stack == "amp2022" for c in cases)
