"""The one builder of a step: op graphs → per-block costs → pipeline stages → ``StepInputs``.

Read top-down:
1. ``BLOCK_KINDS`` (paraplan/step/blocks.py): the registry of block kinds (embedding, decoder layer,
   LM head, MoE kinds), each with its op-graph builder (graph/) and its memory facts (cost/memory.py).
   A new layer kind (an MoE layer, an encoder layer) is one more entry.
2. ``row_facts``: everything the layer shape, the group spans and the degrees fix for one plan —
   summed op times and collective times per block, parameters, activations, the gradient
   group's collectives, the pipeline transfer — as floats. The search gathers the same fields,
   from the same cached functions, as numpy arrays over millions of candidates (search/table.py).
3. ``row_blocks``: per-block time terms (schedule.step.block_terms) with the rules that decide
   them — recomputation re-runs decoder layers only; TP comm-GEMM overlap only when the TP group
   sits in one NVLink domain.
4. ``build_step_inputs``: blocks laid out on the stages of a split (specs/split.py) plus the
   plan's schedule, ZeRO, overlap and offload knobs → ``StepInputs`` for schedule/step.py.
Steps 3 and 4 are written once for floats and arrays: the estimator and the search share them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from paraplan.step.blocks import (  # noqa: F401 (re-exported: the estimator, the search and the tests read them here)
    BLOCK_KINDS,
    default_recompute_modules,
    head_params_with_embedding,
    layer_buffer_bytes,
    model_block_kinds,
    model_gradient_groups,
    p2p_bytes,
)
from paraplan.cost.comm import (
    GroupSpan,
    collective_costs_s,
    collective_time_s,
    group_span,
    linear_collective,
    placement_strides,
    ring_step_sync_s,
)
from paraplan.cost.compute import op_times_s
from paraplan.cost.summa import grid_spans, with_summa_exposure
from paraplan.cost.moe import (
    EXPERT_GROUPS,
    expert_dp_span,
    expert_group_span,
    moe_collective_time_and_price_s,
)
from paraplan.graph.moe import NO_EXPERT, moe_shaped, ops_expert_knobs, without_a2a_overlap
from paraplan.graph.ops import ExpertShape, LayerGraph, Op, collective_groups, weight_tensor_stats
from paraplan.graph.transformer import LayerShape, with_expert
from paraplan.step.constants import system_terms  # noqa: F401 (re-exported: the estimator and the search read it here)
from paraplan.step.compose import (
    RECOMPUTE_CODES,
    BlockCost,
    GradientGroup,
    GridKnobs,
    Stage,
    StepInputs,
    block_terms,
)
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import GRADIENT_GROUPS
from paraplan.specs.split import SplitGroup
from paraplan.specs.system import SystemSpec

Num = Any


# ---- 1. block kinds: paraplan.step.blocks (BLOCK_KINDS and the per-kind rules) -------------------
# ---- 2. facts of a row --------------------------------------------------------------------------
class BlockCompute(NamedTuple):
    """Summed op times of one block for one micro-batch (seconds), before communication. (BlockCompute, BlockComm,
    BlockCostFacts and BlockMemoryFacts are NamedTuples: built by the thousand in a search, and a tuple is built,
    hashed and compared without a Python call per field; arrays.stack stacks them field by field.)"""

    forward: float
    backward: float
    attention_forward: float  # the ops selective recompute re-runs (core attention)
    attention_backward: float
    gemm_forward: float
    gemm_backward: float


@lru_cache(maxsize=16384)
def block_compute(block: LayerGraph, system: SystemSpec, dtype: str) -> BlockCompute:
    """Σ over the block's ops of forward / backward time (cost.compute.op_times_s), by kind."""
    forward = backward = attention_forward = attention_backward = gemm_forward = gemm_backward = 0.0
    times = _op_times(system, dtype)
    if len(times) > 262144:  # a bound, as an lru cache's
        times.clear()
    for op in block.ops:
        pair = times.get(op)
        if pair is None:
            pair = times[op] = op_times_s(op, system.accelerator, dtype)
        f, b = pair
        forward += f
        backward += b
        if op.selective_recompute:
            attention_forward += f
            attention_backward += b
        if op.kind in ("gemm", "grouped_gemm"):
            gemm_forward += f
            gemm_backward += b
    return BlockCompute(
        forward, backward, attention_forward, attention_backward, gemm_forward, gemm_backward
    )


