"""Plan-dependent checkpoint terms: bytes per rank and in all, save stall, persist and reload times.

A checkpoint holds the weights and the optimizer state (fp32 master weights and Adam's two moments in
``cost.memory.state_bytes_per_param``), not the gradients. Each rank saves what it holds as the plan
shards it (ZeRO / FSDP over data parallelism, TP, PP, EP: the estimate's per-stage memory); the state
written in all is the model's, once (replicas write disjoint parts: Megatron-LM's fully parallel save,
PyTorch Distributed Checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.memory import state_bytes_per_param
from paraplan.goodput.inputs import CheckpointInputs
from paraplan.graph.params import parameter_counts


@dataclass(frozen=True)
class CheckpointCost:
    """One checkpoint of one plan."""

    rank_bytes: float  # the most any rank holds of the training state
    total_bytes: float  # the model's training state, once
    stall_s: float  # training waits this long per save
    persist_s: float  # from the save's start until it is on storage
    load_s: float  # reload on restart


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


def total_state_bytes(model_spec, plan) -> float:
    """P * (b_weights + b_optimizer): every parameter's weight and optimizer state once
    (cost.memory.state_bytes_per_param: 2 + 12 B in mixed precision, 4 + 8 B in fp32)."""
    per = state_bytes_per_param(plan.dtype, plan.grad_dtype)
    return parameter_counts(model_spec).total * (per.weights + per.optimizer)


def write_time_s(rank_bytes: float, total_bytes: float, storage_bw: float, host_bw: float) -> float:
    """t = max(S_total / B_storage, S_rank / B_host): the storage's aggregate bandwidth bounds the
    whole write, each rank's device-to-host link (accelerator.host_bandwidth) its own part."""
    return max(total_bytes / storage_bw, rank_bytes / host_bw)


def snapshot_time_s(rank_bytes: float, host_bw: float) -> float:
    """t = S_rank / B_host: an asynchronous save stalls training only for the copy to host memory
    (PyTorch DCP async_save, Megatron-LM async checkpointing), the write to storage runs behind."""
    return rank_bytes / host_bw


def checkpoint_cost(est, model_spec, system_spec, plan, inputs: CheckpointInputs) -> CheckpointCost:
    """The plan's checkpoint: bytes, the save's stall (sync: the whole write; async: the snapshot),
    the time until it is durable, and the reload (the same max of storage and host link, reading)."""
    host_bw = system_spec.accelerator.host_bandwidth or system_spec.network.nic_bandwidth
    rank = rank_state_bytes(est, model_spec, system_spec, plan)
    total = total_state_bytes(model_spec, plan)
    write = write_time_s(rank, total, inputs.storage_write_bandwidth, host_bw)
    stall = write if inputs.mode == "sync" else snapshot_time_s(rank, host_bw)
    load = write_time_s(rank, total, inputs.storage_read_bandwidth, host_bw)
    return CheckpointCost(rank, total, stall, max(write, stall), load)
