"""What a stack's runtime runs, each rule written once (the plan rules' module, specs.rules, has the others):
the ZeRO stages and pipeline schedules of its pipeline engine (a per-stage plan's plan.engine, a uniform plan's
efficiency.runtime.pipeline_engine: the framework profile's), and the parallel kinds its training loop
runs (efficiency.runtime.parallelism, specs.runtime.StackRuntimeFields). The uniform estimate
(step.estimate._system_violations), the per-stage check (specs.stage_plan), the uniform search (search.space
factorizations and layer knobs, search.grid_axes schedule and state options, search.launch.state_allowed)
and the per-stage searches (search.staged.problem.depth_allowed) all ask them.
"""

from __future__ import annotations

import numpy as np

from paraplan.specs.parallel import ParallelDims
from paraplan.specs.runtime import PARALLELISMS

Rule = tuple[str, object, str]  # (field, value, rule) before it becomes a Violation

# the pipeline schedules (with one model chunk per stage, vpp 1) an engine runs with pp > 1; an engine not
# named runs every schedule the plan rules allow (specs.plan, specs.rules)
ENGINE_SCHEDULES = {"deepspeed": ("1f1b",)}


def engine_zero_rule(engine: str, zero: int, pp: int) -> str | None:
    """DeepSpeed's PipelineEngine refuses ZeRO stages that shard gradients: its constructor asserts
    zero_optimization_stage() < ZeroStageEnum.gradients, "ZeRO-2 and ZeRO-3 are incompatible with
    pipeline parallelism" (microsoft/DeepSpeed deepspeed/runtime/pipe/engine.py, PipelineEngine.__init__,
    from v0.3 to 0050fdad): with pp > 1 the deepspeed engine takes zero 0 or 1 only. ``engine``: a per-stage
    plan's plan.engine, a uniform plan's efficiency.runtime.pipeline_engine (its framework profile's). The
    per-stage check (specs.stage_plan), the uniform estimate (step.estimate), the uniform search's state
    options (search.grid_axes, search.launch.state_allowed) and the per-stage searches' pipeline depths
    (search.staged.problem.depth_allowed) all ask it."""
    if engine == "deepspeed" and pp > 1 and zero >= 2:
        return (
            f"DeepSpeed's PipelineEngine (pipeline engine deepspeed) refuses ZeRO-{zero} with pp={pp}; "
            "allowed: zero 0 or 1 (or pp=1)"
        )
    return None


def bf16_optimizer_dtype(dtype: str) -> bool:
    """Whether DeepSpeed's BF16_Optimizer can take a run of ``dtype``: bf16 weights (bf16, and the fp8 / FP4
    recipes over bf16 weights; DeepSpeedEngine has no fp8 path), not fp16 (the FP16 optimizers) nor
    fp32 / tf32 (the basic optimizer): DeepSpeedEngine._do_optimizer_sanity_check returns BFLOAT16 for
    ``model_dtype == torch.bfloat16`` only (deepspeed/runtime/engine.py at 0050fdad). The one reading of
    that dtype test: bf16_optimizer_stack (step.constants.zero0_terms and dp_reduce_fallback)."""
    return dtype not in ("fp16", "fp32", "tf32")


def deepspeed_allreduce_fallback(zero: int, bf16_optimizer_zero1: bool) -> bool:
    """Whether DeepSpeedEngine reduces the data-parallel gradients with ``buffered_allreduce_fallback``
    after the backward returns, so that nothing overlaps the backward: at ZeRO stage ``zero`` 0 (the
    FP16, basic and BF16 optimizers), and at ZeRO 1 where the BF16_Optimizer runs
    (``bf16_optimizer_zero1``: runs_bf16_optimizer's zero-1 case; dp_reduce_fallback decides it).

    deepspeedai/DeepSpeed deepspeed/runtime/engine.py at 0050fdad: DeepSpeedEngine.backward runs
    the optimizer's (or autograd's) backward and only then, under ``enable_backward_allreduce``, calls
    ``allreduce_gradients`` (lines 1974-2000); allreduce_gradients calls
    ``overlapping_partition_gradients_reduce_epilogue`` for ZeRO 2/3, ``optimizer.reduce_gradients``
    at the boundary for ZeRO 1 where the optimizer has one, else ``buffered_allreduce_fallback``
    (lines 1914-1928). The BF16_Optimizer (runtime/bf16_optimizer.py) has no reduce_gradients and
    installs no gradient hooks. ZeRO 1 under DeepSpeedZeroOptimizer with overlap_comm (its
    reduce_ready_partitions_and_remove_grads hooks reduce during the last micro-batch's backward,
    runtime/zero/stage_1_and_2.py) and ZeRO 2/3 (hooks every micro-batch) are not a fallback."""
    return (zero == 0) | ((zero == 1) & bf16_optimizer_zero1)  # numbers or arrays over candidates