@lru_cache(maxsize=64)
def _op_times(system: SystemSpec, dtype: str) -> dict[Op, tuple[float, float]]:
    """op -> cost.compute.op_times_s on this system and dtype, filled by block_compute once per distinct op: the
    attention half of an MoE layer, its router and shared experts repeat unchanged across the expert options."""
    return {}


class BlockComm(NamedTuple):
    """Seconds of one block's collectives for one micro-batch, grouped by what can hide them, and
    the price of hiding each group completely (cost.comm.LinearCollective.hidden_price_s)."""

    tp_forward: float
    tp_backward: float  # backward collectives nothing hides
    tp_hidden_by_dgrad: float
    tp_hidden_by_wgrad: float
    cp_forward: float
    cp_backward: float
    tp_forward_price: float
    tp_backward_price: float  # of all backward TP collectives
    cp_forward_price: float
    cp_backward_price: float
    ep_forward: float = 0.0  # expert-parallel dispatch / combine (and ETP collectives)
    ep_backward: float = 0.0
    ep_forward_price: float = 0.0
    ep_backward_price: float = 0.0
    ep_overlap: float = (
        0.0  # 1 when the plan overlaps dispatch/combine with compute (moe_a2a_overlap)
    )
    # seconds the collectives keep the NIC busy (groups spanning NVLink domains): cost.comm.collective_nic_time_s
    tp_nic_forward: float = 0.0
    tp_nic_backward: float = 0.0
    cp_nic_forward: float = 0.0
    cp_nic_backward: float = 0.0
    # context-parallel ring: steps per pass (c - 1) and the CP time nothing hides: the ring's per-step
    # synchronisation, or 2d-seq's K/V all-gathers (graph/summa.py; the kernel waits for them)
    cp_steps: float = 0.0
    cp_sync_forward: float = 0.0
    cp_sync_backward: float = 0.0


@lru_cache(maxsize=65536)
def block_comm(
    block: LayerGraph,
    system: SystemSpec,
    tp_span: GroupSpan,
    cp_span: GroupSpan,
    model: ModelSpec | None = None,
    shape: LayerShape | None = None,
) -> BlockComm:
    """Σ over the block's collectives of calls × collective time (and hidden price) on the group's span;
    expert-parallel collectives (groups ep, etp) on the expert spans of ``shape.expert``
    (cost.moe.moe_collective_time_and_price_s)."""
    spans = {"tp": tp_span, "cp": cp_span}
    s = dict.fromkeys(BlockComm._fields, 0.0)
    moe = shape is not None and model is not None
    if moe:
        s["ep_overlap"] = float(shape.expert.a2a_overlap)
    if not block.collectives:
        return BlockComm(**s)
    if shape is not None and shape.tp_layout == "2d":
        spans["tp_row"], spans["tp_col"] = grid_spans(tp_span, shape.tp_rows)
    if moe:
        s["ep_forward"], s["ep_backward"], s["ep_forward_price"], s["ep_backward_price"] = (
            expert_comm_terms(block.collectives, system, model, shape.expert)
        )
    for c in block.collectives:
        fwd, bwd = c.count_fwd, c.count_bwd
        if c.group in EXPERT_GROUPS:  # expert_comm_terms
            continue
        time, price, nic = collective_costs_s(c.kind, c.bytes, spans[c.group], system)
        if c.group == "cp":
            s["cp_nic_forward"] += fwd * nic
            s["cp_nic_backward"] += bwd * nic
            if (
                c.kind != "ring_exchange"
            ):  # 2d-seq's K/V all-gathers, Ulysses' all-to-alls: the kernel waits for them
                s["cp_sync_forward"] += fwd * time
                s["cp_sync_backward"] += bwd * time
                continue
            if spans["cp"].size > 1:
                steps = spans["cp"].size - 1
                s["cp_steps"] = max(s["cp_steps"], steps)
                sync = ring_step_sync_s(spans["cp"], system)
                s["cp_sync_forward"] += fwd * steps * sync
                s["cp_sync_backward"] += bwd * steps * sync
            s["cp_forward"] += fwd * time
            s["cp_backward"] += bwd * time
            s["cp_forward_price"] += fwd * price
            s["cp_backward_price"] += bwd * price
            continue
        # tp, and the 2D grid's rows and columns: tensor-parallel traffic
        s["tp_nic_forward"] += fwd * nic
        s["tp_nic_backward"] += bwd * nic
        if (
            c.overlaps_with == "panels"
        ):  # SUMMA traffic: exposed beside the block's GEMMs (block_cost_facts)
            continue
        s["tp_forward"] += fwd * time
        s["tp_forward_price"] += fwd * price
        s[_TP_BACKWARD_FIELD.get(c.overlaps_with, "tp_backward")] += bwd * time
        s["tp_backward_price"] += bwd * price
    return BlockComm(**s)


