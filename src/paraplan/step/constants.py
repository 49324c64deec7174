"""The StepInputs fields a step takes from the system, the datatype and the run-wide knobs (not from the plan's
degrees): ``step.build.build_step_inputs`` attaches them to every estimate and every searched candidate."""

from __future__ import annotations

import math
from functools import reduce

import numpy as np

from paraplan.cost import memory as mem
from paraplan.cost.elementwise import where
from paraplan.cost.quantisation import weight_quantisation_bytes
from paraplan.cost.runtimes import (
    GRAD_ACCUMULATION_BYTES,
    accumulation_bytes_per_microbatch,
    batch_sync_idle_s,
    fsdp_copy_bytes,
    param_grad_accumulation_bytes,
    separate_grad_accum_bytes,
    separate_grad_accum_first_bytes,
    zero2_bucket_copy_bytes,
    zero2_partition_bytes,
    zero2_partition_first_bytes,
)
from paraplan.graph.eager_modules import impl_key
from paraplan.specs.plan import RuntimeFields
from paraplan.specs.rules_stack import bf16_optimizer_stack, runs_bf16_optimizer
from paraplan.specs.runtime import RuntimeCosts
from paraplan.specs.system import SystemSpec
from paraplan.step.dualpipe import pair_compute_share

# the run-wide knobs' defaults (specs.plan.RuntimeFields, the plan's too), for callers that pass none
_RUNTIME_DEFAULTS = RuntimeFields()


def host_link_Bps(acc) -> float:
    """Bytes/s offload streams at over the accelerator's host link (accelerator.host_bandwidth); 1.0 where
    the system declares none (specs.rules_offload.offload_rule then refuses every offload, so no priced plan reads it)."""
    return acc.host_bandwidth or 1.0


def system_terms(system: SystemSpec, dtype: str, runtime=None) -> dict:
    """StepInputs fields set by the system, the datatype and the run-wide knobs of ``runtime`` (a PlanSpec or
    a RuntimeFields such as SearchProblem.runtime: specs.plan.RUNTIME_FIELDS; None: their defaults): gradient
    dtype, TE's fp8 weight copies, ZeRO-3 prefetch depths (forward, backward), gather and reduce units and cap on resident gathered
    parameters (None: no cap)."""
    knobs = runtime if runtime is not None else _RUNTIME_DEFAULTS
    acc = system.accelerator
    state = state_bytes(system, dtype, knobs)
    cap = knobs.zero3_max_live_params
    reduce_bytes = grad_reduce_bytes(system, dtype, knobs)
    return dict(
        fp8_copy_bytes=mem.fp8_weight_copy_bytes_per_param(dtype, knobs.fp8_weight_copies),
        host_bandwidth=host_link_Bps(acc),
        hbm_rate=acc.hbm_rate(),
        weight_bytes=state.weights,
        grad_bytes=state.gradients,
        grad_reduce_bytes=reduce_bytes,
        optimizer_bytes=state.optimizer,
        reserved_bytes=acc.reserved_memory,
        zero3_live_params=math.inf if cap is None else float(cap),
        zero3_prefetch_layers=float(knobs.zero3_prefetch_layers),
        zero3_backward_prefetch_layers=_float_or_none(knobs.zero3_backward_prefetch_layers),
        zero3_tensor_gathers=1.0 if knobs.zero3_gather_unit == "tensor" else 0.0,
        zero3_tensor_reduces=1.0 if knobs.zero3_reduce_unit == "tensor" else 0.0,
        zero3_regather=1.0 if knobs.zero3_regather_recompute else 0.0,
        kernel_overhead_s=acc.efficiency.kernel_overhead_s,
        optimizer_step_bytes=acc.efficiency.optimizer_step_bytes,
        host_step_s=acc.efficiency.host_step_s / acc.efficiency.host_speed,
        host_tensor_s=acc.efficiency.host_tensor_s / acc.efficiency.host_speed,
        launch_blocking=1.0 if acc.efficiency.launch_blocking else 0.0,
        batch_sync_s=batch_sync_s(system, acc.efficiency.runtime.batch_syncs),
        pair_compute_share=system_pair_share(system),
        **runtime_terms(acc.efficiency.runtime, dtype, reduce_bytes),
        zero0=zero0_terms(system, dtype),
        bf16_optimizer_zero1=knobs.grad_dtype == "fp32",
        zero_accumulation=zero_accumulation_bytes(system, dtype, knobs),
    )