def engine_dp_overlap_rule(
    engine: str, overlap_dp_grad_reduce: bool, pp: int, fallback: bool = False
) -> str | None:
    """DeepSpeed never overlaps the data-parallel gradient reduction with the backward on its
    PipelineEngine (pp > 1), nor, at any depth, where DeepSpeedEngine falls back to reducing after the
    backward (``fallback``: the stack runs DeepSpeed's engine and deepspeed_allreduce_fallback holds at
    the plan's ZeRO stage: dp_reduce_fallback, which every caller asks).

    PipelineEngine: its constructor sets ``enable_backward_allreduce = False`` ("We schedule the
    all-reduces"), and TrainSchedule issues ReduceTiedGrads and ReduceGrads after the last backward,
    whose ``_exec_reduce_grads`` raises the accumulation boundary only around its own reduction
    (``_force_grad_boundary``; ``is_gradient_accumulation_boundary`` returns it), so ZeRO-1's
    overlap_comm hooks, which reduce only at that boundary below stage 2
    (``reduce_ready_partitions_and_remove_grads``), do nothing during the backward passes
    (deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py and runtime/zero/stage_1_and_2.py at
    0050fdad; the same at v0.16.4 e2dc3eeb). At pp = 1 DeepSpeedEngine runs: its ZeRO-1 hooks
    (overlap_comm, DeepSpeedZeroOptimizer) reduce during the last micro-batch's backward and ZeRO 2/3's
    during every one, but ZeRO 0 and the BF16_Optimizer at ZeRO 1 reduce after it
    (deepspeed_allreduce_fallback). Where either holds the stack takes overlap_dp_grad_reduce false
    only. ``engine``: as engine_zero_rule's. The uniform estimate (step.estimate), the per-stage plan
    (specs.stage_plan at parse with pp > 1, specs.stage_stack with its pools' fallback; its default,
    decided with the pools, is this rule's allowed value), the uniform search's state options
    (search.grid_axes, search.launch.state_allowed) and the per-stage searches (search.staged.problem)
    all ask it."""
    if not overlap_dp_grad_reduce:
        return None
    if engine == "deepspeed" and pp > 1:
        return (
            f"DeepSpeed's PipelineEngine (pipeline engine deepspeed) reduces the data-parallel "
            f"gradients after the last backward (enable_backward_allreduce = False) with pp={pp}; "
            "allowed: false (or pp=1)"
        )
    if fallback:
        return (
            "DeepSpeedEngine reduces the data-parallel gradients after the backward "
            "(buffered_allreduce_fallback) at ZeRO 0 and under the BF16_Optimizer at ZeRO 1; "
            "allowed: false"
        )
    return None


def runs_bf16_optimizer(zero, zero1: bool, offload_optimizer=False):
    """Whether DeepSpeed runs its BF16_Optimizer on candidates of ZeRO stage ``zero`` (a number or
    an array over candidates) whose optimizer is offloaded or not (``offload_optimizer``, the same):
    at zero 0, and at zero 1 where ``zero1`` (the run's gradients kept in fp32,
    ``data_types.grad_accum_dtype: fp32`` stated) and the optimizer stays on the GPU.

    DeepSpeedEngine._do_optimizer_sanity_check (deepspeed/runtime/engine.py at v0.16.4 e2dc3eeb; the
    same test at v0.14.0 ce78a632): under ZeRO it returns BFLOAT16 where ``model_dtype ==
    torch.bfloat16 and grad_accum_dtype == torch.float32 and self.zero_optimization_stage() == 1 and
    not self.zero_cpu_offload()``, else ZERO_OPTIMIZATION; without ZeRO a bf16 model with fp32
    accumulation (get_data_types' default there) returns BFLOAT16; _configure_optimizer then builds
    the BF16_Optimizer for BFLOAT16 (_configure_bf16_optimizer). At stage 1 it runs as without ZeRO:
    DeepSpeedEngine.backward calls optimizer.backward, whose update_hp_grads adds each micro-batch's
    bf16 gradients into the fp32 ones (runtime/bf16_optimizer.py), and allreduce_gradients takes
    buffered_allreduce_fallback (the BF16_Optimizer has no reduce_gradients). Whether the stack and
    dtype take the BF16_Optimizer at all is bf16_optimizer_stack's. The one reading of the test: the
    gradient terms (step.constants.zero_stage_values, step.bf16_optimizer_sync) and dp_reduce_fallback."""
    on_zero1 = (zero == 1) & np.logical_not(offload_optimizer) if zero1 else False
    return (zero == 0) | on_zero1