def expert_comm_terms(
    collectives, system: SystemSpec, model: ModelSpec, expert: ExpertShape
) -> tuple[float, float, float, float]:
    """(ep_forward, ep_backward, ep_forward_price, ep_backward_price) of block_comm: Σ over the expert-parallel
    collectives (groups ep, etp) of calls × cost.moe.moe_collective_time_and_price_s on the expert spans of
    the option ``expert`` (cost.moe.expert_group_span); the other collectives are left out."""
    forward = backward = forward_price = backward_price = 0.0
    ep, etp = expert.ep, expert.etp
    for c in collectives:
        if c.group not in EXPERT_GROUPS:
            continue
        time, price = moe_collective_time_and_price_s(
            c.kind, c.bytes, expert_group_span(c.group, ep, etp, system), system, model
        )
        forward += c.count_fwd * time
        backward += c.count_bwd * time
        forward_price += c.count_fwd * price
        backward_price += c.count_bwd * price
    return forward, backward, forward_price, backward_price


# where a backward TP collective's seconds go, by what hides it (Collective.overlaps_with)
_TP_BACKWARD_FIELD = {"dgrad": "tp_hidden_by_dgrad", "wgrad": "tp_hidden_by_wgrad"}


@lru_cache(maxsize=65536)
def _comm_with_overlap(comm: BlockComm, ep_overlap: float) -> BlockComm:
    """``comm._replace(ep_overlap=ep_overlap)``, once per (costing, switch)."""
    return comm if comm.ep_overlap == ep_overlap else comm._replace(ep_overlap=ep_overlap)


class BlockCostFacts(NamedTuple):
    """Time and parameters of one block kind: summed op times, collective times, parameters per GPU. (A NamedTuple,
    as BlockMemoryFacts: built by the thousand in a search, read by attribute.)"""

    compute: BlockCompute
    comm: BlockComm
    params: Num
    largest_weight_params: Num = (
        0.0  # its largest weight tensor per GPU (graph.ops.largest_weight_params)
    )
    weight_tensors: Num = 1.0  # its weight tensors (graph.ops.weight_tensor_count)
    small_numels: tuple = ()  # sizes of its weight tensors below DeepSpeed's persistence threshold (small_weight_numels)


class BlockMemoryFacts(NamedTuple):
    """Activation memory of one block kind: kept per in-flight micro-batch, held once, working buffer. A NamedTuple:
    ~19 K are built in a DeepSeek-V3 search, and a tuple is built without a Python call per field."""

    activation_bytes: Num
    held_bytes: Num
    buffer_bytes: Num


