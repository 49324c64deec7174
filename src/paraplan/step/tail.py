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
from paraplan.cost.elementwise import any_positive, ceil, maximum, scalar_zero, where
from paraplan.cost.host import host_bound_s, launch_blocking_idle_s, step_host_overhead_s
from paraplan.cost.overlap import bucketed_reduce_exposed_s, prefetched_gather_exposed_s
from paraplan.cost.runtimes import runtime_copy_s
from paraplan.cost.zero3_host import host_exposed_s
from paraplan.step import zero3_legacy as legacy
from paraplan.step.bf16_optimizer_sync import (
    bf16_optimizer_kinds,
    bf16_optimizer_traffic,
    deepspeed_fallback_copies,
    optimizer_shard_ways,
    optimizer_traffic_bytes,
)
from paraplan.step.inputs import (
    TRANSFORMER_KINDS,
    GradientGroup,
    Stage,
    StepInputs,
    backward_s,
    calls_of,
    forward_s,
    stage_params,
    sum_blocks,
    zero3_group_calls,
    zero3_pp_keeps,
    zero3_prefetch_depths,
)
from paraplan.step.schedules import by_schedule

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
    """The ZeRO stage's branch of the DP tail: 0, 1 (stages 1 and 2: the same collectives; ZeRO-2's extra
    per-micro-batch reduce-scatters are ``zero2_reduces``) or 3."""
    return where(zero == 2, 1, zero)


def zero_branches(zero: Num, branch_of: Num = None) -> tuple[int, ...]:
    """The branches a float or array of ZeRO stages needs, in increasing order: only those are computed.
    ``branch_of``: zero_branch(zero), when the caller has it."""
    branch_of = zero_branch(zero) if branch_of is None else branch_of
    # np.ndim(zero) == 0, without its dispatch
    if zero.__class__ is not np.ndarray or zero.ndim == 0:
        return (int(branch_of),)
    branch = np.ravel(branch_of)
    if not branch.size:
        return (0,)
    # the distinct values, counted on the array (np.unique would import numpy.ma and sort)
    counts = np.bincount(branch.astype(np.intp))
    return tuple(int(b) for b in np.flatnonzero(counts))


def zero2_reduces(inp: StepInputs) -> Num:
    """Gradient reduce-scatters per step beyond the last micro-batch's: m − 1 where the plan is ZeRO-2 and the
    stack reduces every micro-batch's gradients in its backward (efficiency.runtime.zero2_reduce_per_microbatch),
    else 0 (ZeRO-1 and Megatron-Core's distributed optimizer reduce once per step, after the last micro-batch).

    DeepSpeed stage 2 partitions the gradients, so it cannot hold a micro-batch's full gradient until the
    boundary: DeepSpeedEngine.allreduce_gradients runs overlapping_partition_gradients_reduce_epilogue after
    every backward ("ZeRO stage >= 2 communicates during non gradient accumulation boundaries as well"), while
    stage 1 reduces only at the boundary (reduce_gradients; deepspeed/runtime/engine.py, v0.9 to v0.16); the
    bucketed reduces of stage_1_and_2.py (reduce_independent_p_g_buckets_and_remove_grads, average_tensor) run
    from the gradient hooks of each backward. FSDP SHARD_GRAD_OP reduce-scatters in every backward unless the
    trainer enters no_sync. Each earlier reduce-scatter is exposed as the last one is
    (cost.overlap.bucketed_reduce_exposed_s against one micro-batch's backward window) but gets no drain slack:
    the next micro-batch's forward waits for the backward's epilogue."""
    per_microbatch = (inp.knobs.zero == 2) & (inp.zero2_reduce_per_microbatch > 0)
    return where(per_microbatch, maximum(inp.microbatches - 1.0, 0.0), 0.0)


