"""The one builder of a step: op graphs → per-block costs → pipeline stages → ``StepInputs``.

Read top-down:
1. ``BLOCK_KINDS``: the registry of block kinds (embedding, decoder layer, LM head), each with
   its op-graph builder (graph/) and its memory facts (cost/memory.py). A new layer kind (an MoE
   layer, an encoder layer) is one more entry.
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

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

import numpy as np

from paraplan.cost import memory as mem
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
from paraplan.cost.moe import expert_dp_span, expert_span, expert_tp_span, moe_collective_time_and_price_s
from paraplan.graph.encoder import classifier_block, classifier_weight_params, encoder_layer, patch_embedding_block
from paraplan.graph.moe import NO_EXPERT, moe_model_layer, moe_shaped, mtp_block, ops_expert_knobs, without_a2a_overlap
from paraplan.graph.ops import LayerGraph, Op, collective_groups, weight_tensor_stats
from paraplan.graph.transformer import LayerShape, decoder_layer, embedding_block, lm_head_block, lm_head_weight_params, with_expert
from paraplan.schedule.constants import system_terms  # noqa: F401 (re-exported: the estimator and the search read it here)
from paraplan.schedule.step import RECOMPUTE_CODES, BlockCost, GradientGroup, GridKnobs, Stage, StepInputs, block_terms
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import GRADIENT_GROUPS
from paraplan.specs.split import SplitGroup
from paraplan.specs.system import SystemSpec

Num = Any


# ---- 1. block kinds ---------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockKind:
    """One kind of block: how to build its op graph and what it keeps in memory."""

    name: str
    graph: Callable[[ModelSpec, LayerShape], LayerGraph]
    memory: Callable[[ModelSpec, LayerShape, str], tuple[float, float, float]]  # (kept, held once, buffer) bytes
    recomputed: bool  # activation recomputation checkpoints it (decoder layers only: Korthikanti et al. 2022 §5)
    gradient_group: str = "dense"  # the group that reduces its parameters (specs.parallel.GRADIENT_GROUPS)


def _decoder_memory(model: ModelSpec, shape: LayerShape, recompute: str) -> tuple[float, float, float]:
    if moe_shaped(model):
        return 0.0, 0.0, 0.0
    return mem.layer_activation_bytes(model, shape, recompute), 0.0, layer_buffer_bytes(model, shape, recompute)


def _embedding_memory(model: ModelSpec, shape: LayerShape, recompute: str) -> tuple[float, float, float]:
    return mem.embedding_activation_bytes(model, shape), 0.0, 0.0


def _head_memory(model: ModelSpec, shape: LayerShape, recompute: str) -> tuple[float, float, float]:
    if model.is_vit:
        return 0.0, mem.classifier_activation_bytes(model, shape), 0.0
    return 0.0, mem.lm_head_activation_bytes(model, shape), 0.0


EMPTY_BLOCK = LayerGraph("absent", (), (), 0.0)


def _decoder_graph(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """Dense transformer layer — a decoder layer, or for encoder models (BERT, ViT) the same layer with
    bidirectional attention (graph.encoder.encoder_layer); absent (no ops, no parameters) for models
    graph.moe builds."""
    if moe_shaped(model):
        return EMPTY_BLOCK
    return encoder_layer(model, shape) if model.architecture == "encoder" else decoder_layer(model, shape)


def _input_graph(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """Token embedding, or ViT's patch embedding (graph.encoder.patch_embedding_block)."""
    return patch_embedding_block(model, shape) if model.is_vit else embedding_block(model, shape)