@dataclass(frozen=True)
class BlockFacts:
    """What one block kind costs for one row (floats, or arrays over rows)."""

    compute: BlockCompute
    comm: BlockComm
    params: Num
    activation_bytes: Num
    held_bytes: Num
    buffer_bytes: Num
    largest_weight_params: Num = 0.0
    weight_tensors: Num = 1.0
    small_numels: tuple = ()

    @classmethod
    def of(cls, cost: BlockCostFacts, memory: BlockMemoryFacts) -> "BlockFacts":
        return cls(
            cost.compute,
            cost.comm,
            cost.params,
            memory.activation_bytes,
            memory.held_bytes,
            memory.buffer_bytes,
            cost.largest_weight_params,
            cost.weight_tensors,
            cost.small_numels,
        )


@dataclass(frozen=True)
class RowFacts:
    """Everything a (layer shape, spans, degrees, recompute, TP overlap) row fixes (floats or arrays)."""

    blocks: dict[str, BlockFacts]  # by BLOCK_KINDS name
    head_params_with_embedding: (
        Num  # LM head parameters when it shares the stage with the embedding
    )
    recompute_code: Num
    overlap_tp_comm: Num  # as the plan asks
    tp_domains: Num
    p2p_transfer_s: Num
    layers: Num
    pp: Num
    microbatches: Num
    gradient_groups: dict[str, GradientGroup]
    model: ModelSpec | None = None  # for the layer mix of MoE models (layer_mix)
    mtp_layers: Num = 0


# the groups whose span the placement order sets: tp, cp, pp and the gradient groups but the expert one, which is
# carved out of tp·cp·dp (cost.moe.expert_dp_span)
PLACED_GROUPS: dict[str, tuple[str, ...]] = {
    **{g: (g,) for g in ("tp", "cp", "pp")},
    **{name: dims for name, dims in GRADIENT_GROUPS.items() if name != "expert"},
}


def plan_spans(degrees, system: SystemSpec) -> dict[str, GroupSpan]:
    """Spans of the tp, cp and pp groups and of every gradient group (specs.parallel.GRADIENT_GROUPS);
    ``degrees`` is anything with tp/cp/dp/pp attributes and ``placement_order``."""
    strides = placement_strides(degrees)
    spans = {
        name: group_span(degrees, system, dims, strides) for name, dims in PLACED_GROUPS.items()
    }
    if "expert" in GRADIENT_GROUPS:
        spans["expert"] = expert_dp_span(degrees, system)
    return spans


def placed_domains(degrees, system: SystemSpec) -> tuple[int, ...]:
    """The members per NVLink domain of each PLACED_GROUPS span of plan_spans: what the placement order changes."""
    strides = placement_strides(degrees)
    return tuple(
        group_span(degrees, system, dims, strides).per_domain for dims in PLACED_GROUPS.values()
    )


@lru_cache(maxsize=4096)
def gradient_group(system: SystemSpec, span: GroupSpan) -> GradientGroup:
    """A gradient group's size and collectives in linear form (cost.comm.linear_collective)."""
    return GradientGroup(
        span.size,
        *(
            linear_collective(k, span, system)
            for k in ("all_reduce", "reduce_scatter", "all_gather")
        ),
    )


_TP_GROUPS = {
    "tp",
    "tp_row",
    "tp_col",
}  # collective groups priced on the tp span (2D grid spans derive from it)
_NO_SPAN = GroupSpan(1, 1, 1)


# block kinds whose graph never reads the expert knobs (LayerShape.expert): costed once per expert-free shape
EXPERT_FREE_KINDS = frozenset({"embedding", "decoder", "dense_layer", "head"})


@lru_cache(maxsize=65536)
def block_cost_facts(
    model: ModelSpec, system: SystemSpec, shape: LayerShape, tp_span: GroupSpan, cp_span: GroupSpan
) -> dict[str, BlockCostFacts]:
    """Per block kind: summed op times, collective times, parameters per GPU. EXPERT_FREE_KINDS are costed
    without expert knobs, the others without a2a overlap (block_comm records it only as ``ep_overlap``,
    set back here): the same bits, shared by every expert option (tests/search/test_moe_search.py)."""
    out = {}
    moe = moe_shaped(model)
    neutral = with_expert(shape, NO_EXPERT) if moe else shape
    base = (
        with_expert(shape, without_a2a_overlap(shape.expert))
        if moe and shape.expert.a2a_overlap
        else shape
    )
    overlap = float(shape.expert.a2a_overlap) if moe else 0.0
    for name in model_block_kinds(model):
        facts = _kind_cost_facts(
            model, system, name, neutral if name in EXPERT_FREE_KINDS else base, tp_span, cp_span
        )
        if facts.comm.ep_overlap != overlap:
            facts = BlockCostFacts(
                facts.compute,
                _comm_with_overlap(facts.comm, overlap),
                facts.params,
                facts.largest_weight_params,
                facts.weight_tensors,
                facts.small_numels,
            )
        out[name] = facts
    return out