def bf16_optimizer_stack(stack, dtype: str) -> bool:
    """Whether a stack (``stack``: a system's efficiency.runtime, specs.runtime.RuntimeCosts) runs
    DeepSpeed's BF16_Optimizer where runs_bf16_optimizer holds, for a run of ``dtype``: it runs DeepSpeed's
    optimizers (zero0_bf16_optimizer, a framework profile's) and the dtype is one the BF16_Optimizer takes
    (bf16_optimizer_dtype). The one reading: step.constants.zero0_terms and dp_reduce_fallback."""
    return bool(stack.zero0_bf16_optimizer) and bf16_optimizer_dtype(dtype)


def dp_reduce_fallback(
    stack, engine: str, zero: int, dtype: str, grad_dtype: str, offload_optimizer: bool = False
) -> bool:
    """Whether a run reduces its data-parallel gradients after the backward on DeepSpeedEngine
    (deepspeed_allreduce_fallback): the one rule of the DeepSpeed fallback, which every path asks with
    the same facts. The run's stack ``stack`` (a system's or a pool's efficiency.runtime: its profile's
    pipeline_engine and zero0_bf16_optimizer) and the plan's pipeline ``engine`` (a uniform plan's is
    the stack's pipeline_engine, a per-stage plan's its plan.engine) say whether DeepSpeedEngine runs the
    step: the engine or the stack's pipeline_engine is deepspeed, or the stack runs DeepSpeed's optimizers
    (zero0_bf16_optimizer). It then falls back at ZeRO stage ``zero`` 0, and at 1 where the
    BF16_Optimizer runs: the stack takes it for ``dtype`` (bf16_optimizer_stack) and
    runs_bf16_optimizer holds at zero 1 (``grad_dtype`` fp32, the optimizer not offloaded,
    ``offload_optimizer``); ``zero`` and ``offload_optimizer`` may be arrays over candidates. Asked by the
    uniform estimate (step.estimate), the uniform search's state options and candidates (search.grid_axes),
    the per-stage plan's check and default (specs.stage_stack.pools_reduce_fallback) and the per-stage
    searches (search.staged.problem)."""
    if "deepspeed" not in (engine, stack.pipeline_engine) and not stack.zero0_bf16_optimizer:
        return False
    zero1 = runs_bf16_optimizer(1, grad_dtype == "fp32", offload_optimizer)
    return deepspeed_allreduce_fallback(zero, bf16_optimizer_stack(stack, dtype) & zero1)


def engine_schedule_rule(engine: str, schedule: str, vpp: int, pp: int) -> str | None:
    """DeepSpeed's PipelineEngine runs one training schedule: PipelineEngine.train_batch builds
    ``schedule.TrainSchedule`` and nothing else (microsoft/DeepSpeed deepspeed/runtime/pipe/engine.py: line 280
    at v0.3.13, 367 at 0050fdad, 386 at v0.16.4), whose steps() run 2·(m + p − 1) steps alternating one
    forward and one backward micro-batch per stage after the warm-up, with min(p − stage, m) buffers in flight
    (pipe/schedule.py TrainSchedule.steps, num_pipe_buffers: "For synchronous 1F1B"): the 1F1B schedule, over
    one contiguous part of the PipelineModule per stage (no model chunks). With pp > 1 the deepspeed engine
    takes schedule 1f1b and vpp 1 only (ENGINE_SCHEDULES); interleaved, GPipe, zb-h1 and DualPipe are refused."""
    allowed = ENGINE_SCHEDULES.get(engine)
    if allowed is None or pp == 1 or (schedule in allowed and vpp == 1):
        return None
    return (
        f"DeepSpeed's PipelineEngine (pipeline engine {engine}) runs its TrainSchedule (1F1B) only, one "
        f"model chunk per stage; got schedule={schedule}, vpp={vpp} with pp={pp}; allowed: schedule "
        f"{', '.join(allowed)} with vpp 1 (or pp=1)"
    )