def _output_graph(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """LM head and loss, or ViT's classification head on the class token (graph.encoder.classifier_block)."""
    return classifier_block(model, shape) if model.is_vit else lm_head_block(model, shape, False)


def head_params_with_embedding(model: ModelSpec, tp: int) -> float:
    """Output-layer parameters on one GPU when it shares the stage with the input layer (tied tables
    are held once: graph.transformer.lm_head_weight_params; ViT's classifier is not tied)."""
    return classifier_weight_params(model) if model.is_vit else lm_head_weight_params(model, tp, True)


def _moe_kind_graph(moe: bool):
    def graph(model: ModelSpec, shape: LayerShape) -> LayerGraph:
        return moe_model_layer(model, shape, moe) if moe_shaped(model) and (model.is_moe or not moe) else EMPTY_BLOCK

    return graph


def _experts_graph(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    """The routed experts of one MoE layer as a block of their own: no ops (their time is in the
    moe_layer block), only the parameters the expert gradient group reduces."""
    if not model.is_moe:
        return EMPTY_BLOCK
    return LayerGraph("experts", (), (), moe_model_layer(model, shape, True).expert_weight_params)


def _mtp_graph(model: ModelSpec, shape: LayerShape) -> LayerGraph:
    return mtp_block(model, shape) if model.mtp_layers else EMPTY_BLOCK


def _moe_memory(graph_of):
    def memory(model: ModelSpec, shape: LayerShape, recompute: str) -> tuple[float, float, float]:
        graph = graph_of(model, shape)
        if graph is EMPTY_BLOCK:
            return 0.0, 0.0, 0.0
        kept = shape.act_bytes * shape.sp_tokens * model.hidden if recompute == "full" else graph.activation_bytes
        return kept, 0.0, graph.dispatch_buffer_bytes + (graph.activation_bytes if recompute == "full" else 0.0)

    return memory


def _no_memory(model: ModelSpec, shape: LayerShape, recompute: str) -> tuple[float, float, float]:
    return 0.0, 0.0, 0.0


BLOCK_KINDS: dict[str, BlockKind] = {  # in stage order
    "embedding": BlockKind("embedding", _input_graph, _embedding_memory, False),
    "decoder": BlockKind("decoder", _decoder_graph, _decoder_memory, True),
    # layers of MoE / MLA / windowed models (graph/moe.py): dense first layers, MoE layers and their
    # routed experts (own gradient group), DeepSeek-V3 MTP modules on the last stage
    "dense_layer": BlockKind("dense_layer", _moe_kind_graph(False), _moe_memory(_moe_kind_graph(False)), True),
    "moe_layer": BlockKind("moe_layer", _moe_kind_graph(True), _moe_memory(_moe_kind_graph(True)), True),
    "experts": BlockKind("experts", _experts_graph, _no_memory, False, "expert"),
    "mtp": BlockKind("mtp", _mtp_graph, _moe_memory(_mtp_graph), True),
    "head": BlockKind("head", _output_graph, _head_memory, False),
}


@lru_cache(maxsize=64)
def model_block_kinds(model: ModelSpec) -> tuple[str, ...]:
    """The BLOCK_KINDS a model's stages hold, in stage order: embedding, decoder layers, LM head for a
    dense decoder; the dense-layer / MoE-layer / experts / MTP kinds instead of "decoder" for models
    graph/moe.py builds (the other kinds would be absent blocks: no ops, no parameters)."""
    layer_kinds = ("dense_layer", "moe_layer", "experts", "mtp") if moe_shaped(model) else ("decoder",)
    return ("embedding", *layer_kinds, "head")


@lru_cache(maxsize=64)
def model_gradient_groups(model: ModelSpec) -> tuple[str, ...]:
    """The gradient groups (specs.parallel.GRADIENT_GROUPS) that reduce some block of the model: a
    group with no parameters has no collectives and must not claim a link (schedule.step.tail_terms)."""
    used = {BLOCK_KINDS[k].gradient_group for k in model_block_kinds(model)}
    return tuple(g for g in GRADIENT_GROUPS if g in used)


def default_recompute_modules(recompute: str, modules: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Modules selective recomputation re-runs: the plan's list, else Megatron-LM's default
    ``core_attn`` (--recompute-modules); none without selective recompute."""
    if recompute != "selective":
        return ()
    return tuple(modules or ()) or ("core_attn",)


def layer_buffer_bytes(model: ModelSpec, shape: LayerShape, recompute: str) -> float:
    """Working buffers beside the kept activations: one layer re-materialised in backward under full
    recompute, and the sequence-parallel all-gather output (b·s·h half-precision elements)."""
    buffers = mem.layer_activation_bytes(model, shape, "none") if recompute == "full" else 0.0
    if shape.sequence_parallel and shape.tp_layout != "2d":  # SUMMA gathers panels, not whole inputs
        buffers += shape.act_bytes * shape.local_tokens * model.hidden
    return buffers + mem.layout_buffer_bytes(model, shape)


def p2p_bytes(model: ModelSpec, shape: LayerShape) -> float:
    """Activation sent between stages per micro-batch: b·(s/c)·h half-precision elements, split over
    the t tensor-parallel ranks (scatter/gather optimisation, Narayanan et al. 2021 §4.1)."""
    return shape.act_bytes * shape.local_tokens * model.hidden / shape.tp


# ---- 2. facts of a row --------------------------------------------------------------------------
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
    return BlockCompute(forward, backward, attention_forward, attention_backward, gemm_forward, gemm_backward)


@lru_cache(maxsize=64)
def _op_times(system: SystemSpec, dtype: str) -> dict[Op, tuple[float, float]]:
    """op -> cost.compute.op_times_s on this system and dtype, filled by block_compute once per distinct op: the
    attention half of an MoE layer, its router and shared experts repeat unchanged across the expert options."""
    return {}


@dataclass(frozen=True)
class BlockComm:
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
    ep_overlap: float = 0.0  # 1 when the plan overlaps dispatch/combine with compute (moe_a2a_overlap)
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
    block: LayerGraph, system: SystemSpec, tp_span: GroupSpan, cp_span: GroupSpan,
    model: ModelSpec | None = None, shape: LayerShape | None = None,
) -> BlockComm:
    """Σ over the block's collectives of calls × collective time (and hidden price) on the group's span;
    expert-parallel collectives (groups ep, etp) on the expert spans of ``shape.expert``
    (cost.moe.moe_collective_time_and_price_s)."""
    spans = {"tp": tp_span, "cp": cp_span}
    s = dict.fromkeys(BlockComm.__dataclass_fields__, 0.0)
    moe = shape is not None and model is not None
    if moe:
        s["ep_overlap"] = float(shape.expert.a2a_overlap)
    if not block.collectives:
        return BlockComm(**s)
    if shape is not None and shape.tp_layout == "2d":
        spans["tp_row"], spans["tp_col"] = grid_spans(tp_span, shape.tp_rows)
    if moe:
        spans["ep"] = expert_span(shape.expert.ep, shape.expert.etp, system)
        spans["etp"] = expert_tp_span(shape.expert.etp, system)
    for c in block.collectives:
        fwd, bwd = c.count_fwd, c.count_bwd
        if c.group in ("ep", "etp"):
            time, price = moe_collective_time_and_price_s(c.kind, c.bytes, spans[c.group], system, model)
            s["ep_forward"] += fwd * time
            s["ep_backward"] += bwd * time
            s["ep_forward_price"] += fwd * price
            s["ep_backward_price"] += bwd * price
            continue
        time, price, nic = collective_costs_s(c.kind, c.bytes, spans[c.group], system)
        if c.group == "cp":
            s["cp_nic_forward"] += fwd * nic
            s["cp_nic_backward"] += bwd * nic
            if c.kind != "ring_exchange":  # 2d-seq's K/V all-gathers, Ulysses' all-to-alls: the kernel waits for them
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
        if c.overlaps_with == "panels":  # SUMMA traffic: exposed beside the block's GEMMs (block_cost_facts)
            continue
        s["tp_forward"] += fwd * time
        s["tp_forward_price"] += fwd * price
        s[_TP_BACKWARD_FIELD.get(c.overlaps_with, "tp_backward")] += bwd * time
        s["tp_backward_price"] += bwd * price
    return BlockComm(**s)


# where a backward TP collective's seconds go, by what hides it (Collective.overlaps_with)
_TP_BACKWARD_FIELD = {"dgrad": "tp_hidden_by_dgrad", "wgrad": "tp_hidden_by_wgrad"}


@lru_cache(maxsize=65536)
def _comm_with_overlap(comm: BlockComm, ep_overlap: float) -> BlockComm:
    """``replace(comm, ep_overlap=ep_overlap)``, once per (costing, switch)."""
    return comm if comm.ep_overlap == ep_overlap else replace(comm, ep_overlap=ep_overlap)


@dataclass(frozen=True)
class BlockCostFacts:
    """Time and parameters of one block kind: summed op times, collective times, parameters per GPU."""

    compute: BlockCompute
    comm: BlockComm
    params: Num
    largest_weight_params: Num = 0.0  # its largest weight tensor per GPU (graph.ops.largest_weight_params)
    weight_tensors: Num = 1.0  # its weight tensors (graph.ops.weight_tensor_count)
    small_numels: tuple = ()  # sizes of its weight tensors below DeepSpeed's persistence threshold (small_weight_numels)


@dataclass(frozen=True)
class BlockMemoryFacts:
    """Activation memory of one block kind: kept per in-flight micro-batch, held once, working buffer."""

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
        return cls(cost.compute, cost.comm, cost.params, memory.activation_bytes, memory.held_bytes, memory.buffer_bytes,
                   cost.largest_weight_params, cost.weight_tensors, cost.small_numels)


@dataclass(frozen=True)
class RowFacts:
    """Everything a (layer shape, spans, degrees, recompute, TP overlap) row fixes (floats or arrays)."""

    blocks: dict[str, BlockFacts]  # by BLOCK_KINDS name
    head_params_with_embedding: Num  # LM head parameters when it shares the stage with the embedding
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


def plan_spans(degrees, system: SystemSpec) -> dict[str, GroupSpan]:
    """Spans of the tp, cp and pp groups and of every gradient group (specs.parallel.GRADIENT_GROUPS);
    ``degrees`` is anything with tp/cp/dp/pp attributes and ``placement_order``."""
    strides = placement_strides(degrees)
    spans = {g: group_span(degrees, system, g, strides) for g in ("tp", "cp", "pp")}
    for name, dims in GRADIENT_GROUPS.items():
        if name == "expert":  # carved out of tp·cp·dp (cost.moe.expert_dp_span)
            spans[name] = expert_dp_span(degrees, system)
        else:
            spans[name] = group_span(degrees, system, dims, strides)
    return spans


@lru_cache(maxsize=4096)
def gradient_group(system: SystemSpec, span: GroupSpan) -> GradientGroup:
    """A gradient group's size and collectives in linear form (cost.comm.linear_collective)."""
    return GradientGroup(span.size, *(linear_collective(k, span, system) for k in ("all_reduce", "reduce_scatter", "all_gather")))


_TP_GROUPS = {"tp", "tp_row", "tp_col"}  # collective groups priced on the tp span (2D grid spans derive from it)
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
    base = with_expert(shape, without_a2a_overlap(shape.expert)) if moe and shape.expert.a2a_overlap else shape
    overlap = float(shape.expert.a2a_overlap) if moe else 0.0
    for name in model_block_kinds(model):
        facts = _kind_cost_facts(model, system, name, neutral if name in EXPERT_FREE_KINDS else base, tp_span, cp_span)
        if facts.comm.ep_overlap != overlap:
            facts = BlockCostFacts(facts.compute, _comm_with_overlap(facts.comm, overlap), facts.params,
                                   facts.largest_weight_params, facts.weight_tensors, facts.small_numels)
        out[name] = facts
    return out


@lru_cache(maxsize=65536)
def _kind_cost_facts(
    model: ModelSpec, system: SystemSpec, name: str, shape: LayerShape, tp_span: GroupSpan, cp_span: GroupSpan
) -> BlockCostFacts:
    """One block kind's BlockCostFacts (block_cost_facts)."""
    moe = moe_shaped(model)
    graph = BLOCK_KINDS[name].graph(model, shape)
    # a span the block's collectives do not use is not part of its cost (more cache hits: the
    # embedding and LM head have no CP collective, whatever the CP placement)
    used = collective_groups(graph)
    comm = block_comm(graph, system, tp_span if used & _TP_GROUPS else _NO_SPAN, cp_span if "cp" in used else _NO_SPAN,
                      model if moe else None, shape if moe or shape.tp_layout == "2d" else None)
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
    graph = BLOCK_KINDS[name].graph(model, shape)  # the builders are cached: the same graph as the caller's
    tensors, largest, small = weight_tensor_stats(graph, model.has_bias, model.has_qkv_bias, model.norm == "layernorm",
                                                  model.learned_positions, model.hidden)
    return block_compute(graph, system, shape.dtype), tensors, largest, small


@lru_cache(maxsize=16384)
def block_memory_facts(model: ModelSpec, shape: LayerShape, recompute: str) -> dict[str, BlockMemoryFacts]:
    """Per block kind: bytes kept per in-flight micro-batch, bytes held once, buffer bytes."""
    kinds = {name: BLOCK_KINDS[name] for name in model_block_kinds(model)}
    return {name: BlockMemoryFacts(*kind.memory(model, shape, recompute if kind.recomputed else "none"))
            for name, kind in kinds.items()}


def pipeline_transfer_s(model: ModelSpec, system: SystemSpec, shape: LayerShape, pp_span: GroupSpan) -> float:
    """One activation send between neighbouring stages (p2p_bytes over the pp group's link)."""
    return collective_time_s("send_recv", p2p_bytes(model, shape), pp_span, system)


def row_facts(
    model: ModelSpec, system: SystemSpec, shape: LayerShape, spans: dict[str, GroupSpan],
    pp: int, microbatches: int, recompute: str, overlap_tp_comm: bool,
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
        gradient_groups={name: gradient_group(system, spans[name]) for name in model_gradient_groups(model)},
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
        out[name] = BlockCost(name, terms, f.params, f.activation_bytes, f.held_bytes, f.buffer_bytes,
                              kind.gradient_group,
                              nic_forward_s=f.comm.tp_nic_forward + f.comm.cp_nic_forward,
                              nic_backward_s=block_nic_backward_s(f.comm, code), regathered=1.0 * (np.asarray(code) == 2),
                              largest_weight_params=f.largest_weight_params, weight_tensors=f.weight_tensors,
                              small_numels=f.small_numels)
    return out


def block_nic_backward_s(comm: BlockComm, recompute_code: Num) -> Num:
    """NIC-busy seconds of a block's backward: its backward TP/CP collectives plus those recomputation
    re-runs (full: the forward TP collectives; selective and full: the CP ring), as block_terms counts them."""
    full = np.where(np.asarray(recompute_code) == 2, 1.0, 0.0)
    any_rc = np.where(np.asarray(recompute_code) > 0, 1.0, 0.0)
    return comm.tp_nic_backward + comm.cp_nic_backward + full * comm.tp_nic_forward + any_rc * comm.cp_nic_forward


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


def build_step_inputs(
    facts: RowFacts, blocks: dict[str, BlockCost], knobs: GridKnobs, groups: tuple[SplitGroup, ...], constants: dict
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
        if moe_model:
            dense, moe = layer_mix(facts.model, start, g.layers)
            layers = ((blocks["dense_layer"], dense), (blocks["moe_layer"], moe),
                      (blocks["experts"], moe + g.head * facts.mtp_layers), (blocks["mtp"], g.head * facts.mtp_layers))
        else:
            layers = ((blocks["decoder"], g.layers),)
        stages.append(Stage(g.index, g.count, ((blocks["embedding"], g.embedding), *layers, (head, g.head)), p2p))
        start = start + g.count * g.layers
    stages = tuple(stages)
    return StepInputs(stages=stages, pp=facts.pp, microbatches=facts.microbatches,
                      gradient_groups=facts.gradient_groups, knobs=knobs, **constants)


# Caches of the builder, cleared by the benchmarks so every run starts cold.
COLD_CACHES = (block_compute, block_comm, block_cost_facts, _kind_cost_facts, _statics_of, _op_times, block_memory_facts,
               gradient_group, linear_collective, collective_costs_s, moe_collective_time_and_price_s, _comm_with_overlap)
