"""Sums over one block's op graph: its op times (``block_compute``, cost.compute.op_times_s) and its
collective times grouped by what can hide them (``block_comm``, cost.comm), on one system and span.
The builder of a step (step/build.py) and the search (search/table.py) cost every block through these."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

from paraplan.cost.comm import GroupSpan, collective_costs_s, ring_step_sync_s
from paraplan.cost.compute import op_times_s
from paraplan.cost.host import HostSums, host_sums, launch_blocking_idle_s
from paraplan.cost.overlap import userbuffers_contention_s
from paraplan.cost.rng_state import layer_rng_copies_s
from paraplan.cost.runtimes import runtime_copy_s, tp_layout_copy_bytes
from paraplan.cost.moe import EXPERT_GROUPS, expert_group_span, moe_collective_time_and_price_s
from paraplan.cost.summa import grid_spans
from paraplan.graph.cp_ring_torch import TORCH_RING_COLLECTIVE
from paraplan.graph.megatron_softmax import DROPOUT_SCORES
from paraplan.graph.ops import ExpertShape, LayerGraph, Op, early_stop_tail
from paraplan.graph.transformer import LayerShape
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec


class BlockCompute(NamedTuple):
    """Summed op times of one block for one micro-batch (seconds), before communication. (BlockCompute, BlockComm,
    BlockCostFacts and BlockMemoryFacts are NamedTuples: built by the thousand in a search, and a tuple is built,
    hashed and compared without a Python call per field; arrays.stack stacks them field by field.)"""

    forward: float
    backward: float
    attention_forward: float  # the ops selective recompute re-runs (core attention)
    attention_backward: float
    gemm_forward: float
    gemm_backward: float
    # seconds the GEMMs lose to TP comm-GEMM overlap's kernels if it is on (cost.overlap.userbuffers_contention_s)
    ub_forward: float = 0.0
    ub_backward: float = 0.0
    # host terms (cost.host.HostSums): issue seconds of the block's kernels, and the forward's synchronisations
    host_forward: float = 0.0
    host_backward: float = 0.0
    sync_idle: float = 0.0
    sync_wait: float = 0.0
    # GPU seconds of the CUDA RNG state copies a full recomputation of the block adds beyond its re-run forward
    # (cost.rng_state); the copies of each forward run are in ``sync_idle`` / ``sync_wait``
    rng_checkpoint: float = 0.0
    # GPU idle in the backward while the host issues its kernels, under synchronous launches (the forward's is in
    # ``sync_idle``: cost.host.launch_blocking_idle_s), and after the synchronisations a selective recomputation
    # re-runs (cost.host.HostSums.recompute_sync_idle)
    backward_idle: float = 0.0
    # forward seconds of the trailing ops a full recomputation does not re-run (early_stop_tail_s)
    early_stop_forward: float = 0.0


def early_stop_tail_s(ops: tuple[Op, ...], times: dict[Op, tuple[float, float]]) -> float:
    """Forward seconds of a block's ops that torch.utils.checkpoint's early stop does not re-run
    (graph.ops.early_stop_tail: the dense MLP's output GEMM and the residual add after it, when they end
    the block), else 0."""
    return sum((times[op][0] for op in early_stop_tail(ops)), 0.0)


@lru_cache(maxsize=16384)
def block_compute(
    block: LayerGraph, system: SystemSpec, dtype: str, bias: tuple[bool, bool] = (False, False)
) -> BlockCompute:
    """Σ over the block's ops of forward / backward time (cost.compute.op_times_s), by kind, and their host terms
    (cost.host.host_sums: kernel issue seconds, the dropless dispatch's synchronisations, and the kernels whose
    round trips synchronous launches add, launch_blocking_idle_s; ``bias``: the model's (bias, qkv_bias), whose
    kernels the host issues too; without it, fewer: the search's floors)."""
    forward = backward = attention_forward = attention_backward = gemm_forward = gemm_backward = 0.0
    ub_forward = ub_backward = 0.0
    sms = system.accelerator.sm_count
    fp8_pipeline = system.accelerator.efficiency.runtime.ub_fp8_pipeline
    times = _op_times(system, dtype)
    if len(times) > 262144:  # a bound, as an lru cache's
        times.clear()
    for op in block.ops:
        pair = times.get(op)
        if pair is None:
            pair = times[op] = op_times_s(op, system.accelerator, dtype)
        f, b = pair
        forward += f
        backward += b
        if op.selective_recompute:
            attention_forward += f
            attention_backward += b
        if op.kind in ("gemm", "grouped_gemm"):
            gemm_forward += f
            gemm_backward += b
            uf, ub = userbuffers_contention_s(op.name, f, b, sms, dtype, fp8_pipeline)
            ub_forward += uf
            ub_backward += ub
    eff = system.accelerator.efficiency
    host = (
        host_sums(block.ops, eff, times, bias, dtype)
        if eff.host_launch_s > 0.0 or eff.host_sync_s > 0.0 or eff.launch_blocking
        else HostSums()
    )
    # the RNG state copies of each forward run drain the queue: GPU idle and host wait alike
    rng_pass, rng_checkpoint = _rng_copies_s(block, system)
    if rng_pass:
        host = host._replace(
            sync_idle=host.sync_idle + rng_pass, sync_wait=host.sync_wait + rng_pass
        )
    if eff.launch_blocking:  # the GPU idles while the host issues each kernel and sees it complete
        idle = launch_blocking_idle_s(
            host.forward, True, host.kernels_forward, eff.host_sync_latency_s
        )
        host = host._replace(sync_idle=host.sync_idle + idle)
    return BlockCompute(
        forward,
        backward,
        attention_forward,
        attention_backward,
        gemm_forward,
        gemm_backward,
        ub_forward,
        ub_backward,
        host.forward,
        host.backward,
        host.sync_idle,
        host.sync_wait,
        rng_checkpoint=rng_checkpoint,
        backward_idle=launch_blocking_idle_s(
            host.backward, eff.launch_blocking, host.kernels_backward, eff.host_sync_latency_s
        )
        + host.recompute_sync_idle,
        early_stop_forward=early_stop_tail_s(block.ops, times)
        if eff.checkpoint_early_stop
        else 0.0,
    )


def _rng_copies_s(block: LayerGraph, system: SystemSpec) -> tuple[float, float]:
    """cost.rng_state.layer_rng_copies_s of the block: its unfused attention dropouts (``softmax_dropout`` ops
    of a model with dropout) and its attention calls."""
    eff = system.accelerator.efficiency
    if eff.rng_state_copy_bytes <= 0.0:
        return 0.0, 0.0
    attention = [op for op in block.ops if op.name in ("softmax_dropout", "flash_attention")]
    dropouts = sum(
        1 for op in attention if op.kernel is not None and op.kernel[0] in DROPOUT_SCORES
    )
    # a system without a host link is refused first (specs.rules_precision.host_link_rule): no byte term then
    host_bandwidth = system.accelerator.host_bandwidth or math.inf
    return layer_rng_copies_s(eff, host_bandwidth, dropouts, len(attention))


@lru_cache(maxsize=64)
def _op_times(system: SystemSpec, dtype: str) -> dict[Op, tuple[float, float]]:
    """op -> cost.compute.op_times_s on this system and dtype, filled by block_compute once per distinct op: the
    attention half of an MoE layer, its router and shared experts repeat unchanged across the expert options."""
    return {}


class BlockComm(NamedTuple):
    """Seconds of one block's collectives for one micro-batch, grouped by what can hide them, and
    the price of hiding each group completely (cost.comm.LinearCollective.hidden_price_s)."""

    tp_forward: float
    tp_backward: float  # backward collectives nothing hides
    tp_hidden_by_dgrad: float
    tp_hidden_by_wgrad: float
    cp_forward: float
    cp_backward: float
    tp_forward_price: float
    tp_backward_price: float  # of all backward TP collectives
    cp_forward_price: float
    cp_backward_price: float
    ep_forward: float = 0.0  # expert-parallel dispatch / combine (and ETP collectives)
    ep_backward: float = 0.0
    ep_forward_price: float = 0.0
    ep_backward_price: float = 0.0
    ep_overlap: float = (
        0.0  # 1 when the plan overlaps dispatch/combine with compute (moe_a2a_overlap)
    )
    # seconds the collectives keep the NIC busy (groups spanning NVLink domains): cost.comm.collective_nic_time_s
    tp_nic_forward: float = 0.0
    tp_nic_backward: float = 0.0
    cp_nic_forward: float = 0.0
    cp_nic_backward: float = 0.0
    # context-parallel ring: steps per pass (c - 1) and the CP time nothing hides: the ring's per-step
    # synchronisation, or 2d-seq's K/V all-gathers (graph/summa.py; the kernel waits for them)
    cp_steps: float = 0.0
    cp_sync_forward: float = 0.0
    cp_sync_backward: float = 0.0
    # not in tp_backward: the SP input re-gathers for wgrad on a DTensor stack (dtensor_tp), which run only
    # where recomputation drops the gathered input (step.block_terms.dtensor_regather_s adds them there)
    tp_dtensor_regather: float = 0.0
    # of tp_backward: the input-gradient reduce-scatters on a DTensor stack, which AsyncTP leaves unfused
    # (step.block_terms.backward_tp_exposure_s)
    tp_unfused_backward: float = 0.0
    # 1 when the K/V ring's chunks arrive by one all-gather: the graph emitted torch's ring
    # (graph.cp_ring_torch.TORCH_RING_COLLECTIVE)
    cp_gathered: float = 0.0
    # 1 when the stack waits for each K/V ring transfer where it is issued (specs.runtime.RuntimeCosts.cp_ring_overlap
    # False): nothing hides the ring (step.block_terms.waited_cp_exposure_s)
    cp_waited: float = 0.0
    # the layout copies of a DTensor stack's sequence-parallel collectives (tp_layout_copies_s): forward; backward
    # beside the all-gathers of output gradients; of the SP input re-gathers; of the input-gradient
    # reduce-scatters, which AsyncTP leaves unfused (step.block_terms.tp_layout_copies_s adds them)
    tp_copy_forward: float = 0.0
    tp_copy_backward: float = 0.0
    tp_copy_regather: float = 0.0
    tp_copy_unfused: float = 0.0
    # PyTorch AsyncTP's decomposed collective matmuls (cost.async_tp.with_async_tp_exposure, a DTensor stack):
    # 1 where priced; the forward TP seconds exposed; the exposure and the seconds of the backward collectives
    # it fuses (step.block_terms reads them where the plan overlaps TP communication)
    tp_async: float = 0.0
    tp_async_forward: float = 0.0
    tp_async_backward: float = 0.0
    tp_async_backward_comm: float = 0.0


@lru_cache(maxsize=65536)
def block_comm(
    block: LayerGraph,
    system: SystemSpec,
    tp_span: GroupSpan,
    cp_span: GroupSpan,
    model: ModelSpec | None = None,
    shape: LayerShape | None = None,
    async_tp: bool = True,
) -> BlockComm:
    """Σ over the block's collectives of calls × collective time (and hidden price) on the group's span;
    expert-parallel collectives (groups ep, etp) on the expert spans of ``shape.expert``
    (cost.moe.moe_collective_time_and_price_s). A backward TP collective counts as hidden by the dgrad or
    wgrad GEMMs (``overlaps_with``) only where the stack and the pipeline engine (``async_tp``:
    step.engines.EngineRules.async_tp_backward) run it asynchronously beside them (``tp_backward_hides``);
    otherwise it is exposed (``tp_backward``)."""
    spans = {"tp": tp_span, "cp": cp_span}
    hides = tp_backward_hides(system, async_tp)
    dtensor = dtensor_tp(system)
    copies = system.accelerator.efficiency.runtime.tp_layout_copies
    s = dict.fromkeys(BlockComm._fields, 0.0)
    moe = shape is not None and model is not None
    if moe:
        s["ep_overlap"] = float(shape.expert.a2a_overlap)
    if not block.collectives:
        return BlockComm(**s)
    if shape is not None and shape.tp_layout == "2d":
        spans["tp_row"], spans["tp_col"] = grid_spans(tp_span, shape.tp_rows)
    if moe:
        s["ep_forward"], s["ep_backward"], s["ep_forward_price"], s["ep_backward_price"] = (
            expert_comm_terms(block.collectives, system, model, shape.expert)
        )
    for c in block.collectives:
        fwd, bwd = c.count_fwd, c.count_bwd
        if c.group in EXPERT_GROUPS:  # expert_comm_terms
            continue
        time, price, nic = collective_costs_s(c.kind, c.bytes, spans[c.group], system)
        if c.group == "cp":
            s["cp_nic_forward"] += fwd * nic
            s["cp_nic_backward"] += bwd * nic
            if (
                c.kind != "ring_exchange"
            ):  # 2d-seq's K/V all-gathers, Ulysses' all-to-alls: the kernel waits for them
                s["cp_sync_forward"] += fwd * time
                s["cp_sync_backward"] += bwd * time
                continue
            if spans["cp"].size > 1:
                s["cp_gathered"] = float(c.name == TORCH_RING_COLLECTIVE)
                s["cp_waited"] = float(not system.accelerator.efficiency.runtime.cp_ring_overlap)
                steps = spans["cp"].size - 1
                s["cp_steps"] = max(s["cp_steps"], steps)
                sync = ring_step_sync_s(spans["cp"], system)
                s["cp_sync_forward"] += fwd * steps * sync
                s["cp_sync_backward"] += bwd * steps * sync
            s["cp_forward"] += fwd * time
            s["cp_backward"] += bwd * time
            s["cp_forward_price"] += fwd * price
            s["cp_backward_price"] += bwd * price
            continue
        # tp, and the 2D grid's rows and columns: tensor-parallel traffic
        s["tp_nic_forward"] += fwd * nic
        s["tp_nic_backward"] += bwd * nic
        if (
            c.overlaps_with == "panels"
        ):  # SUMMA traffic: exposed beside the block's GEMMs (block_cost_facts)
            continue
        s["tp_forward"] += fwd * time
        s["tp_forward_price"] += fwd * price
        if copies and c.kind in _LAYOUT_COPY_KINDS and tp_span.size > 1:
            copy = tp_layout_copy_s(c.bytes, system)
            s["tp_copy_forward"] += fwd * copy
            s[_COPY_BACKWARD_FIELD.get(c.overlaps_with, "tp_copy_backward")] += bwd * copy
        s[_tp_backward_field(c.overlaps_with, hides, dtensor)] += bwd * time
        if dtensor and c.overlaps_with == "wgrad":  # the input-gradient reduce-scatter
            s["tp_unfused_backward"] += bwd * time
        s["tp_backward_price"] += bwd * price
    return BlockComm(**s)


def expert_comm_terms(
    collectives, system: SystemSpec, model: ModelSpec, expert: ExpertShape
) -> tuple[float, float, float, float]:
    """(ep_forward, ep_backward, ep_forward_price, ep_backward_price) of block_comm: Σ over the expert-parallel
    collectives (groups ep, etp) of calls × cost.moe.moe_collective_time_and_price_s on the expert spans of
    the option ``expert`` (cost.moe.expert_group_span); the other collectives are left out."""
    forward = backward = forward_price = backward_price = 0.0
    ep, etp = expert.ep, expert.etp
    for c in collectives:
        if c.group not in EXPERT_GROUPS:
            continue
        span = expert_group_span(c.group, ep, etp, system)
        time, price = moe_collective_time_and_price_s(
            c.kind, c.bytes, span, system, model, expert.dispatcher
        )
        forward += c.count_fwd * time
        backward += c.count_bwd * time
        forward_price += c.count_fwd * price
        backward_price += c.count_bwd * price
    return forward, backward, forward_price, backward_price


# where a backward TP collective's seconds go, by what hides it (Collective.overlaps_with)
_TP_BACKWARD_FIELD = {"dgrad": "tp_hidden_by_dgrad", "wgrad": "tp_hidden_by_wgrad"}


# the TP collectives that change a tensor's layout along the sequence dimension (a DTensor stack's funcol calls
# with gather / scatter dim 1; an all-reduce has no dim) and where a backward call's copy goes, by what the
# collective overlaps (Collective.overlaps_with: the SP input re-gather, the input-gradient reduce-scatter)
_LAYOUT_COPY_KINDS = ("all_gather", "reduce_scatter")
_COPY_BACKWARD_FIELD = {"dgrad": "tp_copy_regather", "wgrad": "tp_copy_unfused"}


def tp_layout_copy_s(collective_bytes: float, system: SystemSpec) -> float:
    """Seconds of one sequence-parallel collective's layout copy on a DTensor stack: 2·S at the plain HBM rate,
    S its whole tensor's bytes (cost.runtimes.tp_layout_copy_bytes, runtime_copy_s: one cat kernel, no eager
    traffic factor)."""
    return runtime_copy_s(
        1.0, tp_layout_copy_bytes(collective_bytes), system.accelerator.hbm_rate()
    )


def tp_backward_hides(system: SystemSpec, async_tp: bool = True) -> dict[str, str]:
    """BlockComm field of a backward TP collective by what hides it, under the stack's runtime
    (specs.runtime.RuntimeCosts.tp_backward_async) and the pipeline engine's rule (``async_tp``:
    step.engines.EngineRules.async_tp_backward, True but under DeepSpeed's PipelineEngine), both needed:
    - Megatron-LM's async tensor-parallel backward (megatron/core/tensor_parallel/layers.py
      ``LinearWithGradAccumulationAndAsyncCommunication``): the SP input re-gather is issued before the
      dgrad GEMM and the input-gradient reduce-scatter before the wgrad GEMM, each waited after it:
      ``_TP_BACKWARD_FIELD``;
    - PyTorch DTensor TP (torch/distributed/tensor/parallel/style.py ColwiseParallel / RowwiseParallel /
      PrepareModuleInput, whose layout changes are DTensor redistributes through the functional collectives
      of torch/distributed/_functional_collectives.py): a collective's AsyncCollectiveTensor is waited at its
      first use, which is the next op (the GEMM that needs the gathered input, the norm backward that needs
      the reduce-scattered gradient); Inductor leaves that order unless
      torch._inductor.config.reorder_for_compute_comm_overlap is set (default False): nothing, every
      backward TP collective is exposed (AsyncTP, the plan's overlap_tp_comm, is priced apart);
    - synchronous kernel launches (efficiency.launch_blocking, CUDA_LAUNCH_BLOCKING=1): nothing, the collective's
      launch returns once it has completed, before the GEMM beside it is issued
      (cost.runtimes.SYNCHRONOUS_LAUNCH_OVERLAPS)."""
    eff = system.accelerator.efficiency
    stack = eff.runtime.tp_backward_async and not eff.launch_blocking
    return _TP_BACKWARD_FIELD if stack and async_tp else {}


def dtensor_tp(system: SystemSpec) -> bool:
    """The stack's tensor parallelism is PyTorch DTensor's (specs.runtime.RuntimeCosts.tp_backward_async False,
    the torchtitan profiles): its SP input re-gathers and input-gradient reduce-scatters are kept apart
    (``tp_dtensor_regather``, ``tp_unfused_backward``; tp_backward_hides documents the stack)."""
    return not system.accelerator.efficiency.runtime.tp_backward_async


def _tp_backward_field(overlaps_with: str, hides: dict[str, str], dtensor: bool) -> str:
    """BlockComm field a backward TP collective's seconds go to: a DTensor stack's SP input re-gather
    (``overlaps_with`` "dgrad") to ``tp_dtensor_regather`` alone (step.block_terms.dtensor_regather_s), the rest
    by what hides them (``hides``: tp_backward_hides), ``tp_backward`` where nothing does."""
    if dtensor and overlaps_with == "dgrad":
        return "tp_dtensor_regather"
    return hides.get(overlaps_with, "tp_backward")


@lru_cache(maxsize=65536)
def _comm_with_overlap(comm: BlockComm, ep_overlap: float) -> BlockComm:
    """``comm._replace(ep_overlap=ep_overlap)``, once per (costing, switch)."""
    return comm if comm.ep_overlap == ep_overlap else comm._replace(ep_overlap=ep_overlap)
