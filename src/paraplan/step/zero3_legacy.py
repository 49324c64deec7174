"""ZeRO-3 as DeepSpeed ran it in 2021 (profile deepspeed-2021; microsoft/DeepSpeed v0.3.14, 0cd9abf,
deepspeed/runtime/zero/partition_parameters.py and stage3.py), for ``step.tail.tail_terms``:

- every parameter is gathered by its own ``_allgather_param`` call (plan field ``zero3_gather_unit: tensor``) after
  a device synchronize, except the persistent ones (under ``stage3_param_persistence_threshold``, 1e5 elements),
  which stay gathered and are gathered once per step by ``_post_step``'s coalesced ``_allgather_params``;
- every gradient is reduce-scattered by its own ``_reduce_scatter_gradient`` call (``zero3_reduce_unit: tensor``);
- with full recomputation every layer's weights are gathered again for the recomputed forward
  (``zero3_regather_recompute``): sub-modules release their weights after use.

The blocks are StepInputs' BlockCost entries (step/inputs.py); ``stage`` and ``inp`` are read by attribute. Each term is zero unless its plan field turns it on."""

from __future__ import annotations

from typing import Any

import numpy as np

from paraplan.cost.comm import per_tensor_gather_latency_s, priced_exposure_s
from paraplan.cost.zero3_host import (
    coalesced_gather_copy_back_s,
    gather_buffer_zeroing_s,
    gather_call_host_overhead_s,
    list_gather_copies_s,
    list_reduce_scatter_device_s,
    list_reduce_scatter_host_s,
    rank_loop_views_s,
)
from paraplan.cost.overlap import prefetched_gather_exposed_s
from paraplan.step.inputs import sum_blocks

Num = Any


def small_count(block: Any) -> Num:
    """How many persistent tensors a block holds: its ``small_numels`` entries (a tuple, or in the search a candidates ×
    width array padded with zeros, arrays.stack)."""
    numels = np.asarray(block.small_numels, dtype=float)
    return np.sum(numels > 0, axis=-1) * 1.0 if numels.size else 0.0


def add_pair(total: tuple | None, more: tuple | None) -> tuple | None:
    """Sum of two (time, price) pairs, None standing for a term that is not there."""
    if more is None:
        return total
    return more if total is None else (total[0] + more[0], total[1] + more[1])


def tensor_gather_host_s(ranks: Num, tensors: Num, size: Num, inp: Any) -> Num:
    """What a block's gather issued per weight tensor adds beside the collectives' latency, ``tensors`` calls moving
    ``size`` bytes in all (``_allgather_param``): the list copies (cost.zero3_host.list_gather_copies_s), the Python loop over
    the ranks (rank_loop_views_s, one view each), the zeroed buffer (gather_buffer_zeroing_s) and the measured fixed
    host time per call (gather_call_host_overhead_s)."""
    return (
        list_gather_copies_s(ranks, tensors, size, inp.kernel_overhead_s, inp.hbm_rate)
        + rank_loop_views_s(ranks, tensors, 1.0)
        + gather_buffer_zeroing_s(size, inp.hbm_rate)
        + gather_call_host_overhead_s(tensors, inp.kernel_overhead_s)
    )


def gathered_per_block(stage: Any) -> tuple[Num, Num]:
    """(weight tensors, persistent tensors) per block on average over the stage's blocks."""
    per_call = 1.0 / np.maximum(sum_blocks(stage, lambda b: 1.0), 1.0)
    return sum_blocks(stage, lambda b: b.weight_tensors) * per_call, sum_blocks(
        stage, small_count
    ) * per_call


