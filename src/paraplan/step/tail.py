"""The data-parallel tail of a stage: what runs after (or beside) its last backward — the
gradient reduction or ZeRO traffic left exposed, the optimizer step, and optimizer offload.

``tail_terms`` is the only formula; the per-tensor DeepSpeed 2021 collectives it adds on request
are step/zero3_legacy.py's. Plain arithmetic on floats or numpy arrays (one element per candidate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from paraplan.cost.comm import priced_exposure_s
from paraplan.cost.elementwise import any_positive, ceil, maximum, where
from paraplan.cost.zero3_host import host_exposed_s
from paraplan.cost.overlap import bucketed_reduce_exposed_s
from paraplan.step import zero3_legacy as legacy
from paraplan.step.inputs import (
    GradientGroup,
    Stage,
    StepInputs,
    backward_s,
    forward_s,
    shard_ways,
    stage_params,
    sum_blocks,
)

Num = Any  # float or numpy array, broadcastable

# Gradient buckets of the data-parallel reduction: Megatron-Core DistributedDataParallelConfig
# bucket_size default max(40M, 1M·dp) parameters ("larger DP sizes need larger buckets to ensure
# collectives do not become latency-bound", megatron/core/distributed); each bucket is one call.
DP_BUCKET_MIN_PARAMS = 40e6
DP_BUCKET_PARAMS_PER_RANK = 1e6

# The data-parallel collectives of each ZeRO branch (tail_terms): 0 all-reduce of gradients;
# 1 (stages 1-2) reduce-scatter of gradients and all-gather of weights; 3 per-block gathers and reduce-scatters.
ZERO_COLLECTIVES = {
    0: ("all_reduce",),
    1: ("reduce_scatter", "all_gather"),
    3: ("layer_gather", "layer_reduce"),
}


def zero_branch(zero: Num) -> Num:
    """The ZeRO stage's branch of the DP tail: 0, 1 (stages 1 and 2 communicate alike) or 3."""
    return where(zero == 2, 1, zero)


def zero_branches(zero: Num) -> tuple[int, ...]:
    """The branches a float or array of ZeRO stages needs, in increasing order: only those are computed."""
    if np.ndim(zero) == 0:
        return (int(zero_branch(zero)),)
    branch = np.ravel(zero_branch(zero))
    if not branch.size:
        return (0,)
    # the distinct values, counted on the array (np.unique would import numpy.ma and sort)
    counts = np.bincount(branch.astype(np.intp))
    return tuple(int(b) for b in np.flatnonzero(counts))


def tail_terms(inp: StepInputs, stage: Stage, work: dict[str, Num]) -> tuple[Num, Num, Num]:
    """(exposed data-parallel communication, optimizer step, optimizer offload) of one stage.

    zero 0: all-reduce of fp32 gradients; zero 1-2: reduce-scatter of gradients + all-gather of
    weights (Megatron distributed optimizer / ZeRO); zero 3: per micro-batch all-gather of weights
    in forward and backward and reduce-scatter of gradients (ZeRO §5.3). Gradient reduction
    overlaps the last micro-batch's backward, the weight all-gather the first micro-batch's
    forward, when the overlap switches are on (Megatron-LM --overlap-grad-reduce /
    --overlap-param-gather); ZeRO-3 traffic overlaps every micro-batch's forward and backward.
    The windows are a micro-batch's forward and backward (``overlap_windows``): each exposed
    communication second is counted in one window only. Collectives of all gradient groups share
    the windows. Optimizer offload (ZeRO-Offload, Ren et al. 2021) moves gradients to the host
    and weights back over host_bandwidth instead of the on-GPU step."""
    forward_window, backward_window = overlap_windows(inp, stage, work)
    calls = sum_blocks(stage, lambda b: 1.0)  # ZeRO-3 gathers / reduce-scatters one block at a time
    per_call = 1.0 / maximum(calls, 1.0)
    branches = zero_branches(inp.knobs.zero)
    traffic = _dp_traffic(inp, stage, branches, per_call)
    time, price = traffic.time, traffic.price
    grad_window = backward_window * inp.knobs.overlap_dp_grad_reduce
    gather_window = forward_window * inp.knobs.overlap_param_gather
    exposure = {}
    if 0 in branches:
        ar = time["all_reduce"]
        exposure[0] = priced_exposure_s(
            ar, bucketed_reduce_exposed_s(ar, grad_window, traffic.buckets), price["all_reduce"]
        )
    if 1 in branches:
        rs, ag = time["reduce_scatter"], time["all_gather"]
        exposure[1] = priced_exposure_s(
            rs + ag,
            bucketed_reduce_exposed_s(rs, grad_window, traffic.buckets)
            + bucketed_reduce_exposed_s(ag, gather_window, traffic.buckets),
            price["reduce_scatter"] + price["all_gather"],
        )
    if 3 in branches:
        exposure[3] = _zero3_exposure_s(
            inp, traffic, calls, per_call, forward_window, backward_window
        )
    exposed = exposure[branches[-1]]
    for branch in branches[-2::-1]:
        exposed = where(zero_branch(inp.knobs.zero) == branch, exposure[branch], exposed)
    owned = traffic.owned
    optimizer = where(
        inp.knobs.offload_optimizer, 0.0, owned * inp.optimizer_step_bytes / inp.hbm_rate
    )
    offload = where(
        inp.knobs.offload_optimizer,
        owned * (inp.grad_reduce_bytes + inp.weight_bytes) / inp.host_bandwidth,
        0.0,
    )
    return exposed, optimizer, offload


