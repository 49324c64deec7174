"""When gradients exist (cost.memory.peak_residents, FrameworkSpec.gradient_allocation): a stack that
allocates them during backward (eager PyTorch, zero_grad(set_to_none=True)) peaks at W + O + B + max(A, G)
with one micro-batch and no DDP buckets, a stack with a gradient buffer (Megatron-Core) at W + O + B + G + A;
the search's vectorised memory (search.grid_index → step.stage_memory.stage_peaks) and the estimate give the
same peak, and so does the per-stage path."""

from __future__ import annotations

import numpy as np
import pytest

from paraplan import api
from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost.frameworks import framework_system
from paraplan.cost.memory import peak_residents
from paraplan.specs.cluster import uniform_cluster
from paraplan.specs.plan import PlanSpec
from paraplan.specs.uniform_stages import uniform_stage_plan
from paraplan.step.estimate import estimate
from paraplan.step.per_stage import estimate_stage_plan
from paraplan.units import GiB

G, A = 3.0e9, 5.0e9


@pytest.mark.parametrize(
    "lazy, m, buckets, expected",
    [
        (0.0, 1, 0.0, (G, A)),  # a buffer: both
        (1.0, 1, 0.0, (0.0, A)),  # forward's end: no gradient yet
        (1.0, 2, 0.0, (G, A)),  # the second micro-batch's forward holds the first's gradients
        (1.0, 1, 1.0, (G, A)),  # DDP's buckets hold a gradient-sized copy from the start
    ],
)
def test_peak_residents_by_case(lazy, m, buckets, expected):
    assert peak_residents(G, A, lazy, m, buckets) == expected


def test_peak_residents_takes_the_larger_phase_and_broadcasts():
    assert peak_residents(A, G, 1.0, 1, 0.0) == (
        A,
        0.0,
    )  # optimizer step: gradients, no activations
    grads, acts = peak_residents(
        np.array([G, A, G]), np.array([A, G, A]), 1.0, np.array([1, 1, 4]), 0.0
    )
    assert grads.tolist() == [0.0, A, G] and acts.tolist() == [A, 0.0, A]
    for i in range(3):  # arrays and scalars, one formula
        g, a = peak_residents([G, A, G][i], [A, G, A][i], 1.0, [1, 1, 4][i], 0.0)
        assert (g, a) == (grads[i], acts[i])


def h100(framework: str = "megatron-core", allocation: str | None = None):
    """DGX H100 under a catalog profile, its gradient allocation replaced where given."""
    profile = load_framework(framework)
    if allocation is not None:
        profile = profile.model_copy(update={"gradient_allocation": allocation})
    return framework_system(profile, load_system("dgx-h100-80gb"))


def test_gradients_allocated_in_backward_leave_the_activation_peak():
    model = load_model("gpt3-1.3b")
    plan = PlanSpec(gpus=1, global_batch=4, micro_batch=4, seq_length=2048)
    buffered = estimate(model, h100(), plan).first_stage
    lazy = estimate(model, h100(allocation="backward"), plan).first_stage
    assert lazy.gradients_bytes == 0.0 and lazy.activations_bytes == buffered.activations_bytes
    assert buffered.gradients_bytes > 0.0
    # the peak falls by the smaller of the two, the gradients here
    drop = min(buffered.gradients_bytes, buffered.activations_bytes)
    assert lazy.peak_bytes == pytest.approx(buffered.peak_bytes - drop, rel=1e-12)
    accumulated = PlanSpec(gpus=1, global_batch=16, micro_batch=4, seq_length=2048)
    held = estimate(model, h100(allocation="backward"), accumulated).first_stage
    assert held.peak_bytes == estimate(model, h100(), accumulated).first_stage.peak_bytes
    # the eager profiles state it
    assert estimate(model, h100("pytorch-eager"), plan).first_stage.gradients_bytes == 0.0
    # pytorch-compile's DDP loop (its speedrun cases): DDP's buckets hold the gradients at the peak
    ddp = PlanSpec(gpus=8, global_batch=32, micro_batch=4, seq_length=2048)
    assert estimate(model, h100("pytorch-compile"), ddp).first_stage.gradients_bytes > 0.0


@pytest.mark.parametrize("framework", ["pytorch-eager", "hf-transformers"])
def test_search_and_estimate_give_one_peak(framework):
    rows: list[dict] = []
    found = api.search(
        "gpt3-350m",
        "dgx-h100-80gb",
        gpus=1,
        seq_length=2048,
        max_global_batch=32,
        framework=framework,
        top=3,
        workers=1,
        feasible_sink=rows.append,
    )
    problem = found.problem
    columns = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
    metrics = {"step_time_s", "tokens_per_s", "objective", "peak_memory_gib"}
    fields = [k for k in columns if k not in metrics]
    n = len(columns["peak_memory_gib"])
    assert n > 4
    lazy_peaks = 0
    for i in range(n):
        plan = PlanSpec(
            gpus=1,
            seq_length=2048,
            **{
                k: columns[k][i].item() if hasattr(columns[k][i], "item") else columns[k][i]
                for k in fields
            },
        )
        est = estimate(problem.model, problem.system, plan)
        assert columns["peak_memory_gib"][i] == pytest.approx(
            est.peak_stage.peak_bytes / GiB, rel=1e-9
        ), plan
        lazy_peaks += est.first_stage.gradients_bytes == 0.0
    assert lazy_peaks > 0  # the rule applies to some of the candidates


def test_the_per_stage_path_gives_the_same_memory():
    # Megatron-Core's profile with gradients allocated during backward: the two paths' activations agree
    # there (pytorch-eager's fp32 logits and module composites reach only the uniform path's activations)
    model, system = load_model("gpt3-350m"), h100(allocation="backward")
    plan = PlanSpec(gpus=1, global_batch=8, micro_batch=8, seq_length=2048)
    cluster = uniform_cluster(system, plan.gpus)
    per_stage = estimate_stage_plan(
        model, cluster, uniform_stage_plan(plan, model, cluster.pools[0].name)
    )
    uniform = estimate(model, system, plan)
    assert uniform.first_stage.gradients_bytes == 0.0
    assert per_stage.stages[0].peak_bytes == pytest.approx(uniform.first_stage.peak_bytes, rel=1e-9)
    assert per_stage.stages[0].gradients_bytes == uniform.first_stage.gradients_bytes


def test_pure_bf16_adamw_keeps_its_moments_in_bf16_without_a_master():
    from paraplan.cost.memory import StateBytes, state_bytes_per_param

    assert state_bytes_per_param("bf16", "bf16", "param_dtype") == StateBytes(2.0, 2.0, 4.0)
    assert state_bytes_per_param("bf16", "bf16") == StateBytes(2.0, 2.0, 12.0)
    assert state_bytes_per_param("fp32", "fp32", "param_dtype") == StateBytes(4.0, 4.0, 8.0)
    model = load_model("gpt3-350m")
    plan = PlanSpec(gpus=1, global_batch=8, micro_batch=8, seq_length=2048, grad_dtype="bf16")
    pure = estimate(model, h100("pytorch-eager-bf16"), plan).first_stage
    master = estimate(model, h100("pytorch-eager"), plan).first_stage
    assert pure.optimizer_bytes == pytest.approx(master.optimizer_bytes / 3, rel=1e-12)