@lru_cache(maxsize=65536)
def _kind_cost_facts(
    model: ModelSpec,
    system: SystemSpec,
    name: str,
    shape: LayerShape,
    tp_span: GroupSpan,
    cp_span: GroupSpan,
) -> BlockCostFacts:
    """One block kind's BlockCostFacts (block_cost_facts)."""
    moe = moe_shaped(model)
    graph = BLOCK_KINDS[name].graph(model, shape)
    # a span the block's collectives do not use is not part of its cost (more cache hits: the
    # embedding and LM head have no CP collective, whatever the CP placement)
    used = collective_groups(graph)
    comm = block_comm(
        graph,
        system,
        tp_span if used & _TP_GROUPS else _NO_SPAN,
        cp_span if "cp" in used else _NO_SPAN,
        model if moe else None,
        shape if moe or shape.tp_layout == "2d" else None,
    )
    compute, tensors, largest, small = _graph_statics(model, system, name, shape)
    if shape.tp_layout == "2d":
        comm = with_summa_exposure(comm, compute, graph, system, tp_span, shape)
    return BlockCostFacts(compute, comm, graph.weight_params, largest, tensors, small)


def _graph_statics(model: ModelSpec, system: SystemSpec, name: str, shape: LayerShape):
    """(block_compute, weight_tensor_count, largest_weight_params, small_weight_numels) of a block: they read its ops
    only, which neither the dispatcher nor the a2a-overlap switch changes (graph.moe.ops_expert_knobs): shared."""
    if moe_shaped(model) and shape.expert != NO_EXPERT:
        shape = with_expert(shape, ops_expert_knobs(shape.expert, True))
    return _statics_of(model, system, name, shape)


@lru_cache(maxsize=65536)
def _statics_of(model: ModelSpec, system: SystemSpec, name: str, shape: LayerShape):
    """_graph_statics of the block kind's graph for exactly this shape (graph.ops.weight_tensor_stats: one walk)."""
    graph = BLOCK_KINDS[name].graph(
        model, shape
    )  # the builders are cached: the same graph as the caller's
    tensors, largest, small = weight_tensor_stats(
        graph,
        model.has_bias,
        model.has_qkv_bias,
        model.norm == "layernorm",
        model.learned_positions,
        model.hidden,
    )
    return block_compute(graph, system, shape.dtype), tensors, largest, small


@lru_cache(maxsize=16384)
def block_memory_facts(
    model: ModelSpec, shape: LayerShape, recompute: str
) -> dict[str, BlockMemoryFacts]:
    """Per block kind: bytes kept per in-flight micro-batch, bytes held once, buffer bytes."""
    return {
        name: kind_memory_facts(model, shape, name, recompute) for name in model_block_kinds(model)
    }


def kind_memory_facts(
    model: ModelSpec, shape: LayerShape, name: str, recompute: str
) -> BlockMemoryFacts:
    """One block kind's BlockMemoryFacts; only the kinds recomputation checkpoints read the recompute mode."""
    kind = BLOCK_KINDS[name]
    return BlockMemoryFacts(*kind.memory(model, shape, recompute if kind.recomputed else "none"))


def pipeline_transfer_s(
    model: ModelSpec, system: SystemSpec, shape: LayerShape, pp_span: GroupSpan
) -> float:
    """One activation send between neighbouring stages (p2p_bytes over the pp group's link)."""
    return collective_time_s("send_recv", p2p_bytes(model, shape), pp_span, system)


