"""Gradient accumulation has one rule (review of issue 31): the per-stage plans' DeepSpeed engine and the uniform
path's DeepSpeed profiles both price it by cost.runtimes.grad_accumulation_s, P·g / (B_HBM·η_HBM) per
micro-batch on the stage's parameters, with g from cost.runtimes.GRAD_ACCUMULATION_BYTES. It used to be priced
per block through cost.compute.memory_time_s on the per-stage path (eager factor, a kernel overhead per block)
and at the plain rate on the uniform one. The bytes are the stack's resolved at the plan's ZeRO stage
(step.constants.at_zero_stage, as on a uniform plan: megatron-deepspeed's BF16_Optimizer, 18 B at zero 0), or
those a training stack states (AMP's fp16 param.grad, 6 B on each micro-batch but a step's first:
step.engines.ENGINE_STACKS)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from paraplan.catalog import load_framework
from paraplan.catalog.clusters import cluster_from_dict
from paraplan.cost.frameworks import framework_cluster
from paraplan.cost.runtimes import accumulation_bytes_per_microbatch, grad_accumulation_s
from paraplan.specs.model import ModelSpec
from paraplan.specs.stage_plan import stage_plan_from_dict
from paraplan.step.engines import engine_rules_of
from paraplan.step.per_stage import (
    common_of,
    estimate_stage_plan,
    stage_arrays,
    stage_neighbours,
    stage_params,
    stage_settings,
)
from paraplan.step.layout import stage_at

SMALL = ModelSpec(layers=8, hidden=1024, heads=16, ffn_hidden=4096, vocab=32000, max_position=1024)
MIXED = cluster_from_dict(
    {
        "pools": [
            {"name": "v100", "system": "aws-p3.8xlarge", "nodes": 1},
            {"name": "t4", "system": "aws-g4dn.12xlarge", "nodes": 1},
        ]
    }
)
# bf16 needs bf16 tensor cores (specs.rules_precision.accelerator_rules): two pools of newer parts, the same names,
# running the megatron-deepspeed stack (its BF16_Optimizer at zero 0)
MIXED_BF16 = framework_cluster(
    load_framework("megatron-deepspeed"),
    cluster_from_dict(
        {
            "pools": [
                {"name": "v100", "system": "dgx-a100-40gb", "nodes": 1},
                {"name": "t4", "system": "dgx-h100-80gb", "nodes": 1},
            ]
        }
    ),
)


# (dtype, pass bytes g, bytes the step's first micro-batch saves s): AMP's FP16 optimizer leaves param.grad None
# after each step, so its first micro-batch adds nothing (s = g, step.engines.grads_none_after_step); the
# BF16_Optimizer adds into its fp32 buffer every micro-batch (s = 0). Per micro-batch: g − s/m, m = 4.
@pytest.mark.parametrize("dtype, g, s", [("fp16", 6.0, 6.0), ("bf16", 18.0, 0.0)])
def test_the_per_stage_engine_pays_the_one_rule(dtype, g, s):
    cluster = MIXED if dtype == "fp16" else MIXED_BF16
    plan = stage_plan_from_dict(
        {
            "global_batch": 16,
            "seq_length": 1024,
            "microbatches": 4,
            "dtype": dtype,
            "attention": "unfused" if dtype == "fp16" else "flash",
            "engine": "deepspeed",
            "zero": 0,
            **({"engine_stack": "amp2022"} if dtype == "fp16" else {}),
            "stages": [
                {"pool": "v100", "gpus": 4, "layers": 5, "tp": 2},
                {"pool": "t4", "gpus": 4, "layers": 3},
            ],
        }
    )
    rules = engine_rules_of("deepspeed", plan.engine_stack)
    with_acc = estimate_stage_plan(SMALL, cluster, plan)
    if dtype == "fp16":  # the stack's stated bytes, off
        without = estimate_stage_plan(
            SMALL, cluster, plan, replace(rules, grad_accumulation="fused")
        )
    else:  # the profile's, off
        off = framework_cluster(
            load_framework("megatron-deepspeed").model_copy(
                update={"zero0_bf16_optimizer": False, "grad_accumulation": "fused"}
            ),
            cluster_from_dict(
                {
                    "pools": [
                        {"name": "v100", "system": "dgx-a100-40gb", "nodes": 1},
                        {"name": "t4", "system": "dgx-h100-80gb", "nodes": 1},
                    ]
                }
            ),
        )
        without = estimate_stage_plan(SMALL, off, plan)
    common, settings = common_of(plan), stage_settings(plan, cluster)
    bounds = [(0, 6), (6, 10)]  # embedding + 5 layers | 3 layers + head
    for i, (a, b) in enumerate(bounds):
        st = settings[i]
        arr = stage_arrays(SMALL, cluster, common, st, *stage_neighbours(settings, i, 1))
        params = stage_params(stage_at(arr.blocks, i, a, b), "dense")
        acc = cluster.pool(st.slices[0][0]).system.accelerator
        rate = acc.hbm_bandwidth * acc.efficiency.hbm
        delta = with_acc.stage_work_s[i] - without.stage_work_s[i]
        per_microbatch = accumulation_bytes_per_microbatch(g, s, 4)
        assert per_microbatch == (4.5 if dtype == "fp16" else 18.0)
        assert delta == pytest.approx(grad_accumulation_s(params, per_microbatch, rate), rel=1e-9)
        assert delta > 0
