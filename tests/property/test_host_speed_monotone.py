"""A faster host never makes a step slower (issues 32/33): the host time of six stacks (eager PyTorch, HF
Transformers, Megatron-LM 2019 on the DGX-2H, Megatron-Core, compiled PyTorch on an RTX box, Megatron-Bridge MoE
on GB200) scaled by ``efficiency.host_speed`` from 0.25 to 4, and the step time responds to it."""

from __future__ import annotations

from itertools import pairwise

import pytest

from paraplan import api
from paraplan.catalog import load_system

PROPERTY_CASES = [
    ("gpt3-125m", "dgx-h100-80gb", "pytorch-eager", {"micro_batch": 1, "seq_length": 128}),
    ("gpt3-125m", "dgx-h100-80gb", "hf-transformers", {"micro_batch": 2, "seq_length": 512}),
    ("gpt3-1.3b", "dgx-2h", "megatron-lm-2019", {"micro_batch": 4, "dtype": "fp16"}),
    ("gpt3-1.3b", "dgx-a100-80gb", "megatron-core", {"micro_batch": 1, "seq_length": 2048}),
    ("gpt3-125m", "rtx-4090-8", "pytorch-compile", {"micro_batch": 4, "seq_length": 256}),
    (
        "mixtral-8x7b",
        "gb200-nvl72",
        "megatron-bridge-25.11",
        {"tp": 2, "ep": 4, "sequence_parallel": True},
    ),
]


@pytest.mark.parametrize("model, system, framework, plan", PROPERTY_CASES)
def test_a_faster_host_never_makes_a_step_slower(model, system, framework, plan):
    data = load_system(system).model_dump()
    gpus = plan.get("tp", 1) * plan.get("ep", 1)
    steps = []
    for speed in (0.25, 0.5, 1.0, 2.0, 4.0):
        data["accelerator"]["efficiency"]["host_speed"] = speed
        steps.append(api.estimate(model, data, framework=framework, gpus=gpus, **plan).step_time_s)
    assert all(b <= a * (1 + 1e-12) for a, b in pairwise(steps)), steps
    assert steps[-1] < steps[0], steps  # the host time is priced: a 16x faster host is faster
