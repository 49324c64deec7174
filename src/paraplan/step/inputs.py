"""What the step composition reads: stages of blocks, the plan's knobs, :class:`StepInputs`, and
the sums over a stage's blocks (its per-micro-batch work by part, its parameters per gradient group).

Every function here is plain arithmetic that works the same on Python floats and on numpy arrays
(one element per candidate plan).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from paraplan.cost.comm import LinearCollective
from paraplan.cost.elementwise import any_positive, is_array, maximum, where, where_all
from paraplan.specs.system import OPTIMIZER_BYTES_PER_PARAM
from paraplan.step.block_terms import BLOCK_TERM_NAMES, BlockCost
from paraplan.step.blocks import TRANSFORMER_KINDS  # kinds Korthikanti et al. 2022 Fig. 1 counts

Num = Any  # float or numpy array, broadcastable

# Bytes per parameter in the data-parallel gradient reduction: Megatron-LM reduces its fp32 main
# gradients (4 B/param, as in Korthikanti et al. 2022's memory accounting).
GRAD_REDUCE_BYTES = 4.0


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
    arrays): schedule, ZeRO stage, DP overlap switches, offloads. The pipeline schedule is one
    flag per step.schedules entry (its ``flag``; 1F1B, the default, has none), vpp its chunks."""

    vpp: Num
    interleaved: Num
    gpipe: Num
    zero: Num
    overlap_dp_grad_reduce: Num
    overlap_param_gather: Num
    offload_weights: Num
    offload_activations: Num
    offload_optimizer: Num
    zb: Num = False  # ZB-H1 (step.schedules.SCHEDULES["zb-h1"].flag)
    dualpipe: Num = False  # DualPipe (step.schedules.SCHEDULES["dualpipe"].flag)
    offload_activation_layers: Num = (
        0  # with offload_activations: decoder layers per stage offloaded (0: all)
    )


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
    # bytes per parameter of the data-parallel weight all-gathers: the compute copy's (the weights' own, or the
    # compute dtype's where fp32 parameters are cast before the gather), or 1 where an fp8 run gathers its fp8
    # primary weights (step.constants.runtime_terms; no default: every builder states it)
    param_gather_bytes: Num
    # bytes per parameter of the unsharded weight copy a ZeRO-3 gather holds of the transformer layers
    # (cost.memory.compute_copy_bytes: the weights' own, or the compute dtype's where fp32 parameters are cast
    # before the gather; 1 where an fp8 run gathers its fp8 weights) and of the blocks outside them (the compute
    # copy's: the embedding and LM head are never fp8) (step.constants.runtime_terms)
    gathered_weight_bytes: Num
    gathered_outside_bytes: Num
    zero3_prefetch_layers: Num = (
        1.0  # blocks whose ZeRO-3 weights are gathered ahead (FSDP2 / DeepSpeed: 1)
    )
    # blocks gathered ahead in the backward (FSDP1's backward_prefetch None: 0); None: the forward's depth
    zero3_backward_prefetch_layers: Num | None = None
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
    optimizer_step_bytes: Num = OPTIMIZER_BYTES_PER_PARAM  # per owned parameter (efficiency)
    host_step_s: Num = (
        0.0  # fixed host seconds of the optimizer step (cost.host.step_host_overhead_s)
    )
    host_tensor_s: Num = 0.0  # host seconds per weight tensor of the optimizer step and zero_grad
    launch_blocking: Num = 0.0  # 1: synchronous kernel launches (efficiency.launch_blocking)
    tied_sync_s: Num = 0.0  # after every stage's tail: the tied-embedding all-reduce (step.p2p)
    # the stack's runtime costs (specs.runtime, step.constants.runtime_terms): bytes per parameter and
    # micro-batch of the gradient accumulation, and ZeRO-3's copies (per gathered parameter and micro-batch on
    # the compute stream; per shard element of each gather and reduce-scatter on their streams)
    grad_accumulation_bytes: Num = 0.0
    # of which the step's first micro-batch saves (cost.runtimes.accumulation_bytes_per_microbatch:
    # DeepSpeed's optimizers, step.constants.zero_accumulation_bytes); 0 elsewhere
    grad_accumulation_first_saving_bytes: Num = 0.0
    # the same per parameter of the GPU's gradient partition (DeepSpeed's ZeRO 2); 0 elsewhere
    grad_accumulation_owned_bytes: Num = 0.0
    grad_accumulation_owned_first_saving_bytes: Num = 0.0
    zero3_compute_copy_bytes: Num = 0.0
    zero3_gather_copy_bytes: Num = 0.0
    zero3_reduce_copy_bytes: Num = 0.0
    zero3_reduce_unsharded_bytes: Num = (
        0.0  # per gathered parameter before each reduce-scatter (FSDP1)
    )
    p2p_overlap: Num = 0.0  # 1: the interleaved schedule's transfers overlap compute (step.p2p)
    batch_sync_s: Num = 0.0  # GPU idle per micro-batch on the first and last stage (cost.runtimes.batch_sync_idle_s)
    fp8_weight_quant_bytes: Num = 0.0  # per transformer-layer weight and step (cost.quantisation)
    lazy_gradients: Num = 0.0  # 1: gradients allocated during backward (cost.memory.peak_residents)
    zero3_root_held: Num = 0.0  # 1: ZeRO-3's root blocks stay gathered (step.stage_memory)
    zero3_pp_keeps_layers: Num = 0.0  # 1: under PP every stage layer stays gathered (the same)
    zero2_reduce_per_microbatch: Num = (
        0.0  # 1: ZeRO-2 reduces each micro-batch (step.tail.zero2_reduces)
    )
    # share of the SMs left to compute in DualPipe's overlapped pair (step.dualpipe.pair_compute_share)
    pair_compute_share: Num = 1.0
    # (a ZeRO-0 candidate's gradient terms, the others') where they differ (step.constants.at_zero_stage), kept to
    # resolve those fields again under other ZeRO stages (step.layout.with_knobs); () where none differ
    zero_stage_terms: tuple = ()


