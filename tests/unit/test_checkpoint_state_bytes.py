"""Checkpoint size by the memory model's optimizer-state rule (step.constants.state_bytes): a pure-bf16 run
(no fp32 master copy: the pytorch-eager-bf16 profile, efficiency.runtime.optimizer_state param_dtype)
checkpoints 2 + 4 B per parameter, a mixed-precision run with fp32 master weights 2 + 12 B, fp32 training
4 + 8 B, a bf16 run whose fp32 parameters are their own master (maxtext, optimizer_state fp32_params) 4 + 8 B.

Hand count, GPT-3 125M (V = 51,200 padded vocabulary, h = 768, L = 12, 2,048 learned positions, tied
embeddings, biases): P = V·h + 2048·h + L·(12h² + 13h) + 2h = 39,321,600 + 1,572,864 + 85,054,464 + 1,536
= 125,950,464 parameters.
"""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import apply_framework
from paraplan.goodput.checkpoint import checkpoint_cost
from paraplan.goodput.inputs import default_inputs
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate

P = 125_950_464


@pytest.mark.parametrize(
    "framework, dtype, bytes_per_param",
    [
        ("pytorch-eager-bf16", "bf16", 2 + 4),  # bf16 weights, Adam m and v in bf16, no master copy
        ("pytorch-eager", "bf16", 2 + 12),  # bf16 weights, fp32 master + m + v
        ("megatron-core", "bf16", 2 + 12),
        ("pytorch-eager", "fp32", 4 + 8),  # fp32 weights, m + v
        ("maxtext", "bf16", 4 + 8),  # fp32 parameters (the master), fp32 m + v
    ],
)
def test_checkpoint_bytes_follow_the_optimizer_state(framework, dtype, bytes_per_param):
    model = load_model("gpt3-125m")
    system, fields = apply_framework(
        load_framework(framework),
        load_system("dgx-h100-80gb"),
        {"gpus": 1, "global_batch": 8, "seq_length": 2048, "dtype": dtype},
    )
    plan = PlanSpec(**fields)
    est = estimate(model, system, plan)
    cost = checkpoint_cost(est, model, system, plan, default_inputs().checkpoint)
    assert cost.total_bytes == P * bytes_per_param
    # one GPU, no sharding: the rank holds the whole state, as the memory model counts it
    assert cost.rank_bytes == pytest.approx(P * bytes_per_param, rel=1e-12)
    stage = est.stages[0]
    assert cost.rank_bytes == stage.weights_bytes + stage.optimizer_bytes