def row_facts(
    model: ModelSpec,
    system: SystemSpec,
    shape: LayerShape,
    spans: dict[str, GroupSpan],
    pp: int,
    microbatches: int,
    recompute: str,
    overlap_tp_comm: bool,
) -> RowFacts:
    """The RowFacts of one plan, as floats."""
    costs = block_cost_facts(model, system, shape, spans["tp"], spans["cp"])
    memory = block_memory_facts(model, shape, recompute)
    return RowFacts(
        blocks={k: BlockFacts.of(costs[k], memory[k]) for k in costs},
        head_params_with_embedding=head_params_with_embedding(model, shape.tp),
        recompute_code=RECOMPUTE_CODES[recompute],
        overlap_tp_comm=overlap_tp_comm,
        tp_domains=spans["tp"].domains,
        p2p_transfer_s=pipeline_transfer_s(model, system, shape, spans["pp"]),
        layers=model.layers,
        pp=pp,
        microbatches=microbatches,
        gradient_groups={
            name: gradient_group(system, spans[name]) for name in model_gradient_groups(model)
        },
        model=model,
        mtp_layers=model.mtp_layers,
    )


# ---- 3. blocks ----------------------------------------------------------------------------------
def row_blocks(facts: RowFacts) -> dict[str, BlockCost]:
    """Per-block costs of a row: time terms (schedule.step.block_terms), parameters and memory.
    Recomputation applies to the kinds that BLOCK_KINDS marks recomputed; comm-GEMM overlap needs
    the TP group inside one NVLink domain (Transformer Engine userbuffers run over NVLink)."""
    overlap = np.logical_and(facts.overlap_tp_comm, facts.tp_domains == 1)
    out = {}
    for name, f in facts.blocks.items():
        kind = BLOCK_KINDS[name]
        code = facts.recompute_code if kind.recomputed else 0
        terms = block_terms(f.compute, f.comm, code, overlap)
        out[name] = BlockCost(
            name,
            terms,
            f.params,
            f.activation_bytes,
            f.held_bytes,
            f.buffer_bytes,
            kind.gradient_group,
            nic_forward_s=f.comm.tp_nic_forward + f.comm.cp_nic_forward,
            nic_backward_s=block_nic_backward_s(f.comm, code),
            regathered=1.0 * (np.asarray(code) == 2),
            largest_weight_params=f.largest_weight_params,
            weight_tensors=f.weight_tensors,
            small_numels=f.small_numels,
        )
    return out


def block_nic_backward_s(comm: BlockComm, recompute_code: Num) -> Num:
    """NIC-busy seconds of a block's backward: its backward TP/CP collectives plus those recomputation
    re-runs (full: the forward TP collectives; selective and full: the CP ring), as block_terms counts them."""
    full = np.where(np.asarray(recompute_code) == 2, 1.0, 0.0)
    any_rc = np.where(np.asarray(recompute_code) > 0, 1.0, 0.0)
    return (
        comm.tp_nic_backward
        + comm.cp_nic_backward
        + full * comm.tp_nic_forward
        + any_rc * comm.cp_nic_forward
    )


# ---- 4. stages and the step ---------------------------------------------------------------------
def layer_mix(model: ModelSpec | None, start: Num, layers: Num) -> tuple[Num, Num]:
    """(dense, MoE) layers among decoder layers [start, start + layers) of an MoE model (specs.moe_model
    rule: layer i ≥ dense_layers is MoE when (i − dense_layers + 1) mod n = 0): the multiples of n
    among j = i − dense_layers + 1 in the range. (0, 0) for models without graph.moe layers. A split
    group of several stages takes its first stage's mix (exact for interval 1 with the dense layers
    on the first stage, as every catalog MoE model)."""
    if model is None or not moe_shaped(model):
        return 0, 0
    if not model.is_moe:
        return layers, 0
    n, d = model.moe_layer_interval, model.dense_layers
    lo = np.maximum(start, d) - d
    hi = np.maximum(start + layers, d) - d
    moe = hi // n - lo // n
    return layers - moe, moe