def _float_or_none(value) -> float | None:
    """``value`` as a float, None kept (a run-wide knob whose None defers to another)."""
    return None if value is None else float(value)


def system_pair_share(system: SystemSpec) -> float:
    """The share of the SMs DualPipe's overlapped pair leaves to compute on ``system``
    (step.dualpipe.pair_compute_share of its accelerator's SM count and the stack's dualpipe_comm_sms): the one
    reading of it, for every estimate (system_terms) and the search's floors (search.bounds)."""
    acc = system.accelerator
    return pair_compute_share(acc.sm_count, acc.efficiency.runtime.dualpipe_comm_sms)


def batch_sync_s(system: SystemSpec, syncs: float) -> float:
    """GPU seconds idle per micro-batch on a stage that loads a batch, ``syncs`` synchronisations on
    ``system`` (cost.runtimes.batch_sync_idle_s: the device round trip, host_sync_latency_s, not scaled by the
    host's speed, plus one kernel issue, host_launch_s / host_speed). The one reading of that rule: the stack's
    batch loads (efficiency.runtime.batch_syncs, system_terms) and a per-stage plan's pipeline engine
    (step.engines.EngineRules.batch_syncs, step.per_stage.stage_arrays)."""
    eff = system.accelerator.efficiency
    return batch_sync_idle_s(syncs, eff.host_sync_latency_s, eff.host_launch_s / eff.host_speed)


def state_bytes(system: SystemSpec, dtype: str, runtime=None) -> mem.StateBytes:
    """Bytes per parameter of the weights, gradients and optimizer state a run of ``dtype`` keeps on
    ``system`` under the run-wide knobs of ``runtime`` (None: their defaults): cost.memory.state_bytes_per_param
    at the run's gradient dtype and the stack's optimizer state (efficiency.runtime.optimizer_state, set by a
    framework profile). The one reading of that rule: the step's memory (``system_terms``) and the checkpoint
    size (goodput.checkpoint)."""
    knobs = runtime if runtime is not None else _RUNTIME_DEFAULTS
    optimizer_state = system.accelerator.efficiency.runtime.optimizer_state
    return mem.state_bytes_per_param(dtype, knobs.grad_dtype, optimizer_state)


def grad_reduce_bytes(system: SystemSpec, dtype: str, runtime=None) -> float:
    """Bytes per parameter of a data-parallel gradient reduction of a run of ``dtype`` on ``system``
    (cost.memory.grad_reduce_bytes_per_param at the run's gradient dtype and the stack's
    efficiency.runtime.grad_reduce_dtype). The one reading of that rule: the step's reductions
    (``system_terms``) and the per-stage tied-embedding all-reduce (step.stage_links)."""
    knobs = runtime if runtime is not None else _RUNTIME_DEFAULTS
    reduce_dtype = system.accelerator.efficiency.runtime.grad_reduce_dtype
    return mem.grad_reduce_bytes_per_param(dtype, knobs.grad_dtype, reduce_dtype)