# (parallelism kind, plan field, what it is) in the order a plan's violations name them
_KINDS = (
    ("dp", "dp", "data parallelism"),
    ("tp", "tp", "tensor parallelism"),
    ("sp", "sequence_parallel", "sequence parallelism"),
    ("tp_overlap", "overlap_tp_comm", "TP comm-GEMM overlap"),
    ("pp", "pp", "pipeline parallelism"),
    ("cp", "cp", "context parallelism"),
    ("ep", "ep", "expert parallelism"),
)


# the kinds whose degrees multiply to the plan's GPUs (specs.parallel.DIMS)
_SPREADING = ("dp", "tp", "pp", "cp")


def stack_parallelism_rules(
    runs: tuple[str, ...],
    dims: ParallelDims,
    sequence_parallel: bool = False,
    overlap_tp_comm: bool = False,
    whose: str = "its framework profile's",
) -> list[Rule]:
    """(field, value, rule) for every parallel kind the plan uses that the stack's training loop does not run
    (``runs``: efficiency.runtime.parallelism, the framework profile's, each entry cited there): dp > 1, tp > 1,
    sequence parallelism and TP comm overlap (used only where tp > 1: over one GPU they split nothing), pp > 1,
    cp > 1, ep > 1. A loop that runs none (a profile stating ``parallelism: []``) runs one process on one
    device. Empty where the stack runs them all. ``whose``: where ``runs`` is stated, as the refusal names
    it (a per-stage plan's engine_stack: specs.stage_stack.STACK_FACTS)."""
    if set(runs) >= set(PARALLELISMS):
        return []
    used = {
        "dp": dims.dp > 1,
        "tp": dims.tp > 1,
        "sp": bool(sequence_parallel) and dims.tp > 1,
        "tp_overlap": bool(overlap_tp_comm) and dims.tp > 1,
        "pp": dims.pp > 1,
        "cp": dims.cp > 1,
        "ep": dims.ep > 1,
    }
    values = {"dp": dims.dp, "tp": dims.tp, "pp": dims.pp, "cp": dims.cp, "ep": dims.ep}
    stated = _stated(runs)
    out = []
    for kind, field, what in _KINDS:
        if used[kind] and kind not in runs:
            allowed = "false" if kind in ("sp", "tp_overlap") else "1"
            why = f"the stack's training loop runs no {what} ({whose} parallelism: {stated})"
            out.append((f"plan.{field}", values.get(kind, True), f"{why}; allowed: {allowed}"))
    return out


def stack_gpus_rule(runs: tuple[str, ...], gpus: int) -> str | None:
    """A training loop that runs none of the kinds that spread a plan over GPUs (dp, tp, pp, cp: ep and
    sequence parallelism are carved out of them) refuses more than one GPU: every split of gpus > 1 has one
    of them > 1, refused by stack_parallelism_rules. A profile stating ``parallelism: []`` (one process on
    one device) is one. The searches ask it before they split the GPUs (search.space, search.staged.problem),
    where every candidate would be refused."""
    if gpus > 1 and not set(runs) & set(_SPREADING):
        return (
            f"the stack's training loop runs on one device (its framework profile's parallelism: "
            f"{_stated(runs)}); allowed: 1"
        )
    return None


def stack_rules(runs: tuple[str, ...], gpus: int, plan) -> list[Rule]:
    """The uniform estimate's stack check (step.estimate): a one-device loop refuses the ``gpus`` the
    user gave (stack_gpus_rule, as the searches name it), else each parallel kind of ``plan`` (a
    specs.plan.PlanSpec) the loop does not run (stack_parallelism_rules)."""
    if rule := stack_gpus_rule(runs, gpus):
        return [("gpus", gpus, rule)]
    return stack_parallelism_rules(runs, plan.dims, plan.sequence_parallel, plan.overlap_tp_comm)


def _stated(runs: tuple[str, ...]) -> str:
    """The profile's parallelism as a refusal names it."""
    return ", ".join(runs) or "none: one process on one device"