def tail_terms(
    inp: StepInputs, stage: Stage, work: dict[str, Num], slack: Num = 0.0
) -> tuple[Num, Num, Num]:
    """(exposed data-parallel communication, optimizer step, optimizer offload) of one stage.

    zero 0: all-reduce of fp32 gradients; zero 1-2: reduce-scatter of gradients + all-gather of
    weights (Megatron distributed optimizer / ZeRO; DeepSpeed's BF16_Optimizer: all-reduce, then the
    all-gather after its step, step.bf16_optimizer_sync), ZeRO-2 on a stack that reduces every
    micro-batch (``zero2_reduces``) m reduce-scatters; zero 3: per micro-batch all-gather of weights
    in forward and backward and reduce-scatter of gradients (ZeRO §5.3). Gradient reduction
    overlaps the last micro-batch's backward, the weight all-gather the first micro-batch's
    forward, when the overlap switches are on (Megatron-LM --overlap-grad-reduce /
    --overlap-param-gather); ZeRO-3 traffic overlaps every micro-batch's forward and backward.
    The windows are a micro-batch's forward and backward (``overlap_windows``): each exposed
    communication second is counted in one window only. Collectives of all gradient groups share
    the windows. The gradient reduction still running when the stage's last backward ends runs on
    through ``slack`` (``drain_slack_s``: the time the stage has before the pipeline's end), only
    what outlasts it is exposed; the weight all-gather follows the optimizer and gets none.
    Optimizer offload (ZeRO-Offload, Ren et al. 2021) moves gradients to the host and weights back
    over host_bandwidth instead of the on-GPU step. The optimizer step is a region the host
    issues (cost.host.host_bound_s): its device time or the step's fixed host overhead
    (cost.host.step_host_overhead_s), whichever is longer, or both under synchronous launches
    (cost.host.launch_blocking_idle_s)."""
    forward_window, backward_window = overlap_windows(inp, stage, work)
    calls = calls_of(stage)  # ZeRO-3 gathers / reduce-scatters one block at a time
    per_call = 1.0 / maximum(calls, 1.0)
    branch_of = zero_branch(inp.knobs.zero)
    branches = zero_branches(inp.knobs.zero, branch_of)
    traffic = _dp_traffic(inp, stage, branches, (calls, per_call))
    time, price = deepspeed_fallback_copies(inp, stage, traffic.time, traffic.price)
    grad_window = backward_window * inp.knobs.overlap_dp_grad_reduce
    gather_window = forward_window * inp.knobs.overlap_param_gather
    gather_window, after_step = bf16_optimizer_traffic(inp, time, price, gather_window)
    exposure = {}
    if 0 in branches:
        ar = time["all_reduce"]
        exposure[0] = after_step + priced_exposure_s(
            ar,
            after_slack_s(bucketed_reduce_exposed_s(ar, grad_window, traffic.buckets), slack),
            price["all_reduce"],
        )
    if 1 in branches:
        rs, ag = time["reduce_scatter"], time["all_gather"]
        each = bucketed_reduce_exposed_s(rs, grad_window, traffic.buckets)
        earlier = zero2_reduces(inp)  # the reduce-scatters of the earlier micro-batches
        exposure[1] = priced_exposure_s(
            rs + ag,
            after_slack_s(each, slack)
            + bucketed_reduce_exposed_s(ag, gather_window, traffic.buckets),
            price["reduce_scatter"] + price["all_gather"],
        ) + earlier * priced_exposure_s(rs, each, price["reduce_scatter"])
    if 3 in branches:
        exposure[3] = _zero3_exposure_s(
            inp, traffic, calls, per_call, (forward_window, backward_window), slack
        )
    exposed = exposure[branches[-1]]
    for branch in branches[-2::-1]:
        exposed = where(branch_of == branch, exposure[branch], exposed)
    owned = traffic.owned
    tensors = sum_blocks(stage, lambda b: b.weight_tensors)
    host = step_host_overhead_s(tensors, inp.host_tensor_s, inp.host_step_s)
    # the low-precision recipe's weight quantisation, once per step on the stage's transformer-layer weights
    # (none: 0 × the finite parameter count, +0.0, without summing it)
    quantised = (
        0.0
        if scalar_zero(inp.fp8_weight_quant_bytes)
        else sum(stage_params(stage, name, TRANSFORMER_KINDS) for name in inp.gradient_groups)
    )
    device = (
        optimizer_traffic_bytes(inp, stage, owned) + quantised * inp.fp8_weight_quant_bytes
    ) / inp.hbm_rate
    idle = launch_blocking_idle_s(host, inp.launch_blocking)  # synchronous launches: D + H
    optimizer = where(inp.knobs.offload_optimizer, 0.0, host_bound_s(device, host, idle))
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
    if scalar_zero(dp_on_nic):  # 0 × the finite seconds, +0.0, without summing them
        nic_forward = nic_backward = 0.0
    else:
        nic_forward = dp_on_nic * sum_blocks(stage, lambda b: b.nic_forward_s)
        nic_backward = dp_on_nic * sum_blocks(stage, lambda b: b.nic_backward_s)
    return (
        maximum(0.0, forward_window - nic_forward),
        maximum(0.0, backward_window - nic_backward),
    )