GRID_FIELDS = tuple(f.name for f in fields(GridKnobs))


def stage_block_counts(
    model: ModelSpec | None, group: SplitGroup, start: Num
) -> tuple[tuple[str, Num], ...]:
    """(block kind, blocks of it on one stage of the group) in stage order: the embedding; the decoder layers, or
    for a model graph/moe.py builds (``model`` given) layer_mix's dense and MoE layers, the routed experts of each
    MoE layer and MTP module and the MTP modules on the last stage; the LM head. ``start``: the group's first layer."""
    if model is not None:
        dense, moe = layer_mix(model, start, group.layers)
        mtp = group.head * model.mtp_layers
        layers = (("dense_layer", dense), ("moe_layer", moe), ("experts", moe + mtp), ("mtp", mtp))
    else:
        layers = (("decoder", group.layers),)
    return (("embedding", group.embedding), *layers, ("head", group.head))


def build_step_inputs(
    facts: RowFacts,
    blocks: dict[str, BlockCost],
    knobs: GridKnobs,
    groups: tuple[SplitGroup, ...],
    constants: dict,
) -> StepInputs:
    """Lay the blocks out on the split's stages (embedding on the first, decoder layers by the
    split, LM head on the last, which also holds the embedding's parameters when pp = 1 and the
    embeddings are tied) and attach the plan's knobs."""
    head = blocks["head"]
    single = facts.pp == 1
    head = replace(head, params=np.where(single, facts.head_params_with_embedding, head.params))
    p2p = np.where(single, 0.0, 2.0 * knobs.vpp * facts.p2p_transfer_s)
    stages = []
    start = 0  # first decoder layer of the group's first stage
    moe_model = facts.model is not None and moe_shaped(facts.model)
    for g in groups:
        placed = tuple(
            (head if name == "head" else blocks[name], n)
            for name, n in stage_block_counts(facts.model if moe_model else None, g, start)
        )
        stages.append(Stage(g.index, g.count, placed, p2p))
        start = start + g.count * g.layers
    stages = tuple(stages)
    return StepInputs(
        stages=stages,
        pp=facts.pp,
        microbatches=facts.microbatches,
        gradient_groups=facts.gradient_groups,
        knobs=knobs,
        **constants,
    )


def _graph_caches() -> tuple:
    """The memos of the op-graph builders (graph/: the layers, their core attention, memory and parameter counts) and
    of the cost functions they feed (cost/: GEMM waves, group spans, MoE FLOP counts)."""
    from paraplan.cost import compute, comm, flops, moe as moe_cost
    from paraplan.graph import encoder, moe, ops, summa, transformer

    return (
        moe.layer_core_ops,
        moe.moe_model_layer,
        moe.moe_layer_memory_bytes,
        moe.layer_weight_split,
        moe.mtp_block,
        moe._mtp_entry_and_head,
        transformer.decoder_layer_1d,
        transformer.embedding_block,
        transformer.lm_head_block,
        transformer.with_expert,
        summa.decoder_layer_2d,
        encoder.encoder_layer,
        encoder.cross_decoder_layer,
        encoder.patch_embedding_block,
        encoder.classifier_block,
        ops.largest_weight_params,
        ops._weight_tensor_numels,
        ops.weight_tensor_stats,
        ops.collective_groups,
        compute.gemm_wave_efficiency,
        comm._span_of,
        moe_cost.expert_span,
        moe_cost.expert_tp_span,
        flops.moe_model_flops_per_token,
        flops.moe_recompute_flops_per_token,
    )


# Caches of the builder and of the op graphs it costs, cleared by the benchmarks so every run starts cold.
COLD_CACHES = (
    block_compute,
    block_comm,
    block_cost_facts,
    _kind_cost_facts,
    _statics_of,
    _op_times,
    block_memory_facts,
    gradient_group,
    linear_collective,
    collective_costs_s,
    moe_collective_time_and_price_s,
    _comm_with_overlap,
    *_graph_caches(),
)
