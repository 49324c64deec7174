"""One training step of one plan: compose op costs, collectives, schedule and memory.

Read top-down: ``estimate`` → ``step_inputs`` (per-block times from the op graph, parameters,
collectives in linear form, memory terms) → ``schedule.step.compose_step`` (pipeline, data-parallel
tail, offload) and ``stage_memory_terms`` (memory per stage). The search builds the same
``StepInputs`` with numpy arrays and calls the same composition.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from paraplan.cost import memory as mem
from paraplan.cost.comm import GroupSpan, collective_coefficients, collective_time_s, group_span, overlap_cost
from paraplan.cost.compute import op_times_s
from paraplan.cost.flops import model_flops_per_step, recompute_flops_per_token
from paraplan.graph.ops import LayerGraph
from paraplan.graph.transformer import LayerShape, decoder_layer, embedding_block, lm_head_block, lm_head_weight_params
from paraplan.report.result import CommCost, Estimate, OpCost, StageMemory, TimeBreakdown
from paraplan.schedule.pipeline import layers_on_stage
from paraplan.schedule.step import RECOMPUTE_CODES, BlockTerms, StepInputs, block_terms, compose_step, stage_memory_terms
from paraplan.specs.errors import InputError, Violation
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec, plan_violations
from paraplan.specs.system import SystemSpec


def plan_spans(plan: PlanSpec, system: SystemSpec) -> dict[str, GroupSpan]:
    """Spans of each group; "dp" is the gradient-reduction group, data × context parallel ranks
    (context-parallel ranks hold the same weights; Megatron-LM's data_parallel_group_with_cp)."""
    spans = {g: group_span(plan, system, g) for g in ("tp", "cp", "pp")}
    spans["dp"] = group_span(plan, system, ("cp", "dp"))
    return spans


@dataclass(frozen=True)
class BlockCompute:
    """Summed op times of one block for one micro-batch (seconds), before communication."""

    forward: float
    backward: float
    attention_forward: float  # the ops selective recompute re-runs (core attention)
    attention_backward: float
    gemm_forward: float
    gemm_backward: float


@lru_cache(maxsize=16384)
def block_compute(block: LayerGraph, system: SystemSpec, dtype: str) -> BlockCompute:
    """Σ over the block's ops of forward / backward time (cost.compute.op_times_s), by kind."""
    acc = system.accelerator
    sums = [0.0] * 6
    for op in block.ops:
        f, b = op_times_s(op, acc, dtype)
        sums[0] += f
        sums[1] += b
        if op.selective_recompute:
            sums[2] += f
            sums[3] += b
        if op.kind == "gemm":
            sums[4] += f
            sums[5] += b
    return BlockCompute(*sums)


@dataclass(frozen=True)
class BlockComm:
    """Seconds of one block's collectives for one micro-batch, grouped by what can hide them."""

    tp_forward: float
    tp_backward: float  # backward collectives nothing hides
    tp_hidden_by_dgrad: float
    tp_hidden_by_wgrad: float
    cp_forward: float
    cp_backward: float


@lru_cache(maxsize=65536)
def block_comm(block: LayerGraph, system: SystemSpec, tp_span: GroupSpan, cp_span: GroupSpan) -> BlockComm:
    """Σ over the block's collectives of calls × collective_time_s on the group's span."""
    spans = {"tp": tp_span, "cp": cp_span}
    sums = dict.fromkeys(("tp_f", "tp_b", "dgrad", "wgrad", "cp_f", "cp_b"), 0.0)
    for c in block.collectives:
        t = collective_time_s(c.kind, c.bytes, spans[c.group], system)
        if c.group == "cp":
            sums["cp_f"] += c.count_fwd * t
            sums["cp_b"] += c.count_bwd * t
            continue
        sums["tp_f"] += c.count_fwd * t
        backward = {"dgrad": "dgrad", "wgrad": "wgrad"}.get(c.overlaps_with, "tp_b")
        sums[backward] += c.count_bwd * t
    return BlockComm(*sums.values())


@lru_cache(maxsize=65536)
def block_times(
    block: LayerGraph,
    system: SystemSpec,
    dtype: str,
    recompute: str,
    overlap_tp_comm: bool,
    tp_span: GroupSpan,
    cp_span: GroupSpan,
) -> BlockTerms:
    """Compute and exposed communication of one block for one micro-batch; recompute per the mode
    (Korthikanti et al. 2022 §5: full re-runs the forward, selective the core attention).

    The context-parallel ring exchange hides behind the attention of the chunk already received
    (Liu et al. 2023). Hidden communication still costs its tier's overlap_cost share of its time
    (``cost.comm.hidden_share``). Backward TP collectives run beside the GEMMs they do not depend on: the
    input re-gather of SP beside dgrad, the gradient all-reduce / reduce-scatter beside wgrad
    (Megatron-LM's async tensor-parallel communication); each half of the backward GEMM time is
    one of the two (equal FLOPs, Narayanan et al. 2021 §5.1). With ``overlap_tp_comm``
    (Transformer Engine's userbuffers comm-GEMM overlap) forward and remaining backward TP
    collectives also hide behind the neighbouring GEMMs, when the TP group sits in one NVLink domain."""
    return block_terms(
        block_compute(block, system, dtype),
        block_comm(block, system, tp_span, cp_span),
        RECOMPUTE_CODES[recompute],
        overlap_tp_comm and tp_span.domains == 1,  # comm-GEMM overlap needs the TP group inside NVLink
        overlap_cost(tp_span, system),
        overlap_cost(cp_span, system),
    )


def layer_shape(plan: PlanSpec) -> LayerShape:
    return LayerShape(
        tp=plan.tp,
        cp=plan.cp,
        micro_batch=plan.micro_batch,
        seq_length=plan.seq_length,
        sequence_parallel=plan.sequence_parallel and plan.tp > 1,
        attention=plan.attention,
        dtype=plan.dtype,
    )


def _system_violations(plan: PlanSpec, system: SystemSpec) -> list[Violation]:
    out = []
    acc = system.accelerator
    try:
        acc.peak_matrix_flops(plan.dtype)
    except KeyError:
        out.append(Violation("plan.dtype", plan.dtype, f"{acc.name} has no peak for it; allowed: {', '.join(acc.matrix_flops)}"))
    if (plan.offload_weights or plan.offload_activations or plan.offload_optimizer) and not acc.host_bandwidth:
        out.append(Violation("plan.offload", True, f"system {system.name} declares no host_bandwidth / host_memory"))
    return out


def check_plan(model: ModelSpec, system: SystemSpec, plan: PlanSpec) -> None:
    """Raise InputError naming the first broken rule (field, value, what is allowed)."""
    violations = plan_violations(plan, model) + _system_violations(plan, system)
    if violations:
        raise InputError.from_violations(violations)


GRID_FIELDS = (
    "vpp", "interleaved", "gpipe", "zero", "overlap_dp_grad_reduce", "overlap_param_gather",
    "offload_weights", "offload_activations", "offload_optimizer",
)


@lru_cache(maxsize=65536)
def layer_terms(
    model: ModelSpec,
    system: SystemSpec,
    shape: LayerShape,
    tp_span: GroupSpan,
    cp_span: GroupSpan,
    recompute: str,
    overlap_tp_comm: bool,
) -> dict:
    """StepInputs fields set by the layer shape: block times, per-GPU parameters, activations, buffers."""
    layer = decoder_layer(model, shape)
    embedding = embedding_block(model, shape)
    head = lm_head_block(model, shape, False)

    def times(block: LayerGraph, mode: str) -> BlockTerms:
        return block_times(block, system, shape.dtype, mode, overlap_tp_comm, tp_span, cp_span)

    return dict(
        layer=times(layer, recompute),
        embedding=times(embedding, "none"),  # recomputation checkpoints the decoder layers only
        head=times(head, "none"),
        layer_params=layer.weight_params,
        embedding_params=embedding.weight_params,
        **activation_terms(model, shape, recompute),
    )


@lru_cache(maxsize=16384)
def activation_terms(model: ModelSpec, shape: LayerShape, recompute: str) -> dict:
    """StepInputs fields for activation memory and working buffers of one layer shape and recompute mode."""
    return dict(
        layer_activation_bytes=mem.layer_activation_bytes(model, shape, recompute),
        embedding_activation_bytes=mem.embedding_activation_bytes(model, shape),
        head_activation_bytes=mem.lm_head_activation_bytes(model, shape),
        layer_buffer_bytes=layer_buffer_bytes(model, shape, recompute),
    )


def data_parallel_terms(system: SystemSpec, dp_span: GroupSpan) -> dict:
    """StepInputs fields set by the data × context group: its size and collectives in linear form."""
    return dict(
        dp_size=dp_span.size,
        dp_overlap_cost=overlap_cost(dp_span, system),
        all_reduce=collective_coefficients("all_reduce", dp_span, system),
        reduce_scatter=collective_coefficients("reduce_scatter", dp_span, system),
        all_gather=collective_coefficients("all_gather", dp_span, system),
    )


def system_terms(system: SystemSpec, dtype: str) -> dict:
    """StepInputs fields set by the system and datatype alone."""
    acc = system.accelerator
    state = mem.state_bytes_per_param(dtype)
    return dict(
        host_bandwidth=acc.host_bandwidth or 1.0,
        hbm_rate=acc.hbm_bandwidth * acc.efficiency.hbm,
        weight_bytes=state.weights,
        grad_bytes=state.gradients,
        optimizer_bytes=state.optimizer,
        reserved_bytes=acc.reserved_memory,
    )


def row_terms(
    model: ModelSpec,
    system: SystemSpec,
    shape: LayerShape,
    spans: tuple[GroupSpan, GroupSpan, GroupSpan, GroupSpan],
    pp: int,
    microbatches: int,
    recompute: str,
    overlap_tp_comm: bool,
) -> dict:
    """Every StepInputs field except the GRID_FIELDS, for one (shape, spans (tp, cp, pp, dp×cp), pp,
    micro-batches, recompute, TP overlap) row."""
    tp_span, cp_span, pp_span, dp_span = spans
    return dict(
        **layer_terms(model, system, shape, tp_span, cp_span, recompute, overlap_tp_comm),
        **data_parallel_terms(system, dp_span),
        **system_terms(system, shape.dtype),
        pp=pp,
        microbatches=microbatches,
        layers=model.layers,
        p2p_transfer_s=collective_time_s("send_recv", p2p_bytes(model, shape), pp_span, system),
        head_params=lm_head_weight_params(model, shape.tp, pp == 1),
    )


def step_inputs(model: ModelSpec, system: SystemSpec, plan: PlanSpec) -> StepInputs:
    """StepInputs of one plan: its row terms plus its grid knobs (all floats)."""
    spans = plan_spans(plan, system)
    row = row_terms(
        model, system, layer_shape(plan), (spans["tp"], spans["cp"], spans["pp"], spans["dp"]),
        plan.pp, plan.microbatches, plan.recompute, plan.overlap_tp_comm,
    )
    schedule = plan.pipeline_schedule
    return StepInputs(
        **row,
        vpp=plan.vpp,
        interleaved=schedule == "interleaved",
        gpipe=schedule == "gpipe",
        zero=plan.zero,
        overlap_dp_grad_reduce=plan.overlap_dp_grad_reduce,
        overlap_param_gather=plan.overlap_param_gather,
        offload_weights=plan.offload_weights,
        offload_activations=plan.offload_activations,
        offload_optimizer=plan.offload_optimizer,
    )


def p2p_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """Activation sent between stages per micro-batch: b·(s/c)·h half-precision elements, split over
    the t tensor-parallel ranks (scatter/gather optimisation, Narayanan et al. 2021 §4.1)."""
    return shape.act_bytes * shape.local_tokens * model.hidden / shape.tp


def layer_buffer_bytes(model: ModelSpec, shape: LayerShape, recompute: str) -> float:
    """Working buffers beside the kept activations: one layer re-materialised in backward under full
    recompute, and the sequence-parallel all-gather output (b·s·h half-precision elements)."""
    buffers = mem.layer_activation_bytes(model, shape, "none") if recompute == "full" else 0.0
    if shape.sequence_parallel:
        buffers += shape.act_bytes * shape.local_tokens * model.hidden
    return buffers


def estimate(model: ModelSpec, system: SystemSpec, plan: PlanSpec, with_ops: bool = False) -> Estimate:
    """Predict step time, its breakdown, memory per stage, FLOPs and utilisation for one plan."""
    check_plan(model, system, plan)
    inp = step_inputs(model, system, plan)
    step = {k: float(v) for k, v in compose_step(inp).items()}
    breakdown = TimeBreakdown(**{name: step[name] for name in TimeBreakdown.__dataclass_fields__})
    acc = system.accelerator
    stages = []
    for stage in range(plan.pp):
        terms = {k: float(v) for k, v in stage_memory_terms(inp, stage).items()}
        stages.append(
            StageMemory(
                stage=stage,
                weights_bytes=terms["weights"],
                gradients_bytes=terms["gradients"],
                optimizer_bytes=terms["optimizer"],
                activations_bytes=terms["activations"],
                buffers_bytes=terms["buffers"],
                reserved_bytes=terms["reserved"],
                capacity_bytes=acc.hbm_capacity,
                transformer_weights_and_optimizer_bytes=terms["transformer_states"],
                transformer_activations_bytes=terms["transformer_activations"],
                host_bytes=terms["host"],
                host_capacity_bytes=acc.host_memory or float("inf"),
            )
        )
    tokens = plan.global_batch * plan.seq_length
    model_flops = model_flops_per_step(model, plan.seq_length, plan.global_batch)
    hardware_flops = model_flops + recompute_flops_per_token(model, plan.seq_length, plan.recompute) * tokens
    ops, comms = _op_table(model, plan, system) if with_ops else ((), ())
    return Estimate(
        model=model.name,
        system=system.name,
        plan=plan.model_dump(),
        step_time_s=step["step_time_s"],
        breakdown=breakdown,
        stages=tuple(stages),
        tokens_per_step=tokens,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        peak_flops_per_gpu=acc.peak_matrix_flops(plan.dtype),
        gpus=plan.gpus,
        ops=ops,
        comms=comms,
    )


def _op_table(model: ModelSpec, plan: PlanSpec, system: SystemSpec):
    """Per-op and per-collective rows (embedding, one decoder layer × layers per stage, LM head) for ``--ops``."""
    acc = system.accelerator
    shape = layer_shape(plan)
    spans = plan_spans(plan, system)
    blocks = (
        (embedding_block(model, shape), 1),
        (decoder_layer(model, shape), max(int(layers_on_stage(model.layers, plan.pp, i)) for i in range(plan.pp))),
        (lm_head_block(model, shape, plan.pp == 1), 1),
    )
    ops, comms = [], []
    for block, count in blocks:
        for op in block.ops:
            f, b = op_times_s(op, acc, plan.dtype)
            eff = op.fwd_flops / (f * acc.peak_matrix_flops(plan.dtype)) if op.kind == "gemm" and f > 0 else None
            ops.append(OpCost(block.name, op.name, op.kind, count, op.fwd_flops, op.bwd_flops, op.fwd_bytes, op.gemm_shape, eff, f, b))
        for c in block.collectives:
            span = spans[c.group]
            time = collective_time_s(c.kind, c.bytes, span, system)
            comms.append(
                CommCost(block.name, c.name, c.group, c.kind, c.bytes, c.count_fwd, c.count_bwd, time, span.size, span.domains)
            )
    return tuple(ops), tuple(comms)