def after_slack_s(exposed_s: Num, slack_s: Num) -> Num:
    """max(0, exposed − slack): the part of a reduction still running ``exposed_s`` after the
    stage's last backward that outlasts the ``slack_s`` seconds left before the pipeline's end
    (the link keeps reducing while the stages behind it drain)."""
    return maximum(0.0, exposed_s - slack_s)


def drain_slack_s(inp: StepInputs, works: list[dict], totals: list[Num], slowest: Num) -> list[Num]:
    """Per stage entry, the seconds between its last backward's end and the end of the pipeline
    part of the step (m × S + bubble), by the schedule (``SLACK_RULES``); 0 for the stage that ends
    last. ``works``/``totals``: every entry's stage_work and its sum; ``slowest``: S. The backward
    (and sends) in front of each entry, Σ_{j: index_j < index_i} count_j·(B_j + sends_j): ``sum_in_front``."""
    stages = inp.stages
    windows = [s.count * (backward_s(w) + w["pp"]) for s, w in zip(stages, works)]
    in_front = sum_in_front([s.index for s in stages], windows)
    out = []
    for before, total in zip(in_front, totals):
        idle = slowest - total
        out.append(
            by_schedule(
                inp.knobs, lambda s, b=before, i=idle: SLACK_RULES[s.name](b, inp.knobs.vpp, i)
            )
        )
    return out


def sum_in_front(index: list[Num], values: list[Num]) -> list[Num]:
    """Per entry i, Σ_j values[j] over the entries with index[j] < index[i] (entries at the same index are
    not in front of each other). Floats: the entries sorted by index (stably), a running sum, each entry the
    sum at the start of its run of equal indices, O(n log n). Arrays (one element per candidate): the n²
    elementwise ``where``s, faster than a per-candidate sort for the few (<= 8) entries a search has."""
    if not any(isinstance(v, np.ndarray) for v in (*index, *values)):
        order = sorted(range(len(index)), key=lambda k: index[k])
        out: list[Num] = [0.0] * len(index)
        running, run_total, last = 0.0, 0.0, None
        for k in order:
            if last is None or index[k] != last:
                run_total, last = running, index[k]
            out[k] = run_total
            running = running + values[k]
        return out
    sums = []
    for own in index:
        before = 0.0
        for other, value in zip(index, values):
            before = before + where(other < own, value, 0.0)
        sums.append(before)
    return sums


def _drain(before: Num, vpp: Num, idle: Num) -> Num:
    """1F1B and GPipe: the last micro-batch's backward runs back from stage p−1 to stage 0
    (Narayanan et al. 2021 §2.2, Fig. 4), so stage i's last backward ends Σ_{j<i} (B_j + sends_j)
    before stage 0's, the end of the step's pipeline part ((m−1)·S + Σ_j W_j: the bubble T − S).
    Megatron-LM runs the gradient reduction per pipeline rank as its own schedule ends
    (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_without_interleaving:
    the cooldown's last backward launches the remaining grad reductions and finalize_model_grads_func
    follows; Megatron-Core r0.9.0),
    so it runs while the stages in front drain."""
    return before


def _drain_interleaved(before: Num, vpp: Num, idle: Num) -> Num:
    """Interleaved 1F1B: the last backward of model chunk 0 runs back through the stages, each a
    1/v chunk (Narayanan et al. 2021 §2.2.2; Megatron-LM
    forward_backward_pipelining_with_interleaving finalises the grads per rank the same way)."""
    return before / maximum(vpp, 1.0)