def overlap_windows(inp: StepInputs, stage: Stage, work: dict[str, Num]) -> tuple[Num, Num]:
    """(forward, backward) window of one micro-batch that data-parallel traffic can hide in: the
    forward (compute + exposed forward TP/CP/EP, step.inputs.forward_s) and the backward (compute,
    recompute, exposed backward TP/CP/EP, step.inputs.backward_s, plus the PP sends), less the share
    of each that a TP or CP group spanning NVLink domains keeps the NICs busy when the gradient
    collectives cross the NICs too (fair sharing of one link moves every byte once:
    cost.overlap.fair_share_times_s)."""
    forward_window = forward_s(work)
    backward_window = backward_s(work) + work["pp"]
    dp_on_nic = 0.0
    for group in inp.gradient_groups.values():
        dp_on_nic = maximum(dp_on_nic, where(group.reduce_scatter.slope_out > 0, 1.0, 0.0))
    nic_forward = dp_on_nic * sum_blocks(stage, lambda b: b.nic_forward_s)
    nic_backward = dp_on_nic * sum_blocks(stage, lambda b: b.nic_backward_s)
    return (
        maximum(0.0, forward_window - nic_forward),
        maximum(0.0, backward_window - nic_backward),
    )


@dataclass
class _Traffic:
    """A stage's data-parallel collectives summed over its gradient groups (``_dp_traffic``)."""

    time: dict  # seconds per call kind of ZERO_COLLECTIVES
    price: dict  # hidden price per call kind (cost.comm.priced_exposure_s)
    owned: Num = 0.0  # parameters whose optimizer state the GPU owns (ZeRO-sharded)
    buckets: Num = 1.0  # gradient buckets of the largest group
    reduce_host: Num = (
        0.0  # host seconds per block issuing per-tensor reduce-scatters (DeepSpeed <= 0.5.x)
    )
    forward_delta: Any = None  # (time, price): forward's per-tensor extra (zero3_legacy)
    regather: Any = None  # (time, price): the recompute's gathers (zero3_legacy)
    persistent: Num = (
        0.0  # seconds per step of DeepSpeed's coalesced gather of the persistent tensors
    )