def replaced(record, **changes):
    """``dataclasses.replace(record, **changes)`` of a frozen record of this package (Stage, StepInputs,
    BlockCost: every field an init field, no __post_init__, its values in its ``__dict__``), without
    replace's walk over the fields: the same record, built by its __init__ from the same values."""
    return record.__class__(**{**record.__dict__, **changes})


def absent_everywhere(stage: Stage) -> bool:
    """Whether a Stage entry of the search (its count an array, one element per candidate) is absent (count 0)
    from every candidate: whatever the composition takes of it is masked out everywhere."""
    return is_array(stage.count) and not any_positive(stage.count)


def sum_blocks(stage: Stage, value, kinds: tuple[str, ...] | None = None) -> Num:
    """Σ over the stage's blocks (of ``kinds``, default all) of count × value(block)."""
    total = 0.0
    if kinds is None:
        for block, n in stage.blocks:
            total = total + n * value(block)
        return total
    for block, n in stage.blocks:
        if block.kind in kinds:
            total = total + n * value(block)
    return total


def transformer_layers(stage: Stage) -> Num:
    """Decoder layers (transformer blocks, every chunk) one GPU of the stage runs."""
    return sum_blocks(stage, lambda b: 1.0, TRANSFORMER_KINDS)


def zero3_pp_keeps(inp: StepInputs) -> Num:
    """True (elementwise) where a ZeRO-3 runtime keeps every layer of a pipeline stage gathered from its
    first forward to its last backward (pp > 1 and ``zero3_pp_keeps_layers``: torchtitan's FSDP2 under PP,
    reshard_after_forward=False; specs.runtime.StackRuntimeFields.zero3_pp_reshard): the one condition of
    the gathered layers (step.stage_memory.zero3_gathered_bytes), the unsharded gradients
    (stage_memory.gradient_bytes_per_param) and the once-per-step collectives (step.tail.zero3_pp_once_s)."""
    return (inp.pp > 1) & (inp.zero3_pp_keeps_layers > 0)


def zero3_prefetch_depths(inp: StepInputs) -> tuple[Num, Num]:
    """(forward, backward) ZeRO-3 prefetch depths of ``inp``, in blocks gathered ahead: ``zero3_prefetch_layers``
    and ``zero3_backward_prefetch_layers``, the forward's where the backward states none (None, every profile
    but one: specs.plan.RuntimeFields). The one reading of the backward's default, for the exposure
    (step.tail) and the gathered weights resident (step.stage_memory.zero3_gathered_bytes)."""
    backward = inp.zero3_backward_prefetch_layers
    forward = inp.zero3_prefetch_layers
    return forward, (forward if backward is None else backward)


def transformer_params(stage: Stage) -> Num:
    """Parameters per GPU of the stage's transformer blocks (decoder layers, every chunk)."""
    return sum_blocks(stage, lambda b: b.params, TRANSFORMER_KINDS)


def max_blocks(stage: Stage, value, kinds: tuple[str, ...] | None = None) -> Num:
    """Largest value over the blocks the stage holds at least once (0 when none)."""
    best = 0.0
    for block, n in stage.blocks:
        if kinds is None or block.kind in kinds:
            best = maximum(best, where(n > 0, value(block), 0.0))
    return best