def zero0_terms(system: SystemSpec, dtype: str) -> dict:
    """The StepInputs gradient terms a candidate of a run of ``dtype`` on ``system`` takes instead
    of system_terms' where the stack runs DeepSpeed's BF16_Optimizer (``at_zero_stage``,
    ``specs.rules_stack.runs_bf16_optimizer``: without ZeRO, and at ZeRO 1 with fp32 gradients stated); {} where none
    differ.

    DeepSpeedEngine.get_data_types (runtime/engine.py at v0.14.0 ce78a632; the same v0.10.0-v0.16.4): with no
    ``data_types.grad_accum_dtype`` stated, the gradient accumulation dtype is fp32 for a bf16 model without
    ZeRO and the model dtype otherwise; _do_optimizer_sanity_check then wraps a bf16 model with fp32
    accumulation in the BF16_Optimizer, which keeps full fp32 gradients (fp32_groups_gradients_flat) and
    adds every micro-batch's bf16 gradient into them (``update_hp_grads``, runtime/bf16_optimizer.py), while
    ZeRO 1-3 keep and reduce gradients in the model dtype (stage_1_and_2.py / stage3.py
    gradient_accumulation_dtype = grad_accum_dtype). So under efficiency.runtime.zero0_bf16_optimizer a
    bf16-weight run (bf16, and the fp8 / FP4 recipes over bf16 weights; DeepSpeedEngine has no fp8 path)
    takes at zero 0: fp32 gradients (``grad_bytes``, 4 B), the BF16_Optimizer's accumulation pass
    (``grad_accumulation_bytes``, cost.runtimes.bf16_optimizer_accumulation_bytes, 18 B per parameter and
    micro-batch) and the reduction of fp32 kept gradients under the stack's grad_reduce_dtype
    (``grad_reduce_bytes``: the engine's allreduce_bucket casts them to communication_data_type, the model
    dtype by default, which grad_reduce_dtype compute states). fp16 (the FP16 optimizers keep fp16
    gradients, runtime/fp16/fused_optimizer.py) and fp32 keep their gradients as with ZeRO."""
    runtime = system.accelerator.efficiency.runtime
    if not bf16_optimizer_stack(runtime, dtype):
        return {}
    return {
        "grad_bytes": mem.state_bytes_per_param(dtype, "fp32", runtime.optimizer_state).gradients,
        "grad_reduce_bytes": mem.grad_reduce_bytes_per_param(
            dtype, "fp32", runtime.grad_reduce_dtype
        ),
        "grad_accumulation_bytes": GRAD_ACCUMULATION_BYTES["bf16_optimizer"],
    }


def zero_accumulation_bytes(system: SystemSpec, dtype: str, runtime=None) -> tuple:
    """(at ZeRO 0, 1, 2, 3), each (bytes, first_saving, owned_bytes, owned_first_saving): HBM bytes per
    parameter of the stage and micro-batch of the gradient accumulation passes DeepSpeed's optimizers run
    on the compute stream where the BF16_Optimizer does not (runs_bf16_optimizer; its 18 B every
    micro-batch are zero0_terms'), and of them the bytes the step's first micro-batch saves
    (cost.runtimes.accumulation_bytes_per_microbatch); then the same per parameter of the GPU's gradient
    partition (1 of the gradient group's ZeRO shards), for a run of ``dtype`` on ``system`` under the
    run-wide knobs of ``runtime`` (None: their defaults); () where the stack does not run DeepSpeed's
    optimizers (efficiency.runtime.zero0_bf16_optimizer false: deepspeed-2021, v0.3.14, unread).

    DeepSpeedEngine._do_optimizer_sanity_check and _configure_optimizer (deepspeed/runtime/engine.py at
    v0.16.4 e2dc3eeb; the same at 0050fdad): without ZeRO an fp16 model runs the FP16 optimizers
    (runtime/fp16/fused_optimizer.py, unfused_optimizer.py) and an fp32 model the basic optimizer, both
    keeping the model-dtype ``param.grad`` into which autograd adds every micro-batch's gradient:
    cost.runtimes.param_grad_accumulation_bytes of the model dtype (6 B, 12 B for fp32). ZeRO 1 runs the
    ZeRO optimizer (runtime/zero/stage_1_and_2.py), which installs no gradient hooks below stage 2 unless
    overlap_comm, and whose hooks even then reduce only at the accumulation boundary
    (``reduce_ready_partitions_and_remove_grads``), so autograd adds into ``param.grad`` alike, unless its
    gradient_accumulation_dtype (``grad_dtype``) is fp32 on a 2-byte model: then ``fill_grad_accum_attribute``
    casts and adds each micro-batch into fp32 ``param.grad_accum`` (cost.runtimes.separate_grad_accum_bytes,
    18 B; where the BF16_Optimizer does not run: fp16, or bf16 with the optimizer offloaded). ZeRO 2 copies
    every micro-batch's gradients into its IPG bucket (cost.runtimes.zero2_bucket_copy_bytes, 2·g of the
    model dtype, every parameter) and its partition's out of it and adds them up
    (zero2_partition_bytes, 5·g per partition parameter; the first micro-batch the copy alone,
    zero2_partition_first_bytes). ZeRO 3 runs none on the compute stream: stage3.py (0050fdad)
    ``__add_grad_to_ipg_bucket`` copies into its bucket and ``partition_grads`` into the
    ``grad_partitions_flat_buffer`` on ``reduce_and_partition_stream``, beside the reduce-scatter."""
    knobs = runtime if runtime is not None else _RUNTIME_DEFAULTS
    if not system.accelerator.efficiency.runtime.zero0_bf16_optimizer:
        return ()
    model_bytes = mem.compute_copy_bytes(dtype)
    add = param_grad_accumulation_bytes(model_bytes)
    at0 = (add, add, 0.0, 0.0)  # the first micro-batch's gradient stolen: no pass
    partition = zero2_partition_bytes(model_bytes)
    at2 = (
        zero2_bucket_copy_bytes(model_bytes),
        0.0,
        partition,
        partition - zero2_partition_first_bytes(model_bytes),
    )
    at3 = (0.0, 0.0, 0.0, 0.0)
    if not (knobs.grad_dtype == "fp32" and model_bytes < 4.0):
        return (at0, at0, at2, at3)
    grad_accum = separate_grad_accum_bytes()
    at1 = (grad_accum, grad_accum - separate_grad_accum_first_bytes(), 0.0, 0.0)
    return (at0, at1, at2, at3)


