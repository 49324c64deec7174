"""DeepSpeed's BF16_Optimizer's own data-parallel traffic, read by step.tail.tail_terms.

Where DeepSpeed runs its BF16_Optimizer (specs.rules_stack.runs_bf16_optimizer: zero 0, and zero 1 with fp32
gradients and the optimizer on the GPU), the step's data-parallel traffic is the optimizer's, not ZeRO's:

- the whole gradient is all-reduced: the PipelineEngine's ReduceGrads runs _bf16_reduce_grads →
  buffered_allreduce_fallback over the optimizer's get_grads_for_reduction (deepspeedai/DeepSpeed at 0050fdad,
  deepspeed/runtime/pipe/engine.py 276-287, runtime/engine.py 2452-2463), and DeepSpeedEngine.allreduce_gradients
  takes the same fallback where the optimizer has no reduce_gradients (specs.rules_stack.runs_bf16_optimizer);
- the optimizer steps over its fp32 partition of the flat groups (one of dp: runtime/bf16_optimizer.py
  __init__, partition_size = numel // real_dp_world_size) and then all-gathers the bf16 weights over the
  data-parallel group (step → update_lp_params → runtime/utils.py all_gather_dp_groups, 421-434 and 996-1031),
  synchronously, after the update: nothing overlaps it.

So ZeRO 1's reduce-scatter becomes an all-reduce and the gather gets no overlap window, and ZeRO 0's
all-reduce is followed by that all-gather (at the weights' bytes, as ZeRO 1's).

Its state is ZeRO 1's also at ZeRO 0 (``optimizer_shard_ways``): the fp32 master and the moments over
one of dp, the bf16 weights and the fp32 gradients whole.
"""

from __future__ import annotations

from typing import Any

from paraplan.cost.elementwise import where
from paraplan.cost.runtimes import (
    bf16_optimizer_clear_bytes,
    bf16_optimizer_norm_bytes,
    deepspeed_allreduce_copy_bytes,
    runtime_copy_s,
)
from paraplan.specs.rules_stack import runs_bf16_optimizer
from paraplan.step.inputs import GradientGroup, Stage, StepInputs, shard_ways, stage_params

Num = Any

# the call kinds of step.tail.ZERO_COLLECTIVES the optimizer's traffic reads
BF16_OPTIMIZER_KINDS = ("all_reduce", "all_gather")


def _stack_may_run_it(inp: StepInputs) -> bool:
    """Whether the run's stack and dtype take the BF16_Optimizer on some ZeRO stage: its terms
    (step.constants.zero0_terms, the first of StepInputs.zero_stage_terms) are not empty."""
    return bool(inp.zero_stage_terms) and bool(inp.zero_stage_terms[0])


def bf16_optimizer_kinds(inp: StepInputs) -> tuple[str, ...]:
    """The data-parallel call kinds step.tail._dp_traffic must cost beside its ZeRO branches' for the
    BF16_Optimizer's traffic: both where the stack may run it on some candidate (``_stack_may_run_it``),
    none elsewhere."""
    return BF16_OPTIMIZER_KINDS if _stack_may_run_it(inp) else ()


def bf16_optimizer_runs(inp: StepInputs) -> Num:
    """Whether each candidate runs the BF16_Optimizer (specs.rules_stack.runs_bf16_optimizer at its ZeRO stage
    and optimizer offload); False where the stack never does (``_stack_may_run_it``)."""
    if not _stack_may_run_it(inp):
        return False
    return runs_bf16_optimizer(inp.knobs.zero, inp.zero_stage_terms[2], inp.knobs.offload_optimizer)


def bf16_optimizer_traffic(inp: StepInputs, time: dict, price: dict, gather_window: Num) -> tuple:
    """(gather window, seconds after the step at ZeRO 0) under the BF16_Optimizer's traffic (module
    docstring): where it runs, ``time`` / ``price`` (step.tail._Traffic's, per call kind) take the
    all-reduce in place of ZeRO 1's reduce-scatter, the weights' all-gather gets no window (0 s), and a
    ZeRO 0 candidate adds that all-gather, wholly exposed (AG_dp(P_stage · weight bytes)); elsewhere
    ``gather_window`` and 0."""
    runs = bf16_optimizer_runs(inp)
    if runs is False or "all_gather" not in time:
        return gather_window, 0.0
    if "reduce_scatter" in time:
        time["reduce_scatter"] = where(runs, time["all_reduce"], time["reduce_scatter"])
        price["reduce_scatter"] = where(runs, price["all_reduce"], price["reduce_scatter"])
    return where(runs, 0.0, gather_window), where(runs, time["all_gather"], 0.0)


def optimizer_shard_ways(inp: StepInputs, group: GradientGroup) -> Num:
    """How many ways the optimizer state (fp32 master + moments, cost.memory.state_bytes_per_param's
    ``optimizer``) and the optimizer step of gradient group ``group`` are split: ZeRO's, from stage 1
    (step.inputs.shard_ways), and the group's size wherever the BF16_Optimizer runs
    (``bf16_optimizer_runs``), at ZeRO 0 too.

    BF16_Optimizer._setup_for_real_optimizer (deepspeedai/DeepSpeed at 0050fdad,
    deepspeed/runtime/bf16_optimizer.py 112-182): per parameter group it flattens the bf16 weights
    whole (bf16_groups_flat, 125-131), splits them into real_dp_world_size partitions of
    numel // real_dp_world_size (133-139; the data-parallel group, the expert one for MoE groups,
    _configure_moe_settings 97-106), keeps an fp32 copy of its own partition only
    (fp32_groups_flat_partition, 141-143) and hands the wrapped optimizer that partition alone
    (``param_group['params'] = [self.fp32_groups_flat_partition[i]]``, 181-182), so Adam's moments
    (created at the wrapped optimizer's first step, over its params) and its update
    (``self.optimizer.step()`` in step, 279-312) cover 1/dp of the parameters; the fp32 gradients are
    kept whole (fp32_groups_gradients_flat = zeros_like(bf16_groups_flat), 147-149:
    step.constants.zero0_terms' ``grad_bytes``, unsharded below ZeRO 2)."""
    runs = bf16_optimizer_runs(inp)
    zero_ways = shard_ways(inp, group, 1)
    if runs is False:
        return zero_ways
    return where(runs, group.size, zero_ways)