def _no_slack(before: Num, vpp: Num, idle: Num) -> Num:
    """ZB-H1: the deferred weight-gradient passes fill the cool-down's idle slots (Qi et al. 2023,
    arXiv:2401.10241 §3.1, Fig. 3), so every stage's gradients are complete only at the end."""
    return 0.0 * before


def _paced_idle(before: Num, vpp: Num, idle: Num) -> Num:
    """DualPipe: every slot of a rank posts its receives, waits for them, runs its forward-backward
    pair and posts its sends (deepseek-ai/DualPipe dualpipe.py, _forward_backward_chunk and
    _commit_and_wait_comm), so the ranks step at the slowest rank's pace S (DeepSeek-V3 report,
    arXiv:2412.19437 §3.2.1) and a rank with work W_i ends each slot's work, the last one included,
    S − W_i before the slowest one; the schedule ends every rank with its W passes at the same
    point (steps 7–8 of DualPipe.step), so no drain beyond that. (An absent entry, count 0, may
    exceed S: 0.)"""
    return maximum(idle, 0.0)


# How long each schedule's stage has between its last backward and the pipeline's end
# (``drain_slack_s``): (Σ_{j<i} (B_j + sends_j), vpp, S − W_i) → seconds.
SLACK_RULES = {
    "1f1b": _drain,
    "gpipe": _drain,
    "interleaved": _drain_interleaved,
    "zb-h1": _no_slack,
    "dualpipe": _paced_idle,
}


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
    compute_copy: Num = (
        0.0  # ZeRO-3 runtime copies on the compute stream per micro-batch (cost.runtimes)
    )


def _dp_traffic(inp: StepInputs, stage: Stage, branches: tuple, blocks: tuple) -> _Traffic:
    """The time and hidden price of each data-parallel call kind the ZeRO branches need, summed over
    the stage's gradient groups (each group's parameters in buckets; ZeRO-3 one block per call), with
    DeepSpeed 2021's per-tensor collectives (step.zero3_legacy: run-wide knobs, off for every other
    framework). ``blocks``: the stage's ZeRO-3 block calls L and 1/L."""
    calls, per_call = blocks
    tensor_gathers = any_positive(inp.zero3_tensor_gathers)
    tensor_reduces = any_positive(inp.zero3_tensor_reduces)
    copies = any_positive(
        inp.zero3_compute_copy_bytes
        + inp.zero3_gather_copy_bytes
        + inp.zero3_reduce_copy_bytes
        + inp.zero3_reduce_unsharded_bytes
    )
    kinds = [kind for branch in branches for kind in ZERO_COLLECTIVES[branch]]
    kinds = list(dict.fromkeys(kinds + list(bf16_optimizer_kinds(inp))))  # its own traffic's, too
    time = dict.fromkeys(kinds, 0.0)
    t = _Traffic(time, dict(time))
    for name, group in inp.gradient_groups.items():
        params = stage_params(stage, name)
        bucket = ceil(
            params / maximum(DP_BUCKET_MIN_PARAMS, DP_BUCKET_PARAMS_PER_RANK * group.size)
        )
        t.buckets = maximum(t.buckets, bucket)
        share, own_per_call = (
            zero3_group_calls(stage, name, calls, per_call) if 3 in branches else (1.0, per_call)
        )
        sizes = _collective_calls(inp, group, params, bucket, own_per_call, share)
        for kind in kinds:
            form, size, n = sizes[kind]
            tiers = form.tier_times_s(size)  # what time_s and hidden_price_s both read
            t.time[kind] = t.time[kind] + where(group.size > 1, n * form.time_s(size, tiers), 0.0)
            t.price[kind] = t.price[kind] + where(
                group.size > 1, n * form.hidden_price_s(size, tiers), 0.0
            )
            if kind == "layer_gather" and tensor_gathers:  # per weight tensor (DeepSpeed <= 0.5.4)
                t_x, p_x, fwd, persist = legacy.tensor_gather_terms(
                    form, size, group.size, stage, inp, name
                )
                t.time[kind], t.price[kind] = t.time[kind] + n * t_x, t.price[kind] + n * p_x
                t.forward_delta = legacy.add_pair(t.forward_delta, fwd)
                t.persistent = t.persistent + persist
            if kind == "layer_reduce" and tensor_reduces:
                t_x, p_x, host = legacy.tensor_reduce_terms(form, size, group.size, stage, inp)
                t.time[kind], t.price[kind] = t.time[kind] + n * t_x, t.price[kind] + n * p_x
                t.reduce_host = t.reduce_host + host
        if 3 in branches and copies:
            _runtime_copies(t, inp, group, params, per_call)
        if 3 in branches and any_positive(inp.zero3_regather):
            on = where(group.size > 1, inp.zero3_regather, 0.0)  # the recompute's gathers
            t_rc, p_rc = legacy.regather_s(stage, name, group.all_gather, group.size, inp)
            t.regather = legacy.add_pair(t.regather, (on * t_rc, on * p_rc))
        t.owned = t.owned + params / optimizer_shard_ways(inp, group)  # the optimizer's share
    return t