# the StepInputs fields of one cell of zero_accumulation_bytes, in its order
ACCUMULATION_FIELDS = (
    "grad_accumulation_bytes",
    "grad_accumulation_first_saving_bytes",
    "grad_accumulation_owned_bytes",
    "grad_accumulation_owned_first_saving_bytes",
)


def at_zero_stage(constants: dict, zero, offload_optimizer=False) -> dict:
    """The StepInputs fields of system_terms' ``constants`` for candidates of ZeRO stage ``zero``
    and optimizer offload ``offload_optimizer`` (numbers or arrays over candidates): its ``zero0``
    terms (zero0_terms) where the BF16_Optimizer runs (runs_bf16_optimizer: zero 0, and zero 1 with
    fp32 gradients on the GPU), the accumulation of DeepSpeed's other optimizers at each ZeRO stage
    (``zero_accumulation``, zero_accumulation_bytes), the rest as they are, and all of them
    (``zero_stage_terms``) to resolve them again under other stages (step.layout.with_knobs). The one
    reading of that rule: the uniform plans (step.layout.build_step_inputs: estimate and search) and
    the per-stage plans (step.per_stage)."""
    skip = ("zero0", "bf16_optimizer_zero1", "zero_accumulation")
    terms = {name: value for name, value in constants.items() if name not in skip}
    zero0, accumulation = constants["zero0"], constants["zero_accumulation"]
    if not zero0 and not accumulation:
        return terms
    others = {name: terms[name] for name in sorted(zero0)}
    stage_terms = (zero0, others, constants["bf16_optimizer_zero1"], accumulation)
    return (
        terms
        | zero_stage_values(stage_terms, zero, offload_optimizer)
        | {"zero_stage_terms": stage_terms}
    )


def _by_zero_stage(zero, values: tuple):
    """values[zero] for candidates of ZeRO stage ``zero`` (0-3; a number or an array)."""
    at0, at1, at2, at3 = values
    return where(zero == 0, at0, where(zero == 1, at1, where(zero == 2, at2, at3)))


