"""Compose a training step from a list of pipeline stages, and memory per stage.

A :class:`Stage` holds an ordered list of blocks (embedding, decoder layers, LM head; more kinds
plug in the same way), each a :class:`BlockCost`: its per-micro-batch time terms, the parameters
it holds (tagged with the gradient group that reduces them) and the activations it keeps. One
Stage entry may stand for ``count`` identical consecutive stages (the search describes a uniform
plan with four entries: first, the fuller middle stages, the other middle stages, last); an
entry with count 0 is absent.

Every function here is plain arithmetic that works the same on Python floats and on numpy arrays
(one element per candidate plan), so ``estimate`` (one plan) and the search (millions at once)
share one implementation and agree to the last bit.

Step time (Narayanan et al. 2021 §2.2): m micro-batches of the slowest stage's work, plus the
bubble (schedule/pipeline.py), plus the tail after the last backward — data-parallel gradient
sync, optimizer step, offload traffic — of the stage whose tail is longest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from paraplan.cost.comm import LinearCollective, host_exposed_s, priced_exposure_s
from paraplan.cost.memory import in_flight_chunks
from paraplan.cost.overlap import (
    bucketed_reduce_exposed_s,
    chunked_overlap_exposed_s,
    ring_attention_exposed_s,
)
from paraplan.step.blocks import TRANSFORMER_KINDS  # kinds Korthikanti et al. 2022 Fig. 1 counts
from paraplan.step.result import TimeBreakdown
from paraplan.step import zero3_legacy as legacy
from paraplan.step.offload import offload_traffic_bytes, offloaded_activation_share
from paraplan.step.pipeline import bubble_from_work_s
from paraplan.step.zero_bubble import split_backward_bubble

Num = Any  # float or numpy array, broadcastable

# Optimizer-step HBM traffic per parameter on its owner, one pass per kernel of Megatron-LM's
# mixed-precision step: zero the fp32 grad buffer (write 4), unscale + inf check (read 4, write 4),
# gradient-norm for clipping (read 4), Adam (read grad, master, m, v: 16; write master, m, v: 12),
# copy master to the half-precision weight (read 4, write 2) = 54 B (state sizes: ZeRO §3.1).
OPTIMIZER_BYTES_PER_PARAM = 54.0
# Bytes per parameter in the data-parallel gradient reduction: Megatron-LM reduces its fp32 main
# gradients (4 B/param, as in Korthikanti et al. 2022's memory accounting).
GRAD_REDUCE_BYTES = 4.0
# Gradient buckets of the data-parallel reduction: Megatron-Core DistributedDataParallelConfig
# bucket_size default max(40M, 1M·dp) parameters ("larger DP sizes need larger buckets to ensure
# collectives do not become latency-bound", megatron/core/distributed); each bucket is one call.
DP_BUCKET_MIN_PARAMS = 40e6
# TP comm-GEMM overlap pipelines each GEMM and its collective in this many chunks: the
# num_splits = 4 of the pipelined reduce-scatter overlaps in NeMo's Transformer Engine userbuffers
# configurations (ring-exchange all-gather overlap splits in tp = 4-8 chunks).
TP_OVERLAP_CHUNKS = 4.0
DP_BUCKET_PARAMS_PER_RANK = 1e6


@dataclass(frozen=True)
class BlockTerms:
    """Per-micro-batch seconds of one block on one GPU: compute, and communication left exposed.

    Forward and backward communication are kept apart because they sit in different overlap
    windows (``tail_terms``); collectives re-run by recomputation happen in the backward pass and
    are counted in ``tp_backward`` / ``cp_backward``."""

    forward: Num
    backward: Num
    recompute: Num
    tp_forward: Num
    tp_backward: Num
    cp_forward: Num
    cp_backward: Num
    ep_forward: Num = 0.0  # exposed expert-parallel dispatch / combine (graph/moe.py)
    ep_backward: Num = 0.0
    wgrad: Num = (
        0.0  # the weight-gradient share of ``backward`` (split-backward schedules); not added again
    )


BLOCK_TERM_NAMES = tuple(f.name for f in fields(BlockTerms) if f.name != "wgrad")
RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}


def block_terms(compute, comm, recompute_code: Num, overlap_tp_comm: Num) -> BlockTerms:
    """Per-micro-batch block time from its summed op times (``compute``: stages.BlockCompute) and
    collective times and hidden prices (``comm``: stages.BlockComm); fields may be floats or arrays.

    Recompute (Korthikanti et al. 2022 §5): full (code 2) re-runs the forward, selective (1) the
    core attention. The context-parallel ring exchange hides behind the attention of the chunk
    already received (Liu et al. 2023). Backward TP collectives run beside the GEMMs they do not
    depend on: the SP input re-gather beside dgrad, the gradient all-reduce / reduce-scatter beside
    wgrad (Megatron-LM's async tensor-parallel communication); each half of the backward GEMM time
    is one of the two (equal FLOPs, Narayanan et al. 2021 §5.1). With ``overlap_tp_comm``
    (Transformer Engine's comm-GEMM overlap; the caller allows it only inside one NVLink domain)
    forward and backward TP collectives are pipelined with their GEMMs in TP_OVERLAP_CHUNKS pieces:
    one chunk stays exposed and the slower stream sets the pace (cost.overlap.chunked_overlap_exposed_s).
    The CP ring exposes, per step, what its transfer outlasts of one step's attention, plus a
    synchronisation per step (cost.overlap.ring_attention_exposed_s, cost.comm.ring_step_sync_s).
    Hidden communication still costs its price (cost.comm.priced_exposure_s): the SMs and HBM the
    communication kernels take from the compute they overlap."""
    c = compute
    full = recompute_code == 2
    rc = recompute_s(c, recompute_code)
    steps = comm.cp_steps
    per_step = 1.0 / np.maximum(steps, 1.0)
    cp_f = priced_exposure_s(
        comm.cp_forward,
        ring_attention_exposed_s(
            comm.cp_forward * per_step, c.attention_forward / (steps + 1.0), steps + 1.0, 0.0
        )
        + comm.cp_sync_forward,
        comm.cp_forward_price,
    )
    cp_b = priced_exposure_s(
        comm.cp_backward,
        ring_attention_exposed_s(
            comm.cp_backward * per_step, c.attention_backward / (steps + 1.0), steps + 1.0, 0.0
        )
        + comm.cp_sync_backward,
        comm.cp_backward_price,
    )
    backward_comm = comm.tp_backward + comm.tp_hidden_by_dgrad + comm.tp_hidden_by_wgrad
    tp_b_async = (
        comm.tp_backward
        + np.maximum(0.0, comm.tp_hidden_by_dgrad - c.gemm_backward / 2.0)
        + np.maximum(0.0, comm.tp_hidden_by_wgrad - c.gemm_backward / 2.0)
    )
    tp_f = np.where(
        overlap_tp_comm,
        priced_exposure_s(
            comm.tp_forward,
            chunked_overlap_exposed_s(comm.tp_forward, c.gemm_forward, TP_OVERLAP_CHUNKS, 0.0),
            comm.tp_forward_price,
        ),
        comm.tp_forward,
    )
    tp_b = priced_exposure_s(
        backward_comm,
        np.where(
            overlap_tp_comm,
            chunked_overlap_exposed_s(backward_comm, c.gemm_backward, TP_OVERLAP_CHUNKS, 0.0),
            tp_b_async,
        ),
        comm.tp_backward_price,
    )
    tp_rc = np.where(full, tp_f, 0.0)  # full recompute re-runs the forward collectives, in backward
    cp_rc = np.where(
        recompute_code > 0, cp_f, 0.0
    )  # both recompute modes re-run the core attention
    ep_f, ep_b = expert_exposure(c, comm)
    # W: the weight-gradient GEMMs, half of the backward GEMM time (equal FLOPs, Narayanan et al. 2021 §5.1)
    return BlockTerms(
        c.forward,
        c.backward,
        rc,
        tp_f,
        tp_b + tp_rc,
        cp_f,
        cp_b + cp_rc,
        ep_f,
        ep_b,
        c.gemm_backward / 2.0,
    )


def recompute_s(compute, recompute_code: Num) -> Num:
    """Seconds recomputation re-runs per micro-batch (Korthikanti et al. 2022 §5): full (code 2) the
    block's forward, selective (1) its core attention (``attention_forward``), none (0) nothing."""
    return np.where(
        recompute_code == 2,
        compute.forward,
        np.where(recompute_code == 1, compute.attention_forward, 0.0),
    )


def expert_exposure(c, comm) -> tuple[Num, Num]:
    """Exposed (forward, backward) expert-parallel dispatch/combine of one block. The all-to-alls
    sit between the router and the expert GEMMs and between the GEMMs and the un-permute: nothing
    of the same micro-batch can run beside them, so they are exposed. With ``ep_overlap``
    (moe_a2a_overlap: DeepEP / DualPipe / Megatron-LM's 1F1B A2A overlap run one micro-batch's
    dispatch and combine beside another micro-batch's compute; DeepSeek-V3 report §3.2.1) they
    hide behind the block's compute of the other direction and cost their price
    (cost.comm.priced_exposure_s)."""
    ep_f = np.where(
        comm.ep_overlap,
        priced_exposure_s(
            comm.ep_forward, np.maximum(0.0, comm.ep_forward - c.backward), comm.ep_forward_price
        ),
        comm.ep_forward,
    )
    ep_b = np.where(
        comm.ep_overlap,
        priced_exposure_s(
            comm.ep_backward, np.maximum(0.0, comm.ep_backward - c.forward), comm.ep_backward_price
        ),
        comm.ep_backward,
    )
    return ep_f, ep_b


@dataclass(frozen=True)
class BlockCost:
    """One block on one GPU: its time terms per micro-batch and what it holds in memory."""

    kind: str  # "embedding" | "decoder" | "dense_layer" | "moe_layer" | "experts" | "mtp" | "head" (stages.BLOCK_KINDS)
    terms: BlockTerms
    params: Num  # weight parameters held per GPU
    activation_bytes: Num  # kept for backward, per in-flight micro-batch
    held_bytes: Num  # kept once at the stage's peak (the LM head's fp32 logits)
    buffer_bytes: Num  # transient working buffer while the block runs
    gradient_group: str = "dense"  # specs.parallel.GRADIENT_GROUPS
    nic_forward_s: Num = (
        0.0  # NIC-busy seconds of its TP/CP collectives per micro-batch, forward window
    )
    nic_backward_s: Num = 0.0  # the same in the backward window (recompute re-runs included)
    largest_weight_params: Num = (
        0.0  # its largest weight tensor per GPU (graph.ops.largest_weight_params)
    )
    weight_tensors: Num = (
        1.0  # its weight tensors: ZeRO-3 all-gather calls when gathered per tensor
    )
    regathered: Num = (
        0.0  # 1: its forward is re-run in full in backward (full recompute of a recomputed kind)
    )
    small_numels: tuple = ()  # sizes of its weight tensors DeepSpeed keeps gathered (graph.ops.small_weight_numels)


@dataclass(frozen=True)
class Stage:
    """``count`` identical consecutive pipeline stages starting at position ``index`` (count 0:
    absent), each running ``blocks`` — (block, how many of it) — once per micro-batch and chunk set."""

    index: Num
    count: Num
    blocks: tuple[tuple[BlockCost, Num], ...]
    p2p_s: Num  # exposed point-to-point transfers per micro-batch (all of the stage's chunks)
    inputs: StepInputs | None = (
        None  # the stage's own inputs (GPU type, links, gradient groups); None: the step's
    )


@dataclass(frozen=True)
class GradientGroup:
    """The ranks that reduce one group's gradients: their number and their collectives in linear form."""

    size: Num
    all_reduce: LinearCollective
    reduce_scatter: LinearCollective
    all_gather: LinearCollective


@dataclass(frozen=True)
class GridKnobs:
    """The plan's knobs that only enter the step composition and the memory sum (floats/bools or
    arrays): schedule, ZeRO stage, DP overlap switches, offloads."""

    vpp: Num
    interleaved: Num
    gpipe: Num
    zero: Num
    overlap_dp_grad_reduce: Num
    overlap_param_gather: Num
    offload_weights: Num
    offload_activations: Num
    offload_optimizer: Num
    zb: Num = False  # ZB-H1 (schedule/zero_bubble.py)
    dualpipe: Num = False  # DualPipe (schedule/zero_bubble.py)
    offload_activation_layers: Num = (
        0  # with offload_activations: decoder layers per stage offloaded (0: all)
    )


# the GridKnobs flag each pipeline schedule (specs.plan.Schedule) sets; 1F1B sets none
SCHEDULE_FLAGS: dict[str, str] = {
    "interleaved": "interleaved",
    "gpipe": "gpipe",
    "zb-h1": "zb",
    "dualpipe": "dualpipe",
}


@dataclass(frozen=True)
class StepInputs:
    """Everything the step and memory composition needs, per candidate (floats or arrays)."""

    stages: tuple[Stage, ...]
    pp: Num
    microbatches: Num
    gradient_groups: dict[str, GradientGroup]
    knobs: GridKnobs
    host_bandwidth: Num  # bytes/s (any positive number when no offload is possible)
    hbm_rate: Num  # achieved HBM bytes/s for the optimizer step
    weight_bytes: Num  # per parameter (cost.memory.state_bytes_per_param)
    grad_bytes: Num
    optimizer_bytes: Num
    reserved_bytes: Num
    zero3_prefetch_layers: Num = (
        1.0  # blocks whose ZeRO-3 weights are gathered ahead (FSDP2 / DeepSpeed: 1)
    )
    fp8_copy_bytes: Num = (
        0.0  # per transformer-layer parameter (cost.memory.fp8_weight_copy_bytes_per_param)
    )
    grad_reduce_bytes: Num = (
        GRAD_REDUCE_BYTES  # per parameter of the data-parallel gradient reduction (its dtype)
    )
    zero3_live_params: Num = (
        math.inf
    )  # ZeRO-3: most gathered parameters resident at once (DeepSpeed's cap; inf: none)
    zero3_tensor_gathers: Num = (
        0.0  # 1: ZeRO-3 gathers each weight tensor apart (DeepSpeed <= 0.5.4), 0: a layer at once
    )
    zero3_tensor_reduces: Num = (
        0.0  # 1: ZeRO-3 reduce-scatters each weight tensor's gradient apart (DeepSpeed <= 0.5.x)
    )
    zero3_regather: Num = (
        0.0  # 1: ZeRO-3 gathers a fully recomputed block's weights again for the recompute
    )
    kernel_overhead_s: Num = (
        0.0  # fixed launch/tail cost of one kernel (efficiency.kernel_overhead_s)
    )
    tied_sync_s: Num = 0.0  # after every stage's tail: the tied-embedding all-reduce (step.p2p)


def _sum_blocks(stage: Stage, value, kinds: tuple[str, ...] | None = None) -> Num:
    total = 0.0
    for block, n in stage.blocks:
        if kinds is None or block.kind in kinds:
            total = total + n * value(block)
    return total


def _layers(stage: Stage) -> Num:
    """Decoder layers (transformer blocks, every chunk) one GPU of the stage runs."""
    return _sum_blocks(stage, lambda b: 1.0, TRANSFORMER_KINDS)


def _max_blocks(stage: Stage, value, kinds: tuple[str, ...] | None = None) -> Num:
    """Largest value over the blocks the stage holds at least once (0 when none)."""
    best = 0.0
    for block, n in stage.blocks:
        if kinds is None or block.kind in kinds:
            best = np.maximum(best, np.where(n > 0, value(block), 0.0))
    return best


def stage_work(stage: Stage) -> dict[str, Num]:
    """Per-micro-batch seconds of one stage by part (BlockTerms names + "pp"), summed over its blocks."""
    parts = {
        name: _sum_blocks(stage, lambda b, k=name: getattr(b.terms, k)) for name in BLOCK_TERM_NAMES
    }
    parts["pp"] = stage.p2p_s
    return parts


def _total(parts: dict[str, Num]) -> Num:
    total = 0.0
    for v in parts.values():
        total = total + v
    return total


def stage_params(stage: Stage, group: str, kinds: tuple[str, ...] | None = None) -> Num:
    """Parameters per GPU of the stage (of its blocks of ``kinds``, default all) that ``group`` reduces."""
    return _sum_blocks(stage, lambda b: b.params if b.gradient_group == group else 0.0, kinds)


def _shard(inp: StepInputs, group: GradientGroup, from_zero: int) -> Num:
    """How many ways ZeRO shards a state over the group: its size from stage ``from_zero`` on, else 1."""
    return np.where(inp.knobs.zero >= from_zero, group.size, 1)


# The data-parallel collectives of each ZeRO branch (tail_terms): 0 all-reduce of gradients;
# 1 (stages 1-2) reduce-scatter of gradients and all-gather of weights; 3 per-block gathers and reduce-scatters.
ZERO_COLLECTIVES = {
    0: ("all_reduce",),
    1: ("reduce_scatter", "all_gather"),
    3: ("layer_gather", "layer_reduce"),
}


def zero_branch(zero: Num) -> Num:
    """The ZeRO stage's branch of the DP tail: 0, 1 (stages 1 and 2 communicate alike) or 3."""
    return np.where(np.asarray(zero) == 2, 1, zero)


def zero_branches(zero: Num) -> tuple[int, ...]:
    """The branches a float or array of ZeRO stages needs, in increasing order: only those are computed."""
    if np.ndim(zero) == 0:
        return (int(zero_branch(zero)),)
    return tuple(sorted({int(b) for b in np.ravel(zero_branch(zero))})) or (
        0,
    )  # a set: np.unique would import numpy.ma


def tail_terms(inp: StepInputs, stage: Stage, work: dict[str, Num]) -> tuple[Num, Num, Num]:
    """(exposed data-parallel communication, optimizer step, optimizer offload) of one stage.

    zero 0: all-reduce of fp32 gradients; zero 1-2: reduce-scatter of gradients + all-gather of
    weights (Megatron distributed optimizer / ZeRO); zero 3: per micro-batch all-gather of weights
    in forward and backward and reduce-scatter of gradients (ZeRO §5.3). Gradient reduction
    overlaps the last micro-batch's backward, the weight all-gather the first micro-batch's
    forward, when the overlap switches are on (Megatron-LM --overlap-grad-reduce /
    --overlap-param-gather); ZeRO-3 traffic overlaps every micro-batch's forward and backward.
    The windows are a micro-batch's forward (compute + exposed forward TP/CP) and backward
    (compute, recompute, exposed backward TP/CP, PP sends): each exposed communication second
    is counted in one window only. Collectives of all gradient groups share the windows.
    Optimizer offload (ZeRO-Offload, Ren et al. 2021) moves gradients to the host and weights
    back over host_bandwidth instead of the on-GPU step."""
    forward_window = work["forward"] + work["tp_forward"] + work["cp_forward"] + work["ep_forward"]
    backward_window = (
        work["backward"]
        + work["recompute"]
        + work["tp_backward"]
        + work["cp_backward"]
        + work["ep_backward"]
        + work["pp"]
    )
    # links shared with the gradient group's traffic: a TP or CP group spanning NVLink domains keeps
    # the NICs busy for part of each window; the gradient collectives, when they cross the NICs too,
    # can use only the rest (fair sharing of one link moves every byte once: cost.overlap.fair_share_times_s)
    dp_on_nic = 0.0
    for group in inp.gradient_groups.values():
        dp_on_nic = np.maximum(
            dp_on_nic, np.where(np.asarray(group.reduce_scatter.slope_out) > 0, 1.0, 0.0)
        )
    nic_forward = dp_on_nic * _sum_blocks(stage, lambda b: b.nic_forward_s)
    nic_backward = dp_on_nic * _sum_blocks(stage, lambda b: b.nic_backward_s)
    forward_window = np.maximum(0.0, forward_window - nic_forward)
    backward_window = np.maximum(0.0, backward_window - nic_backward)
    grad_window = backward_window * inp.knobs.overlap_dp_grad_reduce
    gather_window = forward_window * inp.knobs.overlap_param_gather
    calls = _sum_blocks(
        stage, lambda b: 1.0
    )  # ZeRO-3 gathers / reduce-scatters one block at a time
    per_call = 1.0 / np.maximum(calls, 1.0)
    branches = zero_branches(inp.knobs.zero)
    # DeepSpeed 2021's per-tensor collectives (schedule.zero3_legacy): run-wide knobs, off for every other framework
    tensor_gathers = np.any(np.asarray(inp.zero3_tensor_gathers) > 0)
    tensor_reduces = np.any(np.asarray(inp.zero3_tensor_reduces) > 0)
    kinds = [kind for branch in branches for kind in ZERO_COLLECTIVES[branch]]
    time = dict.fromkeys(kinds, 0.0)
    price = dict(time)
    owned = 0.0
    buckets = 1.0
    reduce_host = (
        0.0  # host seconds per block issuing per-tensor reduce-scatters (DeepSpeed <= 0.5.x)
    )
    forward_delta = regather = (
        None  # (time, price): forward's per-tensor extra; recompute's gathers (zero3_legacy)
    )
    persistent = 0.0  # seconds per step of DeepSpeed's coalesced gather of the persistent tensors after the step
    for name, group in inp.gradient_groups.items():
        params = stage_params(stage, name)
        bucket = np.ceil(
            params / np.maximum(DP_BUCKET_MIN_PARAMS, DP_BUCKET_PARAMS_PER_RANK * group.size)
        )
        buckets = np.maximum(buckets, bucket)
        grad_bytes, weight_bytes = (
            params * inp.grad_reduce_bytes,
            params * inp.weight_bytes,
        )  # gradients reduced in their dtype
        sizes = {  # (collective, bytes per call, calls)
            "all_reduce": (group.all_reduce, grad_bytes / np.maximum(bucket, 1.0), bucket),
            "reduce_scatter": (group.reduce_scatter, grad_bytes / np.maximum(bucket, 1.0), bucket),
            "all_gather": (group.all_gather, weight_bytes / np.maximum(bucket, 1.0), bucket),
            "layer_gather": (
                group.all_gather,
                weight_bytes * per_call,
                1.0,
            ),  # one block's gather (ZeRO-3)
            "layer_reduce": (group.reduce_scatter, grad_bytes * per_call, 1.0),
        }
        for kind in kinds:
            form, size, n = sizes[kind]
            time[kind] = time[kind] + np.where(group.size > 1, n * form.time_s(size), 0.0)
            price[kind] = price[kind] + np.where(group.size > 1, n * form.hidden_price_s(size), 0.0)
            if (
                kind == "layer_gather" and tensor_gathers
            ):  # per weight tensor (DeepSpeed <= 0.5.4): schedule.zero3_legacy
                t_x, p_x, fwd, persist = legacy.tensor_gather_terms(
                    form, size, group.size, stage, inp, name
                )
                time[kind], price[kind] = time[kind] + t_x, price[kind] + p_x
                forward_delta = legacy.add_pair(forward_delta, fwd)
                persistent = persistent + persist
            if kind == "layer_reduce" and tensor_reduces:
                t_x, p_x, host = legacy.tensor_reduce_terms(form, size, group.size, stage, inp)
                time[kind], price[kind], reduce_host = (
                    time[kind] + t_x,
                    price[kind] + p_x,
                    reduce_host + host,
                )
        if 3 in branches and np.any(
            np.asarray(inp.zero3_regather) > 0
        ):  # the recompute's gathers (DeepSpeed 2021)
            on = np.where(group.size > 1, inp.zero3_regather, 0.0)
            t_rc, p_rc = legacy.regather_s(stage, name, group.all_gather, group.size, inp)
            regather = legacy.add_pair(regather, (on * t_rc, on * p_rc))
        owned = owned + params / _shard(inp, group, 1)
    exposure = {}
    if 0 in branches:
        ar = time["all_reduce"]
        exposure[0] = priced_exposure_s(
            ar, bucketed_reduce_exposed_s(ar, grad_window, buckets), price["all_reduce"]
        )
    if 1 in branches:
        rs, ag = time["reduce_scatter"], time["all_gather"]
        exposure[1] = priced_exposure_s(
            rs + ag,
            bucketed_reduce_exposed_s(rs, grad_window, buckets)
            + bucketed_reduce_exposed_s(ag, gather_window, buckets),
            price["reduce_scatter"] + price["all_gather"],
        )
    if 3 in branches:
        g, r = time["layer_gather"], time["layer_reduce"]
        depth = inp.zero3_prefetch_layers * np.where(inp.knobs.overlap_param_gather, 1.0, 0.0)
        exposure[3] = (
            inp.microbatches
            * legacy.zero3_exposure_s(
                calls,
                per_call,
                depth,
                (g, price["layer_gather"]),
                (r, price["layer_reduce"]),
                forward_delta,
                regather,
                forward_window,
                backward_window,
            )
            + persistent
        )
        if np.any(
            np.asarray(reduce_host) > 0
        ):  # per-tensor reduce-scatters issued while the block's backward runs
            exposure[3] = exposure[3] + inp.microbatches * calls * host_exposed_s(
                reduce_host, backward_window * per_call + r
            )
    exposed = exposure[branches[-1]]
    for branch in branches[-2::-1]:
        exposed = np.where(zero_branch(inp.knobs.zero) == branch, exposure[branch], exposed)
    optimizer = np.where(
        inp.knobs.offload_optimizer, 0.0, owned * OPTIMIZER_BYTES_PER_PARAM / inp.hbm_rate
    )
    offload = np.where(
        inp.knobs.offload_optimizer,
        owned * (inp.grad_reduce_bytes + inp.weight_bytes) / inp.host_bandwidth,
        0.0,
    )
    return exposed, optimizer, offload


def _argmax(values: list[Num], present: list[Num]) -> tuple[Num, Num]:
    """(max over present entries, index of the first entry that attains it)."""
    best, index = None, None
    for i, (v, p) in enumerate(zip(values, present)):
        v = np.where(p, v, -np.inf)
        if best is None:
            best, index = v, np.zeros(np.shape(v), dtype=np.int64) if np.ndim(v) else 0
        else:
            better = v > best
            best = np.where(better, v, best)
            index = np.where(better, i, index)
    return best, index


def _pick(index: Num, values: list[Num]) -> Num:
    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = np.where(index == i, values[i], out)
    return out


def _pipeline(inp: StepInputs) -> dict:
    """The pipeline half of compose_step: every stage's per-micro-batch work, the slowest stage, the
    bubble and the step's parts by kind (m × the slowest stage's parts)."""
    stages = inp.stages
    present = [s.count > 0 for s in stages]
    works = [stage_work(s) for s in stages]
    totals = [_total(w) for w in works]
    slowest_work, slowest = _argmax(totals, present)
    all_work = 0.0
    for s, t in zip(stages, totals):
        all_work = all_work + s.count * t
    bubble = bubble_from_work_s(
        all_work, slowest_work, np.where(inp.knobs.interleaved, inp.knobs.vpp, 1)
    )
    slowest_parts = {k: _pick(slowest, [w[k] for w in works]) for k in works[0]}
    bubble = split_backward_bubble(
        inp.knobs.zb,
        inp.knobs.dualpipe,
        inp.pp,
        bubble,
        slowest_parts,
        _pick(slowest, [_sum_blocks(s, lambda b: b.terms.wgrad) for s in stages]),
    )
    m = inp.microbatches
    part = {name: m * slowest_parts[name] for name in (*BLOCK_TERM_NAMES, "pp")}
    return {
        "present": present,
        "works": works,
        "totals": totals,
        "slowest": slowest,
        "bubble": bubble,
        "part": part,
    }


def _breakdown(pipe: dict, optimizer_s: Num, dp_s: Num, offload_s: Num) -> dict[str, Num]:
    """The TimeBreakdown fields and their sum, step_time_s, in field order."""
    part = pipe["part"]
    out = {
        "forward_s": part["forward"],
        "backward_s": part["backward"],
        "recompute_s": part["recompute"],
        "optimizer_s": optimizer_s,
        "bubble_s": pipe["bubble"],
        "tp_comm_s": part["tp_forward"] + part["tp_backward"],
        "cp_comm_s": part["cp_forward"] + part["cp_backward"],
        "pp_comm_s": part["pp"],
        "ep_comm_s": part["ep_forward"] + part["ep_backward"],
        "dp_comm_s": dp_s,
        "offload_s": offload_s,
    }
    assert tuple(out) == tuple(f.name for f in fields(TimeBreakdown))
    step = 0.0
    for v in out.values():
        step = step + v
    out["step_time_s"] = step
    return out


def pipeline_bound_s(inp: StepInputs) -> Num:
    """compose_step's step time with the tail parts (optimizer, data-parallel, offload) at 0: a lower
    bound on it, to the last bit (the same sum in the same order, each omitted part >= 0), and the
    same for every ZeRO, DP-overlap and offload choice — the pipeline half does not read them."""
    return _breakdown(_pipeline(inp), 0.0, 0.0, 0.0)["step_time_s"]


def compose_step(inp: StepInputs) -> dict[str, Num]:
    """Step time and its breakdown (report.result.TimeBreakdown fields) per Narayanan et al. 2021
    §2.2: m × the slowest stage's per-micro-batch work, its parts reported by kind; the bubble
    from every stage's work (schedule/pipeline.py); the longest stage tail (``tail_terms``) and
    activation / weight streaming to host memory that outlasts the DP exposure; the tied-embedding
    all-reduce (step.p2p.tied_embedding_sync_s) after them all, in the data-parallel part."""
    pipe = _pipeline(inp)
    stages, works, totals, m = inp.stages, pipe["works"], pipe["totals"], inp.microbatches
    busy = m * _pick(pipe["slowest"], [t - w["pp"] for w, t in zip(works, totals)])
    tails = [tail_terms(s.inputs or inp, s, w) for s, w in zip(stages, works)]
    streamed = (
        0.0  # activation / weight streaming beyond the compute it hides behind (fullest stage)
    )
    for s in stages:
        share = offloaded_activation_share(
            inp.knobs.offload_activations, inp.knobs.offload_activation_layers, _layers(s)
        )
        traffic = _sum_blocks(
            s,
            lambda b, share=share: offload_traffic_bytes(
                b.activation_bytes * share, b.params * inp.weight_bytes * inp.knobs.offload_weights
            ),
            TRANSFORMER_KINDS,
        )
        streamed = np.maximum(
            streamed,
            np.where(
                s.count > 0, m * np.maximum(0.0, traffic / inp.host_bandwidth - busy / m), 0.0
            ),
        )
    # streaming (PCIe) and the DP sync (NIC / NVLink) use different links, so they hide behind the
    # same compute and each other: only what outlasts the DP exposure shows
    after = [dp + opt + off + np.maximum(0.0, streamed - dp) for dp, opt, off in tails]
    _, tail_stage = _argmax(after, pipe["present"])
    dp_s = _pick(tail_stage, [t[0] for t in tails])
    return _breakdown(
        pipe,
        optimizer_s=_pick(tail_stage, [t[1] for t in tails]),
        dp_s=dp_s + inp.tied_sync_s,
        offload_s=_pick(tail_stage, [t[2] for t in tails]) + np.maximum(0.0, streamed - dp_s),
    )


def stage_memory_terms(inp: StepInputs, stage: Stage, index: Num) -> dict[str, Num]:
    """Bytes per GPU of the pipeline stage at position ``index`` running ``stage``'s blocks
    (report.result.StageMemory byte fields + ``peak_bytes``): weights, gradients, optimizer state
    (ZeRO-sharded over each gradient group), in-flight activations (cost.memory.in_flight_chunks),
    buffers, reserved; ``host_bytes`` what offload keeps in host memory (ZeRO-Offload / ZeRO-Infinity,
    Ren et al. 2021)."""
    weights = grads = optimizer = transformer_states = 0.0
    for name, group in inp.gradient_groups.items():
        params = stage_params(stage, name)
        layer_params = stage_params(stage, name, TRANSFORMER_KINDS)
        per_param = (
            (inp.weight_bytes + inp.fp8_copy_bytes) / _shard(inp, group, 3)
            + inp.grad_bytes / _shard(inp, group, 2)
            + inp.optimizer_bytes / _shard(inp, group, 1)
        )
        weights = weights + (
            params * inp.weight_bytes + layer_params * inp.fp8_copy_bytes
        ) / _shard(inp, group, 3)
        grads = grads + params * inp.grad_bytes / _shard(inp, group, 2)
        optimizer = optimizer + params * inp.optimizer_bytes / _shard(inp, group, 1)
        transformer_states = transformer_states + layer_params * per_param
    in_flight = np.where(
        inp.knobs.dualpipe,
        np.minimum(inp.pp + 1, inp.microbatches),
        in_flight_chunks(
            inp.knobs.gpipe, inp.knobs.interleaved, inp.pp, inp.knobs.vpp, inp.microbatches, index
        ),
    )
    copies = np.where(
        inp.knobs.dualpipe, 2.0, 1.0
    )  # DualPipe keeps two copies of the parameters (DeepSeek-V3 Table 2)
    weights, grads = weights * copies, grads * copies
    kept = _sum_blocks(stage, lambda b: b.activation_bytes)
    transformer_kept = _sum_blocks(stage, lambda b: b.activation_bytes, TRANSFORMER_KINDS)
    acts = in_flight * kept + _sum_blocks(stage, lambda b: b.held_bytes)
    offloaded_acts = 2.0 * _max_blocks(
        stage, lambda b: b.activation_bytes, TRANSFORMER_KINDS
    )  # one out, one in
    share = offloaded_activation_share(
        inp.knobs.offload_activations, inp.knobs.offload_activation_layers, _layers(stage)
    )  # the other layers keep theirs on the GPU
    streamed_weights = 2.0 * _max_blocks(
        stage, lambda b: b.params * inp.weight_bytes, TRANSFORMER_KINDS
    )
    out = {
        "weights_bytes": np.where(inp.knobs.offload_weights, streamed_weights, weights),
        "gradients_bytes": grads,
        "optimizer_bytes": np.where(inp.knobs.offload_optimizer, 0.0, optimizer),
        "activations_bytes": np.where(
            inp.knobs.offload_activations, (1.0 - share) * acts + offloaded_acts, acts
        ),
        "buffers_bytes": _max_blocks(stage, lambda b: b.buffer_bytes)
        + np.where(inp.knobs.zero >= 3, zero3_gathered_bytes(inp, stage), 0.0),
        "reserved_bytes": inp.reserved_bytes + 0.0 * in_flight,
        "transformer_weights_and_optimizer_bytes": transformer_states,
        "transformer_activations_bytes": np.where(
            inp.knobs.offload_activations,
            (1.0 - share) * in_flight * transformer_kept + offloaded_acts,
            in_flight * transformer_kept,
        ),
        "host_bytes": np.where(inp.knobs.offload_optimizer, optimizer, 0.0)
        + np.where(inp.knobs.offload_weights, weights, 0.0)
        + share * acts,
    }
    out["peak_bytes"] = (
        out["weights_bytes"]
        + out["gradients_bytes"]
        + out["optimizer_bytes"]
        + out["activations_bytes"]
        + out["buffers_bytes"]
        + out["reserved_bytes"]
    )
    return out


def zero3_gathered_bytes(inp: StepInputs, stage: Stage) -> Num:
    """Gathered ZeRO-3 weights resident at once: the layer computing plus the d layers of the prefetch
    depth (FSDP gathers whole wrapped layers and prefetches the next: Zhao et al. 2023, PyTorch FSDP,
    VLDB), or under a runtime cap on live parameters (DeepSpeed stage3_max_live_parameters) that cap, but
    never less than the block's largest weight tensor, which must be whole to run:
    min((1 + d)·layer, max(cap, largest tensor)) × weight bytes. The buffer is counted whether or not the
    gather overlaps (the search keeps only the overlapped ZeRO-3 variant, which must need no more memory)."""
    layer = (1.0 + inp.zero3_prefetch_layers) * _max_blocks(
        stage, lambda b: b.params, TRANSFORMER_KINDS
    )
    largest = _max_blocks(stage, lambda b: b.largest_weight_params, TRANSFORMER_KINDS)
    return np.minimum(layer, np.maximum(inp.zero3_live_params, largest)) * inp.weight_bytes


def stage_peaks(inp: StepInputs) -> tuple[Num, Num]:
    """(HBM peak, host-memory use) per GPU, each the largest over stages. Each Stage entry is
    evaluated at its first position: in-flight activations fall with the stage index and the
    entry's stages are otherwise identical, so that is the entry's largest."""
    peak = host = 0.0
    for s in inp.stages:
        terms = stage_memory_terms(inp, s, s.index)
        peak = np.maximum(peak, np.where(s.count > 0, terms["peak_bytes"], 0.0))
        host = np.maximum(host, np.where(s.count > 0, terms["host_bytes"], 0.0))
    return peak, host