def stage_work(stage: Stage, split_backward: Num = False) -> dict[str, Num]:
    """Per-micro-batch seconds of one stage by part (BlockTerms names + "pp"), summed over its blocks.
    Where ``split_backward`` (a split-backward schedule runs: step.schedules.split_backward_on), the
    backward TP communication the deferred weight-gradient GEMMs no longer hide (BlockTerms.tp_deferred)
    joins ``tp_backward``."""
    sums = [0.0] * len(
        BLOCK_TERM_NAMES
    )  # one pass over the blocks, each part summed in block order
    deferred = 0.0
    for block, n in stage.blocks:
        for i, value in enumerate(_block_term_values(block.terms)):
            sums[i] = sums[i] + n * value
        if split_backward is not False:
            deferred = deferred + n * block.terms.tp_deferred
    parts = dict(zip(BLOCK_TERM_NAMES, sums))
    if split_backward is not False:
        parts["tp_backward"] = parts["tp_backward"] + where(split_backward, deferred, 0.0)
    parts["pp"] = stage.p2p_s
    return parts


_block_term_values = attrgetter(
    *BLOCK_TERM_NAMES
)  # BlockTerms -> its values in BLOCK_TERM_NAMES order


def work_total(parts: dict[str, Num]) -> Num:
    """The sum of a stage's per-micro-batch parts (``stage_work``), in their order."""
    total = 0.0
    for v in parts.values():
        total = total + v
    return total


def forward_s(work: dict[str, Num]) -> Num:
    """F: a stage's per-micro-batch forward window — compute plus the exposed forward TP, CP and EP
    communication (``stage_work`` parts); the window the weight all-gather hides in (step/tail.py)
    and the F of the split-backward schedules (step/schedules.py)."""
    return work["forward"] + work["tp_forward"] + work["cp_forward"] + work["ep_forward"]


def backward_s(work: dict[str, Num]) -> Num:
    """B: a stage's per-micro-batch backward — compute, recomputation and the exposed backward TP,
    CP and EP communication (``stage_work`` parts; the pipeline sends not included)."""
    return (
        work["backward"]
        + work["recompute"]
        + work["tp_backward"]
        + work["cp_backward"]
        + work["ep_backward"]
    )


def stage_params(stage: Stage, group: str, kinds: tuple[str, ...] | None = None) -> Num:
    """Parameters per GPU of the stage (of its blocks of ``kinds``, default all) that ``group`` reduces."""
    return sum_blocks(stage, lambda b: b.params if b.gradient_group == group else 0.0, kinds)


def shard_ways(inp: StepInputs, group: GradientGroup, from_zero: int) -> Num:
    """How many ways ZeRO shards a state over the group: its size from stage ``from_zero`` on, else 1."""
    return where(inp.knobs.zero >= from_zero, group.size, 1)


def calls_of(stage: Stage) -> Num:
    """ZeRO-3 block calls of a stage: one gather and one reduce-scatter per block, each block its own unit."""
    return sum_blocks(stage, lambda b: 1.0)


def zero3_group_calls(stage: Stage, name: str, calls: Num, per_call: Num) -> tuple[Num, Num]:
    """(share, per group call) of gradient group ``name``'s ZeRO-3 collectives on a stage of L = ``calls`` block
    calls (``per_call`` = 1/L): the group gathers and reduce-scatters once per block it holds, n_g calls of
    P_g/n_g parameters each, so each block call carries share = n_g/L of one group collective of 1/n_g of the
    group's parameters (the L calls then issue n_g collectives, n_g latencies: time = n_g·(P_g·a/n_g + l) =
    P_g·a + n_g·l). A group every block holds (every dense model) gives (1, 1/L): one collective per call.

    A MoE layer of torchtitan under FSDP2 with EP is two units: apply_fsdp (torchtitan/models/llama4/infra/
    parallelize.py and models/deepseek_v3/infra/parallelize.py at 7e4ab859, 2025-12-29) wraps
    ``transformer_block.moe.experts`` with fully_shard on the expert-data-parallel mesh (``edp_mesh``, "efsdp":
    the routed experts, which EP already shards on dim 0) and the TransformerBlock (attention, router, shared
    experts, norms) on the dense ``dp_mesh``: per MoE layer one gather of each group, not one of each per block
    of the stage (the routed ``experts`` block and the MoE layer are two of its blocks: step.blocks.BLOCK_KINDS)."""
    own = sum_blocks(stage, lambda b: 1.0 if b.gradient_group == name else 0.0)
    same = own == calls
    share = where_all(same, 1.0, own / maximum(calls, 1.0))
    return share, where_all(same, per_call, 1.0 / maximum(own, 1.0))