def _runtime_copies(
    t: _Traffic, inp: StepInputs, group: GradientGroup, params: Num, per_call: Num
) -> None:
    """The ZeRO-3 runtime's copies of one gradient group (cost.runtimes: FSDP1's and FSDP2's), where it shards
    (size > 1): the all-gather copy-in and the post-reduce cast and accumulation of one block's shard, and the
    pre-reduce cast and divide of its unsharded gradient (FSDP1), in series with its gather and reduce-scatter
    (their streams), and the copies on the compute stream per micro-batch (exposed:
    ``_zero3_exposure_s``)."""
    sharded = group.size > 1
    shard = params * per_call / group.size  # one block's shard elements
    t.time["layer_gather"] = t.time["layer_gather"] + where(
        sharded, runtime_copy_s(shard, inp.zero3_gather_copy_bytes, inp.hbm_rate), 0.0
    )
    reduce_copies = runtime_copy_s(shard, inp.zero3_reduce_copy_bytes, inp.hbm_rate) + (
        runtime_copy_s(params * per_call, inp.zero3_reduce_unsharded_bytes, inp.hbm_rate)
    )
    t.time["layer_reduce"] = t.time["layer_reduce"] + where(sharded, reduce_copies, 0.0)
    t.compute_copy = t.compute_copy + where(
        sharded, runtime_copy_s(params, inp.zero3_compute_copy_bytes, inp.hbm_rate), 0.0
    )


def _collective_calls(
    inp: StepInputs,
    group: GradientGroup,
    params: Num,
    bucket: Num,
    per_call: Num,
    share: Num = 1.0,
) -> dict:
    """(collective, bytes per call, calls) of each call kind for one gradient group: gradients
    reduced in their dtype (grad_reduce_bytes) in ``bucket`` calls, weights gathered in their dtype (or in
    fp8, param_gather_bytes, where an fp8 run gathers its fp8 primary weights);
    ZeRO-3's per-block gather and reduce-scatter carry ``per_call`` of the group's parameters on the stage, and
    each of the stage's block calls holds ``share`` of one (``zero3_group_calls``)."""
    grad_bytes, weight_bytes = params * inp.grad_reduce_bytes, params * inp.param_gather_bytes
    return {
        "all_reduce": (group.all_reduce, grad_bytes / maximum(bucket, 1.0), bucket),
        "reduce_scatter": (group.reduce_scatter, grad_bytes / maximum(bucket, 1.0), bucket),
        "all_gather": (group.all_gather, weight_bytes / maximum(bucket, 1.0), bucket),
        "layer_gather": (group.all_gather, weight_bytes * per_call, share),  # one block's gather
        "layer_reduce": (group.reduce_scatter, grad_bytes * per_call, share),
    }