def _unowned_params(inp: StepInputs, stage: Stage, owned: Num) -> Num:
    """P − ``owned``, P the stage's parameters per GPU over its gradient groups, where the candidate runs
    the BF16_Optimizer (``bf16_optimizer_runs``), which keeps its fp32 gradient whole; 0 elsewhere."""
    runs = bf16_optimizer_runs(inp)
    if runs is False:
        return 0.0
    params = sum(stage_params(stage, name) for name in inp.gradient_groups)
    return where(runs, params - owned, 0.0)


def bf16_optimizer_norm_extra_bytes(inp: StepInputs, stage: Stage, owned: Num) -> Num:
    """HBM bytes the BF16_Optimizer's gradient norm reads per step on ``stage`` beyond the one norm read
    per ``owned`` parameter that StepInputs.optimizer_step_bytes counts: (P − owned) ·
    cost.runtimes.bf16_optimizer_norm_bytes (4 B), P the stage's parameters per GPU over its gradient
    groups, where the candidate runs the BF16_Optimizer (``_unowned_params``); 0 elsewhere. Its norm
    reads the whole fp32 gradient, which it keeps unsharded, not only the partition it steps
    (runtime/bf16_optimizer.py step and get_grads_for_norm at 0050fdad)."""
    return _unowned_params(inp, stage, owned) * bf16_optimizer_norm_bytes()


def bf16_optimizer_clear_extra_bytes(inp: StepInputs, stage: Stage, owned: Num) -> Num:
    """HBM bytes the BF16_Optimizer's ``clear_hp_grads`` writes per step on ``stage`` beyond the one
    gradient-buffer zeroing per ``owned`` parameter that StepInputs.optimizer_step_bytes counts (the
    default's "zero the fp32 grad buffer", specs.system.OPTIMIZER_BYTES_PER_PARAM): (P − owned) ·
    cost.runtimes.bf16_optimizer_clear_bytes (4 B) where the candidate runs the BF16_Optimizer
    (``_unowned_params``); 0 elsewhere. It zeroes the whole fp32 gradient after every step
    (runtime/bf16_optimizer.py 312, 436-440 at 0050fdad)."""
    return _unowned_params(inp, stage, owned) * bf16_optimizer_clear_bytes()


def optimizer_traffic_bytes(inp: StepInputs, stage: Stage, owned: Num) -> Num:
    """HBM bytes of the optimizer step on ``stage``: ``owned`` · StepInputs.optimizer_step_bytes plus the
    BF16_Optimizer's norm over and clearing of the rest of its whole gradient
    (``bf16_optimizer_norm_extra_bytes``, ``bf16_optimizer_clear_extra_bytes``), the device traffic
    step.tail.tail_terms prices."""
    return (
        owned * inp.optimizer_step_bytes
        + bf16_optimizer_norm_extra_bytes(inp, stage, owned)
        + bf16_optimizer_clear_extra_bytes(inp, stage, owned)
    )


def deepspeed_fallback_copies(inp: StepInputs, stage: Stage, time: dict, price: dict) -> tuple:
    """(time, price) of step.tail._Traffic's call kinds with DeepSpeed's fallback all-reduce's copies
    added to the all-reduce's, where the stack runs DeepSpeed's optimizers (StepInputs.zero_stage_terms'
    accumulation cells: step.constants.zero_accumulation_bytes) and the all-reduce is costed: every
    all-reduce of theirs is the fallback (ZeRO 0: DeepSpeedEngine.allreduce_gradients; the
    BF16_Optimizer at ZeRO 1: the PipelineEngine's _bf16_reduce_grads). Per gradient group of size > 1:
    P_group · cost.runtimes.deepspeed_allreduce_copy_bytes(k, c, flat) at the HBM rate, in series with
    the collective on the compute stream (in its time and its hidden price alike), k the kept gradient's
    bytes (StepInputs.grad_bytes), c the reduction's (grad_reduce_bytes), flat where the BF16_Optimizer
    runs (``bf16_optimizer_runs``); ``time`` and ``price`` unchanged elsewhere."""
    if "all_reduce" not in time or not (inp.zero_stage_terms and inp.zero_stage_terms[3]):
        return time, price
    per_param = deepspeed_allreduce_copy_bytes(
        inp.grad_bytes, inp.grad_reduce_bytes, bf16_optimizer_runs(inp)
    )
    copies = 0.0
    for name, group in inp.gradient_groups.items():
        params = stage_params(stage, name)
        copies = copies + where(
            group.size > 1, runtime_copy_s(params, per_param, inp.hbm_rate), 0.0
        )
    return (
        time | {"all_reduce": time["all_reduce"] + copies},
        price | {"all_reduce": price["all_reduce"] + copies},
    )
