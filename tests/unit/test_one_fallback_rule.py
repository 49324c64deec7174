"""One DeepSpeed fallback rule (issue 31): specs.rules_stack.dp_reduce_fallback, asked with the same facts
by the uniform estimate and search (the system's stack) and by the per-stage plan and searches (each pool's
stack with the plan's engine), the per-stage default of overlap_dp_grad_reduce decided with the pools
(specs.stage_plan.settled_stage_plan). The defects, GPT-3 1.3B on 16 A100s, mb 4, gb 64, bf16, pp 1, the
overlap left unset on the per-stage plan: under hf-transformers-deepspeed (zero 0, Megatron's engine over a
pool that runs DeepSpeed's optimizers) 0.44238 s per stage against 0.47425 s uniform (the per-stage plan
overlapped the reduction DeepSpeedEngine runs after the backward); under deepspeed-2021 (zero 1, grad_dtype
fp32, DeepSpeed's engine over a pool whose stack runs no BF16_Optimizer) 0.42084 s per stage against
0.38923 s uniform (the per-stage plan assumed the BF16_Optimizer)."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.cost.frameworks import apply_framework, framework_cluster
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.specs.rules_stack import dp_reduce_fallback
from paraplan.specs.runtime import RuntimeCosts
from paraplan.specs.stage_plan import settled_stage_plan, stage_plan_from_dict
from paraplan.specs.uniform_stages import stage_engine, uniform_stage_plan
from paraplan.step.estimate import estimate
from paraplan.step.per_stage import estimate_stage_plan

PLAN = {"gpus": 16, "tp": 1, "micro_batch": 4, "global_batch": 64, "seq_length": 2048}
DS_OPTIMIZERS = RuntimeCosts(pipeline_engine="none", zero0_bf16_optimizer=True)
DS_ENGINE = RuntimeCosts(pipeline_engine="deepspeed")
PLAIN = RuntimeCosts(pipeline_engine="megatron")


@pytest.mark.parametrize(
    ("stack", "engine", "zero", "dtype", "grad_dtype", "offload", "expected"),
    [
        (PLAIN, "megatron", 0, "bf16", "fp32", False, False),  # no DeepSpeed at all
        (PLAIN, "deepspeed", 0, "bf16", "fp32", False, True),  # the plan's engine: zero 0
        (PLAIN, "deepspeed", 1, "bf16", "fp32", False, False),  # no BF16_Optimizer in the stack
        (DS_ENGINE, "megatron", 0, "fp16", "fp32", False, True),  # the stack's engine: zero 0
        (DS_OPTIMIZERS, "megatron", 0, "bf16", "bf16", False, True),  # DeepSpeed's optimizers
        (DS_OPTIMIZERS, "megatron", 1, "bf16", "fp32", False, True),  # the BF16_Optimizer at 1
        (DS_OPTIMIZERS, "megatron", 1, "bf16", "fp32", True, False),  # offloaded: ZeRO-1's
        (DS_OPTIMIZERS, "megatron", 1, "bf16", "bf16", False, False),  # bf16 grads: ZeRO-1's
        (DS_OPTIMIZERS, "megatron", 1, "fp16", "fp32", False, False),  # fp16: FP16 optimizers
        (DS_OPTIMIZERS, "deepspeed", 2, "bf16", "fp32", False, False),  # ZeRO 2 hooks
    ],
)
def test_the_rule_by_hand(stack, engine, zero, dtype, grad_dtype, offload, expected):
    """engine.py allreduce_gradients at 0050fdad: DeepSpeedEngine (the plan's or the stack's engine
    deepspeed, or DeepSpeed's optimizers) falls back at zero 0, and at zero 1 where the BF16_Optimizer
    runs (_do_optimizer_sanity_check: bf16, fp32 grad_accum_dtype, no CPU offload)."""
    assert bool(dp_reduce_fallback(stack, engine, zero, dtype, grad_dtype, offload)) is expected


def _paths(framework: str, zero: int, overlap: bool):
    """(uniform step, per-stage step with the overlap left unset, the per-stage plan settled) of one plan
    on 16 A100s under ``framework``, the uniform plan stating ``overlap``."""
    fields = PLAN | {"zero": zero, "grad_dtype": "fp32", "overlap_dp_grad_reduce": overlap}
    system, fields = apply_framework(
        load_framework(framework), load_system("dgx-a100-80gb"), fields
    )
    fields["grad_dtype"] = (
        "fp32"  # data_types.grad_accum_dtype fp32 stated (the profile may say bf16)
    )
    model, plan = load_model("gpt3-1.3b"), PlanSpec(**fields)
    cluster = uniform_cluster(system, plan.gpus)
    engine = stage_engine(system.accelerator.efficiency.runtime.pipeline_engine)
    stated = uniform_stage_plan(plan, model, cluster.pools[0].name, engine)
    unset = stated.model_copy(update={"overlap_dp_grad_reduce": None})
    per_stage = estimate_stage_plan(model, cluster, unset)
    uniform = estimate(model, system, plan)
    return uniform.step_time_s, per_stage.step_time_s, settled_stage_plan(unset, cluster)


@pytest.mark.parametrize(
    ("framework", "zero", "overlap", "engine"),
    [
        ("hf-transformers-deepspeed", 0, False, "megatron"),  # DeepSpeed's optimizers: falls back
        ("deepspeed-2021", 1, True, "deepspeed"),  # no BF16_Optimizer: ZeRO-1's hooks overlap
    ],
)
def test_the_per_stage_default_prices_as_the_uniform_plan(framework, zero, overlap, engine):
    uniform, per_stage, settled = _paths(framework, zero, overlap)
    assert settled.engine == engine
    assert settled.overlap_dp_grad_reduce is overlap
    assert per_stage == pytest.approx(uniform, rel=1e-9)


def _two_stacks():
    """Two 8-GPU A100 pools: ``ds`` under the deepspeed profile (DeepSpeed's optimizers), ``plain`` as
    the catalog states it."""
    pools = [{"name": n, "system": "dgx-a100-80gb", "nodes": 1} for n in ("ds", "plain")]
    plain = cluster_from_dict({"pools": pools})
    ds = framework_cluster(load_framework("deepspeed"), plain)
    return plain.model_copy(update={"pools": (ds.pools[0], plain.pools[1])})


def test_pools_of_different_stacks_take_the_one_value_both_run():
    """One switch for the plan: over a pool that falls back (zero 0 under DeepSpeed's optimizers) and
    one that does not, the default is false and a stated true is refused, naming the pool."""
    cluster, model = _two_stacks(), load_model("gpt3-1.3b")
    stages = [{"pool": "ds", "gpus": 8, "layers": 12}, {"pool": "plain", "gpus": 8, "layers": 12}]
    data = {"global_batch": 64, "seq_length": 2048, "microbatches": 8, "stages": stages}
    assert settled_stage_plan(stage_plan_from_dict(data), cluster).overlap_dp_grad_reduce is False
    plain_only = data | {"stages": [stages[1] | {"layers": 24}]}
    assert settled_stage_plan(stage_plan_from_dict(plain_only), cluster).overlap_dp_grad_reduce
    with pytest.raises(InputError) as refused:
        estimate_stage_plan(
            model, cluster, stage_plan_from_dict(data | {"overlap_dp_grad_reduce": True})
        )
    assert str(refused.value) == (
        "plan.overlap_dp_grad_reduce: True is not allowed; pool ds: DeepSpeedEngine reduces the "
        "data-parallel gradients after the backward (buffered_allreduce_fallback) at ZeRO 0 and under "
        "the BF16_Optimizer at ZeRO 1; allowed: false"
    )
