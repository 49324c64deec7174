"""One training step of one plan: compose op costs, collectives, schedule and memory.

Read top-down: ``estimate`` → per-block times (``block_times``) → per-stage work → pipeline step
→ data-parallel and optimizer tail → memory per stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost import memory as mem
from paraplan.cost.comm import GroupSpan, collective_time_s, group_span
from paraplan.cost.compute import op_times_s
from paraplan.cost.flops import model_flops_per_step, recompute_flops_per_token
from paraplan.graph.ops import LayerGraph
from paraplan.graph.transformer import LayerShape, decoder_layer, embedding_block, lm_head_block
from paraplan.report.result import CommCost, Estimate, OpCost, StageMemory, TimeBreakdown
from paraplan.schedule.pipeline import p2p_transfers_per_microbatch, pipeline_bubble_s
from paraplan.specs.errors import InputError, Violation
from paraplan.specs.model import ModelSpec
from paraplan.specs.plan import PlanSpec, plan_violations
from paraplan.specs.system import SystemSpec

# Bytes per parameter in the data-parallel gradient reduction: Megatron-LM reduces its fp32 main
# gradients (Korthikanti et al. 2022 memory accounting, 4 B/param gradients); fp16/bf16 weights are
# all-gathered after a distributed-optimizer step (2 B/param).
GRAD_REDUCE_BYTES = 4.0
# Optimizer-step HBM traffic per parameter on its owner, one pass per kernel of Megatron-LM's
# mixed-precision step: zero the fp32 grad buffer (write 4), unscale + inf check (read 4, write 4),
# gradient-norm for clipping (read 4), Adam (read grad, master, m, v: 16; write master, m, v: 12),
# copy master to the half-precision weight (read 4, write 2) = 54 B (state sizes: ZeRO §3.1).
OPTIMIZER_BYTES_PER_PARAM = 54.0


@dataclass(frozen=True)
class BlockTimes:
    """Seconds for one micro-batch through one block on one GPU."""

    forward: float
    backward: float
    recompute: float
    tp_forward: float  # exposed TP collectives in forward (and once more in full recompute)
    tp_backward: float
    tp_recompute: float
    cp_exposed: float  # exposed context-parallel K/V exchange, forward + backward (+ recompute)


def _spans(plan: PlanSpec, system: SystemSpec) -> dict[str, GroupSpan]:
    """Spans of each group; "dp" is the gradient-reduction group, data × context parallel ranks
    (context-parallel ranks hold the same weights; Megatron-LM's data_parallel_group_with_cp)."""
    spans = {g: group_span(plan, system, g) for g in ("tp", "cp", "pp")}
    spans["dp"] = group_span(plan, system, ("cp", "dp"))
    return spans


def block_times(block: LayerGraph, plan: PlanSpec, system: SystemSpec, spans: dict[str, GroupSpan]) -> BlockTimes:
    """Compute and exposed communication of one block; recompute per the plan's mode (Korthikanti §5)."""
    acc = system.accelerator
    fwd = bwd = rc = attention_fwd = attention_bwd = gemm_fwd = gemm_bwd = 0.0
    for op in block.ops:
        f, b = op_times_s(op, acc, plan.dtype)
        fwd += f
        bwd += b
        if plan.recompute == "full" or (plan.recompute == "selective" and op.selective_recompute):
            rc += f
        if op.selective_recompute:
            attention_fwd += f
            attention_bwd += b
        if op.kind == "gemm":
            gemm_fwd += f
            gemm_bwd += b
    tp_f = tp_b = cp = hidden_by_dgrad = hidden_by_wgrad = 0.0
    for c in block.collectives:
        t = collective_time_s(c.kind, c.bytes, spans[c.group], system)
        if c.group == "cp":
            # ring exchange overlaps the attention of the chunk already received (Liu et al. 2023)
            cp += max(0.0, c.count_fwd * t - attention_fwd) + max(0.0, c.count_bwd * t - attention_bwd)
            if plan.recompute in ("full", "selective"):
                cp += max(0.0, c.count_fwd * t - attention_fwd)
            continue
        tp_f += c.count_fwd * t
        if c.overlaps_with == "dgrad":
            hidden_by_dgrad += c.count_bwd * t
        elif c.overlaps_with == "wgrad":
            hidden_by_wgrad += c.count_bwd * t
        else:
            tp_b += c.count_bwd * t
    # backward GEMM time splits evenly into dgrad and wgrad (equal FLOPs, Narayanan et al. 2021 §5.1)
    tp_b += max(0.0, hidden_by_dgrad - gemm_bwd / 2.0) + max(0.0, hidden_by_wgrad - gemm_bwd / 2.0)
    if plan.overlap_tp_comm:
        # userbuffers-style overlap (Transformer Engine comm-GEMM overlap) also hides the forward
        # and remaining backward TP collectives behind the neighbouring GEMMs
        tp_f = max(0.0, tp_f - gemm_fwd)
        tp_b = max(0.0, tp_b - gemm_bwd)
    tp_rc = tp_f if plan.recompute == "full" else 0.0
    return BlockTimes(fwd, bwd, rc, tp_f, tp_b, tp_rc, cp)


def _layer_shape(plan: PlanSpec) -> LayerShape:
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


def estimate(model: ModelSpec, system: SystemSpec, plan: PlanSpec, with_ops: bool = False) -> Estimate:
    """Predict step time, its breakdown, memory per stage, FLOPs and utilisation for one plan."""
    check_plan(model, system, plan)
    shape = _layer_shape(plan)
    spans = _spans(plan, system)
    acc = system.accelerator
    pp, vpp, m = plan.pp, plan.vpp, plan.microbatches
    layers_per_stage = model.layers // pp
    schedule = plan.pipeline_schedule

    layer = decoder_layer(model, shape)
    embedding = embedding_block(model, shape)
    head = lm_head_block(model, shape, pp == 1)
    lt, et, ht = (block_times(b, plan, system, spans) for b in (layer, embedding, head))

    p2p_bytes = shape.act_bytes * shape.local_tokens * model.hidden / plan.tp  # scatter/gather (Narayanan §4.1)
    p2p_per_mb = p2p_transfers_per_microbatch(pp, vpp) * collective_time_s("send_recv", p2p_bytes, spans["pp"], system)

    # ---- per-stage work for one micro-batch --------------------------------------------------
    stage_parts = []
    for stage in range(pp):
        blocks = [(lt, layers_per_stage)]
        if stage == 0:
            blocks.append((et, 1))
        if stage == pp - 1:
            blocks.append((ht, 1))
        parts = {
            "forward": sum(b.forward * n for b, n in blocks),
            "backward": sum(b.backward * n for b, n in blocks),
            "recompute": sum(b.recompute * n for b, n in blocks),
            "tp": sum((b.tp_forward + b.tp_backward + b.tp_recompute) * n for b, n in blocks),
            "cp": sum(b.cp_exposed * n for b, n in blocks),
            "pp": p2p_per_mb,
        }
        stage_parts.append(parts)
    work = [sum(p.values()) for p in stage_parts]
    slowest = max(range(pp), key=lambda i: work[i])
    w = stage_parts[slowest]
    bubble = pipeline_bubble_s(schedule, pp, vpp, work)

    # ---- data-parallel sync, optimizer and offload tail (slowest stage) --------------------------
    stage_params = []
    for stage in range(pp):
        params = layers_per_stage * layer.weight_params
        if stage == 0:
            params += embedding.weight_params
        if stage == pp - 1:
            params += head.weight_params
        stage_params.append(params)

    tails = []
    for stage in range(pp):
        tails.append(_tail_times(stage_params[stage], stage_parts[stage], plan, system, spans, m))
    tail_stage = max(range(pp), key=lambda i: sum(tails[i]))
    dp_exposed, optimizer_s, offload_s = tails[tail_stage]
    offload_s += m * _offload_exposed_per_microbatch(model, shape, layer, layers_per_stage, stage_parts[slowest], plan, system)

    breakdown = TimeBreakdown(
        forward_s=m * w["forward"],
        backward_s=m * w["backward"],
        recompute_s=m * w["recompute"],
        optimizer_s=optimizer_s,
        bubble_s=bubble,
        tp_comm_s=m * w["tp"],
        cp_comm_s=m * w["cp"],
        pp_comm_s=m * w["pp"],
        dp_comm_s=dp_exposed,
        offload_s=offload_s,
    )
    step = breakdown.total_s()

    stages = tuple(
        _stage_memory(stage, model, plan, system, shape, layer, stage_params[stage], layers_per_stage)
        for stage in range(pp)
    )
    tokens = plan.global_batch * plan.seq_length
    model_flops = model_flops_per_step(model, plan.seq_length, plan.global_batch)
    hardware_flops = model_flops + recompute_flops_per_token(model, plan.seq_length, plan.recompute) * tokens
    ops, comms = (_op_table(model, plan, system, spans, layer, embedding, head, layers_per_stage) if with_ops else ((), ()))
    return Estimate(
        model=model.name,
        system=system.name,
        plan=plan.model_dump(),
        step_time_s=step,
        breakdown=breakdown,
        stages=stages,
        tokens_per_step=tokens,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        peak_flops_per_gpu=acc.peak_matrix_flops(plan.dtype),
        gpus=plan.gpus,
        ops=ops,
        comms=comms,
    )


def _tail_times(params: float, parts: dict, plan: PlanSpec, system: SystemSpec, spans: dict, m: int) -> tuple[float, float, float]:
    """(exposed DP communication, optimizer step, optimizer offload) for one stage.

    zero 0: all-reduce of fp32 gradients; zero 1-2: reduce-scatter of gradients + all-gather of
    weights (Megatron distributed optimizer / ZeRO); zero 3: per micro-batch all-gather of weights
    in forward and backward and reduce-scatter of gradients (ZeRO §5.3, 1.5× the all-reduce volume).
    Gradient reduction overlaps the last micro-batch's backward, the weight all-gather the first
    micro-batch's forward, when the overlap switches are on (Megatron-LM --overlap-grad-reduce /
    --overlap-param-gather)."""
    dp = spans["dp"]
    acc = system.accelerator
    half = 4.0 if plan.dtype == "fp32" else 2.0
    grad_window = parts["backward"] + parts["recompute"] if plan.overlap_dp_grad_reduce else 0.0
    gather_window = parts["forward"] if plan.overlap_param_gather else 0.0
    if dp.size <= 1:
        exposed = 0.0
    elif plan.zero == 0:
        exposed = max(0.0, collective_time_s("all_reduce", params * GRAD_REDUCE_BYTES, dp, system) - grad_window)
    elif plan.zero in (1, 2):
        rs = collective_time_s("reduce_scatter", params * GRAD_REDUCE_BYTES, dp, system)
        ag = collective_time_s("all_gather", params * half, dp, system)
        exposed = max(0.0, rs - grad_window) + max(0.0, ag - gather_window)
    else:
        ag = collective_time_s("all_gather", params * half, dp, system)
        rs = collective_time_s("reduce_scatter", params * GRAD_REDUCE_BYTES, dp, system)
        per_mb = max(0.0, ag - parts["forward"]) + max(0.0, ag + rs - parts["backward"])
        exposed = m * per_mb
    owned = params / (dp.size if plan.zero >= 1 else 1)  # ZeRO shards over data × context ranks
    if plan.offload_optimizer:
        # ZeRO-Offload (Ren et al. 2021): gradients to host, updated weights back, over host_bandwidth
        offload = owned * (GRAD_REDUCE_BYTES + half) / acc.host_bandwidth
        optimizer = 0.0
    else:
        offload = 0.0
        optimizer = owned * OPTIMIZER_BYTES_PER_PARAM / (acc.hbm_bandwidth * acc.efficiency.hbm)
    return exposed, optimizer, offload


def _offload_exposed_per_microbatch(model, shape, layer, layers, parts, plan, system) -> float:
    """Activation / weight offload traffic per micro-batch not hidden behind that micro-batch's compute."""
    acc = system.accelerator
    traffic = 0.0
    if plan.offload_activations:
        traffic += 2 * layers * mem.layer_activation_bytes(model, shape, plan.recompute)
    if plan.offload_weights:
        traffic += 2 * layers * layer.weight_params * mem.state_bytes_per_param(plan.dtype).weights
    if traffic == 0.0:
        return 0.0
    compute = parts["forward"] + parts["backward"] + parts["recompute"]
    return max(0.0, traffic / acc.host_bandwidth - compute)


def _stage_memory(stage, model, plan, system, shape, layer, params, layers) -> StageMemory:
    """Peak bytes per GPU on one stage: sharded training state + in-flight activations + buffers."""
    acc = system.accelerator
    dp = plan.dp * plan.cp  # ZeRO / distributed optimizer shard over data × context parallel ranks
    transformer_params = layers * layer.weight_params
    states = mem.sharded_state_bytes(params, plan.dtype, plan.zero, dp)
    transformer_states = mem.sharded_state_bytes(transformer_params, plan.dtype, plan.zero, dp)
    in_flight = mem.in_flight_microbatches(plan.pipeline_schedule, plan.pp, plan.vpp, plan.microbatches, stage)
    per_layer = mem.layer_activation_bytes(model, shape, plan.recompute)
    transformer_acts = in_flight * layers * per_layer
    acts = transformer_acts
    if stage == 0:
        acts += in_flight * mem.embedding_activation_bytes(model, shape)
    if stage == plan.pp - 1:
        acts += mem.lm_head_activation_bytes(model, shape)
    weights, optimizer = states.weights, states.optimizer
    if plan.offload_activations:
        acts = transformer_acts = 2 * per_layer  # one layer being offloaded, one being fetched
    if plan.offload_optimizer:
        optimizer = 0.0
    if plan.offload_weights:
        weights = 2 * layer.weight_params * mem.state_bytes_per_param(plan.dtype).weights
    buffers = 0.0
    if plan.recompute == "full":
        buffers += mem.layer_activation_bytes(model, shape, "none")  # one layer re-materialised in backward
    if plan.tp > 1 and shape.sequence_parallel:
        buffers += shape.act_bytes * shape.local_tokens * model.hidden  # all-gather output buffer
    if plan.zero >= 3:
        buffers += 2 * layer.weight_params * mem.state_bytes_per_param(plan.dtype).weights
    return StageMemory(
        stage=stage,
        weights_bytes=weights,
        gradients_bytes=states.gradients,
        optimizer_bytes=optimizer,
        activations_bytes=acts,
        buffers_bytes=buffers,
        reserved_bytes=acc.reserved_memory,
        capacity_bytes=acc.hbm_capacity,
        transformer_weights_and_optimizer_bytes=transformer_states.weights + transformer_states.gradients + transformer_states.optimizer,
        transformer_activations_bytes=transformer_acts,
    )


def _op_table(model, plan, system, spans, layer, embedding, head, layers):
    """Per-op and per-collective rows of the busiest stage for ``--ops``."""
    acc = system.accelerator
    ops, comms = [], []
    for block, count in ((embedding, 1), (layer, layers), (head, 1)):
        for op in block.ops:
            f, b = op_times_s(op, acc, plan.dtype)
            eff = op.fwd_flops / (f * acc.peak_matrix_flops(plan.dtype)) if op.kind == "gemm" and f > 0 else None
            ops.append(OpCost(block.name, op.name, op.kind, count, op.fwd_flops, op.bwd_flops, op.fwd_bytes, op.gemm_shape, eff, f, b))
        for c in block.collectives:
            span = spans[c.group]
            comms.append(
                CommCost(block.name, c.name, c.group, c.kind, c.bytes, c.count_fwd, c.count_bwd,
                         collective_time_s(c.kind, c.bytes, span, system), span.size, span.domains)
            )
    return tuple(ops), tuple(comms)