def zero_stage_values(zero_stage_terms: tuple, zero, offload_optimizer=False) -> dict:
    """The gradient terms of ``zero_stage_terms`` (the BF16_Optimizer's, the others', whether it
    runs at zero 1, the other optimizers' accumulation at each ZeRO stage; at_zero_stage) for
    candidates of ZeRO stage ``zero`` and optimizer offload ``offload_optimizer``
    (runs_bf16_optimizer); {} for (). The partition's cells (owned bytes and their first saving)
    are 0 where the optimizer is offloaded (offloaded_partition_accumulation)."""
    if not zero_stage_terms:
        return {}
    zero0, others, zero1, accumulation = zero_stage_terms
    runs = runs_bf16_optimizer(zero, zero1, offload_optimizer)
    out = {name: where(runs, value, others[name]) for name, value in zero0.items()}
    if accumulation:
        bf16 = zero0.get("grad_accumulation_bytes")  # every micro-batch (update_hp_grads adds)
        for k, name in enumerate(ACCUMULATION_FIELDS):
            value = _by_zero_stage(zero, tuple(cell[k] for cell in accumulation))
            if bf16 is not None:
                value = where(runs, bf16 if k == 0 else 0.0, value)
            if k >= 2:
                value = offloaded_partition_accumulation(value, offload_optimizer)
            out[name] = value
    return out


def offloaded_partition_accumulation(owned_bytes, offload_optimizer):
    """HBM bytes per partition parameter of DeepSpeed's ZeRO-2 partition passes (``owned_bytes``, a
    cell of zero_accumulation_bytes: zero2_partition_bytes or its first saving) under optimizer offload
    ``offload_optimizer`` (a bool or an array over candidates): 0 where offloaded, else ``owned_bytes``.
    Under ``cpu_offload`` ``copy_grads_in_partition`` returns before the copy into
    ``grads_in_partition`` and the epilogue's ``averaged_gradients`` add runs only ``if self.cpu_offload
    is False`` (deepspeedai/DeepSpeed 0050fdad runtime/zero/stage_1_and_2.py 1315-1326, 763); the IPG
    bucket copy stays (``contiguous_gradients or self.cpu_offload``, 205). Not priced: what runs instead,
    ``async_accumulate_grad_in_cpu_via_gpu`` (1177-1222), each micro-batch but the first copying the
    partition's accumulated gradients host to GPU, adding, and (but at the boundary) copying them back."""
    return where(offload_optimizer, 0.0, owned_bytes)


def least_zero_stage_terms(zero_stage_terms: tuple, microbatches) -> dict:
    """The least value each term of ``zero_stage_terms`` (at_zero_stage) takes at any ZeRO stage: the
    gradient terms a bound over every ZeRO stage of a group prices (step.compose.pipeline_bound_s). The
    accumulation's at its ``microbatches`` (cost.runtimes.accumulation_bytes_per_microbatch of each
    stage's pass and first-micro-batch saving, per parameter and per partition parameter apart), with
    no saving left to take."""
    zero0, others, _, accumulation = zero_stage_terms
    out = {name: reduce(np.minimum, (zero0[name], others[name])) for name in sorted(zero0)}
    if accumulation:
        whole = [accumulation_bytes_per_microbatch(c[0], c[1], microbatches) for c in accumulation]
        owned = [accumulation_bytes_per_microbatch(c[2], c[3], microbatches) for c in accumulation]
        if "grad_accumulation_bytes" in zero0:
            whole.append(zero0["grad_accumulation_bytes"])
            owned.append(0.0)
        out |= dict(zip(ACCUMULATION_FIELDS, (reduce(np.minimum, whole), 0.0)))
        out |= dict(zip(ACCUMULATION_FIELDS[2:], (reduce(np.minimum, owned), 0.0)))
    return out