def _dp_traffic(inp: StepInputs, stage: Stage, branches: tuple, per_call: Num) -> _Traffic:
    """The time and hidden price of each data-parallel call kind the ZeRO branches need, summed over
    the stage's gradient groups (each group's parameters in buckets; ZeRO-3 one block per call), with
    DeepSpeed 2021's per-tensor collectives (step.zero3_legacy: run-wide knobs, off for every other
    framework)."""
    tensor_gathers = any_positive(inp.zero3_tensor_gathers)
    tensor_reduces = any_positive(inp.zero3_tensor_reduces)
    kinds = [kind for branch in branches for kind in ZERO_COLLECTIVES[branch]]
    time = dict.fromkeys(kinds, 0.0)
    t = _Traffic(time, dict(time))
    for name, group in inp.gradient_groups.items():
        params = stage_params(stage, name)
        bucket = ceil(
            params / maximum(DP_BUCKET_MIN_PARAMS, DP_BUCKET_PARAMS_PER_RANK * group.size)
        )
        t.buckets = maximum(t.buckets, bucket)
        sizes = _collective_calls(inp, group, params, bucket, per_call)
        for kind in kinds:
            form, size, n = sizes[kind]
            t.time[kind] = t.time[kind] + where(group.size > 1, n * form.time_s(size), 0.0)
            t.price[kind] = t.price[kind] + where(
                group.size > 1, n * form.hidden_price_s(size), 0.0
            )
            if kind == "layer_gather" and tensor_gathers:  # per weight tensor (DeepSpeed <= 0.5.4)
                t_x, p_x, fwd, persist = legacy.tensor_gather_terms(
                    form, size, group.size, stage, inp, name
                )
                t.time[kind], t.price[kind] = t.time[kind] + t_x, t.price[kind] + p_x
                t.forward_delta = legacy.add_pair(t.forward_delta, fwd)
                t.persistent = t.persistent + persist
            if kind == "layer_reduce" and tensor_reduces:
                t_x, p_x, host = legacy.tensor_reduce_terms(form, size, group.size, stage, inp)
                t.time[kind], t.price[kind] = t.time[kind] + t_x, t.price[kind] + p_x
                t.reduce_host = t.reduce_host + host
        if 3 in branches and any_positive(inp.zero3_regather):
            on = where(group.size > 1, inp.zero3_regather, 0.0)  # the recompute's gathers
            t_rc, p_rc = legacy.regather_s(stage, name, group.all_gather, group.size, inp)
            t.regather = legacy.add_pair(t.regather, (on * t_rc, on * p_rc))
        t.owned = t.owned + params / shard_ways(inp, group, 1)
    return t


def _collective_calls(
    inp: StepInputs, group: GradientGroup, params: Num, bucket: Num, per_call: Num
) -> dict:
    """(collective, bytes per call, calls) of each call kind for one gradient group: gradients
    reduced in their dtype (grad_reduce_bytes) in ``bucket`` calls, weights gathered in their dtype;
    ZeRO-3's per-block gather and reduce-scatter carry ``per_call`` of the stage's parameters."""
    grad_bytes, weight_bytes = params * inp.grad_reduce_bytes, params * inp.weight_bytes
    return {
        "all_reduce": (group.all_reduce, grad_bytes / maximum(bucket, 1.0), bucket),
        "reduce_scatter": (group.reduce_scatter, grad_bytes / maximum(bucket, 1.0), bucket),
        "all_gather": (group.all_gather, weight_bytes / maximum(bucket, 1.0), bucket),
        "layer_gather": (group.all_gather, weight_bytes * per_call, 1.0),  # one block's gather
        "layer_reduce": (group.reduce_scatter, grad_bytes * per_call, 1.0),
    }


def _zero3_exposure_s(
    inp: StepInputs,
    traffic: _Traffic,
    calls: Num,
    per_call: Num,
    forward_window: Num,
    backward_window: Num,
) -> Num:
    """ZeRO-3's exposed traffic per step: m × the per-micro-batch exposure of the block-wise gathers
    and reduce-scatters (step.zero3_legacy.zero3_exposure_s, prefetching ``zero3_prefetch_layers``
    blocks when param-gather overlap is on) plus the persistent tensors' gather, plus the host time
    of per-tensor reduce-scatters that the block's backward does not hide."""
    time, price = traffic.time, traffic.price
    g, r = time["layer_gather"], time["layer_reduce"]
    depth = inp.zero3_prefetch_layers * where(inp.knobs.overlap_param_gather, 1.0, 0.0)
    exposed = (
        inp.microbatches
        * legacy.zero3_exposure_s(
            calls,
            per_call,
            depth,
            (g, price["layer_gather"]),
            (r, price["layer_reduce"]),
            traffic.forward_delta,
            traffic.regather,
            forward_window,
            backward_window,
        )
        + traffic.persistent
    )
    if any_positive(traffic.reduce_host):  # issued while the block's backward runs
        exposed = exposed + inp.microbatches * calls * host_exposed_s(
            traffic.reduce_host, backward_window * per_call + r
        )
    return exposed