def tensor_gather_terms(
    form: Any, size: Num, ranks: Num, stage: Any, inp: Any, group_name: str = "dense"
) -> tuple[Num, Num, tuple | None, Num]:
    """(time, price) a block's gather adds when issued per tensor, the forward's extra (time, price) or None, and the
    step's persistent gather. The persistent tensors stay gathered from the previous step's coalesced gather through
    the first micro-batch and from each later micro-batch's forward through its backward, so a block gathers its
    other G tensors (G − 1 extra calls of the same collective), the forward of micro-batches 2..m its P persistent
    ones as well: G + P·(m−1)/m calls on average."""
    per_tensor = np.where((ranks > 1) & (size > 0), inp.zero3_tensor_gathers, 0.0)
    tensors, small = gathered_per_block(stage)
    gathered = tensors - small
    host = tensor_gather_host_s(ranks, gathered, size, inp)
    time = per_tensor * (per_tensor_gather_latency_s(form, gathered - 1.0) + host)
    price = per_tensor * (per_tensor_gather_latency_s(form, gathered - 1.0, priced=True) + host)
    if not (np.any(np.asarray(per_tensor) > 0) and np.any(np.asarray(small) > 0)):
        return time, price, None, 0.0
    more = small * (inp.microbatches - 1.0) / np.maximum(inp.microbatches, 1.0)
    extra_host = tensor_gather_host_s(ranks, gathered + more, size, inp) - host
    forward = (
        per_tensor * (per_tensor_gather_latency_s(form, more) + extra_host),
        per_tensor * (per_tensor_gather_latency_s(form, more, priced=True) + extra_host),
    )
    return (
        time,
        price,
        forward,
        per_tensor * persistent_gather_s(stage, form, ranks, inp, group_name),
    )


def tensor_reduce_terms(
    form: Any, size: Num, ranks: Num, stage: Any, inp: Any
) -> tuple[Num, Num, Num]:
    """(time, price, host seconds) a block's reduce-scatter adds when issued per gradient tensor: T − 1 extra calls'
    latency and the HBM passes (cost.zero3_host.list_reduce_scatter_device_s) on the GPU, and the host time to issue the T
    calls (list_reduce_scatter_host_s), which the block's backward can hide (cost.zero3_host.host_exposed_s)."""
    per_tensor = np.where((ranks > 1) & (size > 0), inp.zero3_tensor_reduces, 0.0)
    tensors, _ = gathered_per_block(stage)
    passes = list_reduce_scatter_device_s(size, inp.hbm_rate)
    time = per_tensor * (per_tensor_gather_latency_s(form, tensors - 1.0) + passes)
    price = per_tensor * (per_tensor_gather_latency_s(form, tensors - 1.0, priced=True) + passes)
    return (
        time,
        price,
        per_tensor * list_reduce_scatter_host_s(ranks, tensors, inp.kernel_overhead_s),
    )


def regather_s(stage: Any, group_name: str, form: Any, ranks: Num, inp: Any) -> tuple[Num, Num]:
    """(time, price) per micro-batch of gathering again, for the recomputed forward, the weights of the blocks whose
    forward is re-run in full: B gathers of the same collective as the block gathers (per non-persistent weight tensor
    when zero3_tensor_gathers). DeepSpeed v0.3.13-v0.3.16 releases every sub-module's weights after its forward
    (stage3.py ``release_sub_module``: the reuse-distance keep and the prefetch read a trace whose step ids are off by
    one, microsoft/DeepSpeed issue #1069), so Megatron's checkpointed layers are gathered in forward, recompute and
    backward."""
    blocks = sum_blocks(stage, lambda b: b.regathered)
    params = sum_blocks(
        stage, lambda b: b.params * b.regathered if b.gradient_group == group_name else 0.0
    )
    tensors = sum_blocks(
        stage, lambda b: (b.weight_tensors - small_count(b)) * b.regathered
    ) / np.maximum(blocks, 1.0)
    size = params * inp.param_gather_bytes / np.maximum(blocks, 1.0)  # as the block gathers
    per_tensor = np.where(size > 0, inp.zero3_tensor_gathers, 0.0)
    extra = tensors - 1.0
    host = tensor_gather_host_s(ranks, tensors, size, inp)
    time = blocks * (
        form.time_s(size) + per_tensor * (per_tensor_gather_latency_s(form, extra) + host)
    )
    price = blocks * (
        form.hidden_price_s(size)
        + per_tensor * (per_tensor_gather_latency_s(form, extra, priced=True) + host)
    )
    return np.where(size > 0, time, 0.0), np.where(size > 0, price, 0.0)