def runtime_terms(runtime: RuntimeCosts, dtype: str, reduce_bytes: float) -> dict:
    """StepInputs fields of the stack's runtime costs (specs.runtime, set by a framework profile): the bytes
    per parameter the data-parallel all-gathers move (1 where an fp8 run gathers its fp8 primary weights,
    else the compute copy's, cost.memory.compute_copy_bytes) and the gathered copy of the transformer layers
    holds (the same: torchao's fp8 all-gather, WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather, gathers
    the fp8 data and fsdp_post_all_gather wraps the gathered fp8 buffer as the unsharded Float8Tensor,
    torchao/float8/fsdp_utils.py, torchao 0.7-0.8, read at a later release, not at the runs' eab345c;
    Megatron-FSDP keeps the gathered fp8 primary weights), that of
    the blocks outside them (the compute copy's: torchtitan converts only the layers' nn.Linear, not the
    embedding, the norms or the LM head, module_filter_fn fqn != "output", torchtitan/float8.py at 9dec370;
    the layers' norm weights, 2·h per layer, are counted at 1 B with them), the ZeRO-3 / FSDP
    copies (cost.runtimes.fsdp_copy_bytes of the stack's fsdp_runtime at the compute copy's bytes and
    ``reduce_bytes``, the run's gradient reduction: ``grad_reduce_bytes``), the per-micro-batch gradient accumulation, the interleaved schedule's p2p overlap, the
    once-per-step weight quantisation of a low-precision recipe (cost.quantisation) and whether gradients
    are allocated during backward (cost.memory.peak_residents)."""
    fp8_gather = runtime.fp8_param_gather and dtype == "fp8"
    compute_copy = mem.compute_copy_bytes(dtype)
    return dict(
        fp8_weight_quant_bytes=weight_quantisation_bytes(runtime.fp8_recipe, dtype, fp8_gather),
        param_gather_bytes=1.0 if fp8_gather else compute_copy,
        gathered_weight_bytes=1.0 if fp8_gather else compute_copy,
        gathered_outside_bytes=compute_copy,
        grad_accumulation_bytes=runtime.grad_accumulation_bytes,
        p2p_overlap=1.0 if runtime.p2p_overlap else 0.0,
        lazy_gradients=1.0 if runtime.lazy_gradients else 0.0,
        zero3_root_held=1.0 if runtime.zero3_root_held else 0.0,
        zero3_pp_keeps_layers=0.0 if runtime.zero3_pp_reshard else 1.0,
        zero2_reduce_per_microbatch=1.0 if runtime.zero2_reduce_per_microbatch else 0.0,
        **fsdp_copy_bytes(runtime.fsdp_runtime, compute_copy, reduce_bytes),
    )


def stack_shape_fields(system: SystemSpec) -> dict:
    """The LayerShape fields ``system``'s stack sets (a framework profile's efficiency.runtime / module_impl): the one
    rule every path's layer shapes take them by (step.estimate.layer_shape, step.per_stage per pool,
    search.shapes).

    - ``module_impl``: the modules the stack runs as composites of eager kernels (graph.eager_modules.impl_key of
      efficiency.module_impl);
    - ``cp_ring``: whose K/V ring it runs (efficiency.runtime.cp_ring);
    - ``tp_fp8_gather``: whether it all-gathers the SP inputs and gradients in fp8
      (efficiency.runtime.tp_fp8_all_gather);
    - ``fused_grouped_mlp``: whether its block-scaled expert MLPs run as Transformer Engine's fused grouped MLP
      (efficiency.runtime.moe_fused_grouped_mlp, only under an mxfp8 / nvfp4 fp8_recipe: TE fuses nothing
      for another recipe, grouped_mlp.py fuse_grouped_mlp_ops at 4329ff84);
    - ``hybridep_budget``: whether its HybridEP dispatch runs on a static receive budget
      (efficiency.runtime.moe_hybridep_budget);
    - ``paged_stash``: the CUDA buffer factor of its MoE paged stash (efficiency.runtime.moe_paged_stash), 0
      without one or without the fused grouped MLP, the only path that stashes (moe_mlp.stashes_expert_activations);
    - ``proj_quantised_copy``: whether the attention's output projection keeps its own quantised input copy
      (efficiency.runtime.proj_quantised_copy)."""
    eff = system.accelerator.efficiency
    runtime = eff.runtime
    fused = runtime.moe_fused_grouped_mlp and runtime.fp8_recipe in ("mxfp8", "nvfp4")
    return dict(
        module_impl=impl_key(eff.module_impl),
        cp_ring=runtime.cp_ring,
        tp_fp8_gather=runtime.tp_fp8_all_gather,
        fused_grouped_mlp=fused,
        hybridep_budget=runtime.moe_hybridep_budget,
        paged_stash=runtime.moe_paged_stash if fused else 0.0,
        proj_quantised_copy=runtime.proj_quantised_copy,
    )
