"""Plan-dependent checkpoint terms: bytes per rank and in all, save stall, persist and reload times.

A checkpoint holds the weights and the optimizer state (fp32 master weights, where the stack keeps them, and
Adam's two moments: ``step.constants.state_bytes``, the memory model's rule), not the gradients. Each rank saves what it holds as the plan
shards it (ZeRO / FSDP over data parallelism, TP, PP, EP: the estimate's per-stage memory); the state
written in all is the model's, once (replicas write disjoint parts: Megatron-LM's fully parallel save,
PyTorch Distributed Checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.goodput.inputs import CheckpointInputs
from paraplan.graph.params import parameter_counts
from paraplan.step.constants import state_bytes


@dataclass(frozen=True)
class CheckpointCost:
    """One checkpoint of one plan."""

    rank_bytes: float  # the most any rank holds of the training state
    total_bytes: float  # the model's training state, once
    stall_s: float  # training waits this long per save
    persist_s: float  # from the save's start until it is on storage
    load_s: float  # reload on restart
    mode: str = (
        "sync"  # as saved: an asynchronous save that host memory cannot hold falls back to sync
    )
    fallback: str | None = None  # why the asked-for asynchronous save became synchronous
    host_bytes: float = 0.0  # host memory per GPU an asynchronous save needs beside the offload


def rank_state_bytes(est, model_spec, system_spec, plan) -> float:
    """Checkpointed bytes of the busiest rank: max over pipeline stages of weights + optimizer state
    (as ZeRO shards them, step.compose.stage_memory_terms). A plan that offloads weights or optimizer
    state (ZeRO-Offload) keeps them in host memory beside offloaded activations, so its state is read
    from the estimate of the same plan without offload (same sharding, state on the GPU)."""
    if plan.offload_optimizer or plan.offload_weights:
        from paraplan.step.estimate import estimate

        resident = plan.model_copy(update={"offload_optimizer": False, "offload_weights": False})
        est = estimate(model_spec, system_spec, resident)
    return max(s.weights_bytes + s.optimizer_bytes for s in est.stages)


def total_state_bytes(model_spec, system_spec, dtype: str, runtime) -> float:
    """P * (b_weights + b_optimizer): every parameter's weight and optimizer state once, by the rule the
    memory model sizes them with (step.constants.state_bytes: cost.memory.state_bytes_per_param at the
    plan's dtype and the stack's optimizer state): 2 + 12 B in mixed precision with an fp32 master copy,
    2 + 4 B without one (pure bf16: efficiency.runtime.optimizer_state param_dtype), 4 + 8 B with fp32
    parameters as their own master (optimizer_state fp32_params: MaxText) and in fp32. ``runtime``: the
    run-wide knobs (its grad_dtype) of a PlanSpec, or a SearchProblem's ``runtime``."""
    per = state_bytes(system_spec, dtype, runtime)
    return parameter_counts(model_spec).total * (per.weights + per.optimizer)


def write_time_s(rank_bytes: float, total_bytes: float, storage_bw: float, host_bw: float) -> float:
    """t = max(S_total / B_storage, S_rank / B_host): the storage's aggregate bandwidth bounds the
    whole write, each rank's device-to-host link (accelerator.host_bandwidth) its own part."""
    return max(total_bytes / storage_bw, rank_bytes / host_bw)


def snapshot_time_s(rank_bytes: float, host_bw: float) -> float:
    """t = S_rank / B_host: an asynchronous save stalls training only for the copy to host memory
    (PyTorch DCP async_save, Megatron-LM async checkpointing), the write to storage runs behind."""
    return rank_bytes / host_bw


def offload_link_share(est) -> float:
    """u = t_offload / t_step: the share of the step the plan's offload keeps the host link busy,
    read from the step's exposed offload (step.result.TimeBreakdown.offload_s: optimizer offload's
    gradient and weight traffic, streaming beyond the compute it hides behind), a lower bound."""
    return min(1.0, est.breakdown.offload_s / est.step_time_s) if est.step_time_s > 0 else 0.0


def async_host_bytes(rank_bytes: float, est) -> float:
    """Host memory per GPU an asynchronous save needs: the snapshot S_rank beside what the plan's
    offload keeps there (the busiest stage's host_bytes: offloaded state and activations)."""
    return rank_bytes + max(s.host_bytes for s in est.stages)


def async_fallback(needed_bytes: float, est) -> str | None:
    """Why an asynchronous save cannot run (None when it can): the snapshot does not fit in host
    memory beside the offloaded state (StageMemory.host_capacity_bytes, the accelerator's
    host_memory; unknown: no limit)."""
    capacity = min(s.host_capacity_bytes for s in est.stages)
    if needed_bytes <= capacity:
        return None
    return (
        f"the snapshot and the offloaded state need {needed_bytes / 2**30:.3g} GiB of host memory "
        f"per GPU, {capacity / 2**30:.3g} GiB is there"
    )


def checkpoint_cost(est, model_spec, system_spec, plan, inputs: CheckpointInputs) -> CheckpointCost:
    """The plan's checkpoint: bytes, the save's stall (sync: the whole write; async: the snapshot),
    the time until it is durable, and the reload (the same max of storage and host link, reading).
    An asynchronous save shares the host with the plan's offload: its snapshot must fit in host
    memory beside the offloaded state (else the save falls back to synchronous, and says why), and
    its write behind training gets the host link's share 1 - u the offload leaves
    (offload_link_share): t_w = max(S_total / B_storage, S_rank / (B_host (1 - u)))."""
    host_bw = system_spec.accelerator.host_bandwidth or system_spec.network.nic_bandwidth
    rank = rank_state_bytes(est, model_spec, system_spec, plan)
    total = total_state_bytes(model_spec, system_spec, plan.dtype, plan)
    write = write_time_s(rank, total, inputs.storage_write_bandwidth, host_bw)
    load = write_time_s(rank, total, inputs.storage_read_bandwidth, host_bw)
    if inputs.mode == "sync":
        return CheckpointCost(rank, total, write, write, load)
    needed = async_host_bytes(rank, est)
    reason = async_fallback(needed, est)
    if reason is not None:
        return CheckpointCost(rank, total, write, write, load, "sync", reason, needed)
    share = 1.0 - offload_link_share(est)
    if share <= 0.0:
        reason = "the offload keeps the host link busy for the whole step"
        return CheckpointCost(rank, total, write, write, load, "sync", reason, needed)
    behind = write_time_s(rank, total, inputs.storage_write_bandwidth, host_bw * share)
    stall = snapshot_time_s(rank, host_bw)
    return CheckpointCost(rank, total, stall, max(behind, stall), load, "async", None, needed)