def persistent_gather_s(
    stage: Any, form: Any, ranks: Num, inp: Any, group_name: str = "dense"
) -> Num:
    """Seconds per step of DeepSpeed's gather of the persistent tensors after the optimizer step (stage3.py ``_post_step``
    → ``_allgather_params``): one all-gather (its latency, its list copies, its n partition views) whose result is
    copied back tensor by tensor in a Python loop over the ranks holding a piece (coalesced_gather_copy_back_s); the
    gathered bytes (biases and norms) are left out. The tensors of the blocks that ``group_name`` reduces: each
    gradient group gathers its own."""
    mine = [b for b, _ in stage.blocks if b.gradient_group == group_name]
    if not any(np.any(small_count(b) > 0) for b in mine):
        return 0.0
    copy_back = sum_blocks(
        stage,
        lambda b: (
            coalesced_gather_copy_back_s(ranks, b.small_numels, inp.kernel_overhead_s)
            if b.gradient_group == group_name
            else 0.0
        ),
    )
    return (
        per_tensor_gather_latency_s(form, 1.0)
        + list_gather_copies_s(ranks, 1.0, 0.0, inp.kernel_overhead_s, inp.hbm_rate)
        + rank_loop_views_s(ranks, 1.0, 1.0)
        + copy_back
    )


def zero3_exposure_s(
    calls: Num,
    per_call: Num,
    depths: tuple[Num, Num],
    gather: tuple,
    reduce: tuple,
    forward_delta: tuple | None,
    regather: tuple | None,
    forward_window: Num,
    backward_window: Num,
) -> Num:
    """Exposed ZeRO-3 traffic of one micro-batch: ``calls`` block gathers in forward and in backward and block
    reduce-scatters, each direction's against its window at its own prefetch depth (``depths``: forward, backward;
    cost.overlap.prefetched_gather_exposed_s): exposed = gathers(g_f, forward/L, L, d_f) + gathers(g + r,
    backward/L, L, d_b), so at d_b = 0 (FSDP1's backward_prefetch None: the next all-gather is issued only when
    the block's backward needs it, behind the reduce-scatter on the one NCCL stream) every backward gather and
    reduce-scatter waits, L·(g + r), plus what is hidden at its price. ``gather`` and ``reduce`` are one
    block's (time, price); the forward's gathers may cost ``forward_delta`` more (persistent re-gathers), and
    the recompute's gathers (``regather``, for the whole stage) sit in the backward window, per block on
    average."""
    (g, g_price), (r, r_price) = gather, reduce
    forward_depth, backward_depth = depths
    if regather is None and forward_delta is None:  # each block gathered once per direction, alike
        return priced_exposure_s(
            calls * (2.0 * g + r),
            prefetched_gather_exposed_s(g, forward_window * per_call, calls, forward_depth)
            + prefetched_gather_exposed_s(g + r, backward_window * per_call, calls, backward_depth),
            calls * (2.0 * g_price + r_price),
        )
    regather, forward_delta = regather or (0.0, 0.0), forward_delta or (0.0, 0.0)
    g_f, g_rc = g + forward_delta[0], regather[0] * per_call
    return priced_exposure_s(
        calls * (g_f + g + r + g_rc),
        prefetched_gather_exposed_s(g_f, forward_window * per_call, calls, forward_depth)
        + prefetched_gather_exposed_s(
            g + r + g_rc, backward_window * per_call, calls, backward_depth
        ),
        calls * (2.0 * g_price + forward_delta[1] + r_price) + regather[1],
    )