def _zero3_exposure_s(
    inp: StepInputs,
    traffic: _Traffic,
    calls: Num,
    per_call: Num,
    windows: tuple[Num, Num],
    slack: Num,
) -> Num:
    """ZeRO-3's exposed traffic per step: m × the per-micro-batch exposure of the block-wise gathers
    and reduce-scatters (step.zero3_legacy.zero3_exposure_s, prefetching ``zero3_prefetch_layers``
    blocks in the forward and ``zero3_backward_prefetch_layers`` in the backward, step.inputs.zero3_prefetch_depths,
    when param-gather overlap is on), or under pipeline parallelism where the runtime keeps the stage's
    layers gathered (``zero3_pp_keeps_layers``) those collectives once per step (``zero3_pp_once_s``), plus the
    persistent tensors' gather and m × the runtime's copies on the compute stream (cost.runtimes: FSDP2's
    copy-out and reduce-scatter copy-in; under PP they stand for the per-micro-batch cast and sum into the fp32
    unsharded accumulator, step.stage_memory.gradient_bytes_per_param: p + r then p + 2r bytes per parameter
    against 2G·p + p + r, within a quarter), plus the host time of per-tensor reduce-scatters that the block's
    backward does not hide. ``windows``: one micro-batch's (forward, backward) windows; ``slack``: the stage's
    drain slack (``drain_slack_s``)."""
    time, price = traffic.time, traffic.price
    g, r = time["layer_gather"], time["layer_reduce"]
    forward_window, backward_window = windows
    on = where(inp.knobs.overlap_param_gather, 1.0, 0.0)
    forward_depth, backward_depth = zero3_prefetch_depths(inp)
    depth = forward_depth * on
    per_microbatch = legacy.zero3_exposure_s(
        calls,
        per_call,
        (depth, backward_depth * on),
        (g, price["layer_gather"]),
        (r, price["layer_reduce"]),
        traffic.forward_delta,
        traffic.regather,
        forward_window,
        backward_window,
    )
    collectives = inp.microbatches * per_microbatch
    if any_positive(inp.zero3_pp_keeps_layers):
        once = zero3_pp_once_s(traffic, calls, per_call, depth, forward_window, slack)
        collectives = where(zero3_pp_keeps(inp), once, collectives)
    exposed = collectives + traffic.persistent + inp.microbatches * traffic.compute_copy
    if any_positive(traffic.reduce_host):  # issued while the block's backward runs
        exposed = exposed + inp.microbatches * calls * host_exposed_s(
            traffic.reduce_host, backward_window * per_call + r
        )
    return exposed


def zero3_pp_once_s(
    traffic: _Traffic, calls: Num, per_call: Num, depth: Num, forward_window: Num, slack: Num
) -> Num:
    """Exposed ZeRO-3 traffic per step of a pipeline stage whose runtime keeps its layers gathered from the first
    forward to the last backward and reduces once (torchtitan's FSDP2 under PP): each block gathered once, in
    the first micro-batch's forward (prefetched against it, cost.overlap.prefetched_gather_exposed_s), and
    reduce-scattered once, after the stage's last backward, in series, hidden only by the drain ``slack``
    (``after_slack_s``); what is hidden at its price (cost.comm.priced_exposure_s):
    exposed = gathers(g, forward/L, L, d) + max(0, L·r − slack), L blocks of gather g and reduce-scatter r.

    torchtitan wraps each TransformerBlock with reshard_after_forward=False under PP (parallelize_llama.py
    apply_fsdp at 9dec370: "For PP, do not reshard after forward to avoid per-microbatch all-gathers"), so the
    later micro-batches' forwards and every backward find the block gathered; torch.distributed.pipelining
    runs every backward with set_reshard_after_backward(False) and set_requires_gradient_sync(False) and, after
    the last, calls each group's post_backward (reduce-scatter, then reshard) itself
    (torch/distributed/pipelining/stage.py ``backward_maybe_with_nosync``, pytorch/pytorch#134052, Aug 2024):
    one all-gather and one reduce-scatter per block and step, the latter issued only after the stage's last
    backward has run."""
    time, price = traffic.time, traffic.price
    g, r = time["layer_gather"], time["layer_reduce"]
    exposed = prefetched_gather_exposed_s(
        g, forward_window * per_call, calls, depth
    ) + after_slack_s(calls * r, slack)
    return priced_exposure_s(
        calls * (g + r), exposed, calls * (price["layer_gather"] + price["layer_reduce"])
    )
