"""Costs per distinct block of a step: op graphs → summed op and collective times → per-block costs.

Read top-down:
1. ``BLOCK_KINDS`` (step/blocks.py): the one registry of block kinds, each with its op-graph builder
   (graph/) and its memory facts (cost/memory.py). A new layer kind is one more entry.
2. ``row_facts``: everything the layer shape, the group spans and the degrees fix for one plan —
   summed op times and collective times per block kind (step/block_sums.py), parameters,
   activations, the gradient group's collectives, the pipeline transfer — as floats. The search
   gathers the same fields, from the same cached functions, as numpy arrays (search/table.py).
3. ``row_blocks`` / ``block_cost``: per-block time terms (step.compose.block_terms) with the rules that
   decide them — recomputation re-runs the kinds BLOCK_KINDS marks recomputed; TP comm-GEMM overlap
   only when the TP group sits in one NVLink domain. The per-stage path (step/stage_blocks.py) costs its
   blocks through the same ``kind_cost_facts``, ``kind_memory_facts`` (at each block's widths) and ``block_cost``.
4. step/layout.py lays the blocks out on stages (a uniform split or a per-stage plan).
Steps 3 and 4 are written once for floats and arrays: the estimator and the search share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from paraplan.cost.async_tp import with_async_tp_exposure
from paraplan.cost.comm import GroupSpan, collective_costs_s, linear_collective
from paraplan.cost.elementwise import logical_and, where
from paraplan.cost.moe import moe_collective_time_and_price_s
from paraplan.cost.summa import with_summa_exposure
from paraplan.graph.moe import moe_shaped
from paraplan.graph.ops import collective_groups
from paraplan.graph.transformer import LayerShape
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec
from paraplan.step.block_sums import (  # noqa: F401 (re-exported: the search and the tests read them here)
    BlockComm,
    BlockCompute,
    _comm_with_overlap,
    _op_times,
    block_comm,
    block_compute,
    dtensor_tp,
    expert_comm_terms,
)
from paraplan.step.blocks import (  # noqa: F401 (re-exported: the estimator, the search and the tests read them here)
    BLOCK_KINDS,
    EXPERT_FREE_KINDS,
    Width,
    block_width,
    head_params_with_embedding,
    head_tensors_shared_with_embedding,
    layer_buffer_bytes,
    model_block_kinds,
    model_gradient_groups,
    p2p_bytes,
)
from paraplan.step.block_statics import (  # noqa: F401 (re-exported: the search reads them here)
    _graph_statics,
    _statics_of,
    _weight_stats,
    kind_shape,
    kind_small_width,
    kind_statics,
)
from paraplan.step.p2p import PipelineLinks, pipeline_links
from paraplan.specs.recompute import RECOMPUTE_CODES
from paraplan.step.compose import BlockCost, BlockTerms, GradientGroup, block_terms
from paraplan.step.block_terms import recompute_s
from paraplan.step.constants import system_terms  # noqa: F401 (re-exported: the estimator and the search read it here)
from paraplan.step.layout import (  # noqa: F401 (re-exported: the estimator, the search and the tests read them here)
    GRID_FIELDS,
    GridKnobs,
    build_step_inputs,
    layer_mix,
    stage_block_counts,
)

Num = Any


# ---- 1. block kinds: paraplan.step.blocks (BLOCK_KINDS and the per-kind rules) -------------------
# ---- 2. facts of a row --------------------------------------------------------------------------
class BlockCostFacts(NamedTuple):
    """Time and parameters of one block kind: summed op times, collective times, parameters per GPU. (A NamedTuple,
    as BlockMemoryFacts: built by the thousand in a search, read by attribute.)"""

    compute: BlockCompute
    comm: BlockComm
    params: Num
    largest_weight_params: Num = (
        0.0  # its largest weight tensor per GPU (graph.ops.largest_weight_params)
    )
    weight_tensors: Num = 1.0  # its weight tensors (graph.ops.weight_tensor_stats)
    small_numels: tuple = ()  # sizes of its weight tensors below DeepSpeed's persistence threshold (weight_tensor_stats)


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
    pipeline: PipelineLinks  # point-to-point and tied-embedding links of the pp group (step.p2p)
    layers: Num
    pp: Num
    microbatches: Num
    gradient_groups: dict[str, GradientGroup]
    model: ModelSpec | None = None  # for the layer mix of MoE models (layer_mix)
    mtp_layers: Num = 0
    head_shared_tensors: Num = 0.0  # its weight tensors the embedding holds then (the tied table)


@lru_cache(maxsize=4096)
def gradient_group(system: SystemSpec, span: GroupSpan) -> GradientGroup:
    """A gradient group's size and collectives in linear form (cost.comm.linear_collective: the two-tier
    hierarchical ring on the group's span), for both paths: a uniform plan's group on its placement's span,
    a per-stage plan's on its members' slowest links (step.stage_links.stage_gradient_group)."""
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


@lru_cache(maxsize=65536)
def block_cost_facts(
    model: ModelSpec, system: SystemSpec, shape: LayerShape, tp_span: GroupSpan, cp_span: GroupSpan
) -> dict[str, BlockCostFacts]:
    """Per block kind: summed op times, collective times, parameters per GPU (``kind_cost_facts``)."""
    return {
        name: kind_cost_facts(model, system, shape, tp_span, cp_span, name)
        for name in model_block_kinds(model)
    }


def kind_cost_facts(
    model: ModelSpec,
    system: SystemSpec,
    shape: LayerShape,
    tp_span: GroupSpan,
    cp_span: GroupSpan,
    name: str,
    *,
    width: Width | None = None,
    async_tp: bool = True,
) -> BlockCostFacts:
    """One block kind's entry of ``block_cost_facts``, and every block of a per-stage plan's stage
    (step.stage_blocks: ``width`` its BlockRef's, a layer_widths group's; None, the model's own). Expert-free kinds
    are costed without expert knobs, the others without a2a overlap (block_comm records it only as ``ep_overlap``,
    set back here): the same bits, shared by every expert option (tests/search/test_moe_search.py); ``async_tp``:
    block_comm's (per-stage engines)."""
    shape_k = kind_shape(model, shape, name)
    facts = _kind_cost_facts(model, system, name, shape_k, (tp_span, cp_span), async_tp, width)
    overlap = float(shape.expert.a2a_overlap) if moe_shaped(model) else 0.0
    if facts.comm.ep_overlap != overlap:
        facts = facts._replace(comm=_comm_with_overlap(facts.comm, overlap))
    return facts


def _kind_cost_facts(
    model: ModelSpec,
    system: SystemSpec,
    name: str,
    shape: LayerShape,
    spans: tuple[GroupSpan, GroupSpan],
    async_tp: bool = True,
    width: Width | None = None,
) -> BlockCostFacts:
    """One block kind's BlockCostFacts (block_cost_facts) at ``width`` (None: the model's own), on the
    (tp, cp) ``spans``. A span the
    block's collectives do not use is not part of its cost: costed once whatever that span (the embedding and
    LM head have no CP collective, whatever the CP placement; ``_used_span_cost_facts``)."""
    tp_span, cp_span = spans
    width = block_width(model, width)
    used = collective_groups(BLOCK_KINDS[name].build(model, width, shape))
    if not used & _TP_GROUPS and shape.tp_layout != "2d":  # SUMMA's exposure reads the tp span
        tp_span = _NO_SPAN
    if "cp" not in used:
        cp_span = _NO_SPAN
    return _used_span_cost_facts(model, system, name, shape, (tp_span, cp_span), async_tp, width)


@lru_cache(maxsize=65536)
def _used_span_cost_facts(
    model: ModelSpec,
    system: SystemSpec,
    name: str,
    shape: LayerShape,
    spans: tuple[GroupSpan, GroupSpan],
    async_tp: bool,
    width: Width,
) -> BlockCostFacts:
    """``_kind_cost_facts`` on the (tp, cp) spans the block's collectives use (the others _NO_SPAN), at ``width``."""
    tp_span, cp_span = spans
    moe = moe_shaped(model)
    graph = BLOCK_KINDS[name].build(model, width, shape)
    used = collective_groups(graph)
    comm = block_comm(
        graph,
        system,
        tp_span if used & _TP_GROUPS else _NO_SPAN,
        cp_span if "cp" in used else _NO_SPAN,
        model if moe else None,
        shape if moe or shape.tp_layout == "2d" else None,
        async_tp,
    )
    compute, tensors, largest, small = _graph_statics(model, system, name, shape, width)
    if shape.tp_layout == "2d":
        comm = with_summa_exposure(comm, compute, graph, system, tp_span, shape)
    elif dtensor_tp(system) and used & _TP_GROUPS:  # PyTorch AsyncTP's collective matmuls
        comm = with_async_tp_exposure(comm, graph, system, shape.dtype, tp_span)
    return BlockCostFacts(compute, comm, graph.weight_params, largest, tensors, small)


@lru_cache(maxsize=16384)
def block_memory_facts(
    model: ModelSpec, shape: LayerShape, recompute: str
) -> dict[str, BlockMemoryFacts]:
    """Per block kind: bytes kept per in-flight micro-batch, bytes held once, buffer bytes."""
    return {
        name: kind_memory_facts(model, shape, name, recompute) for name in model_block_kinds(model)
    }


def kind_memory_facts(
    model: ModelSpec, shape: LayerShape, name: str, recompute: str, width: Width | None = None
) -> BlockMemoryFacts:
    """One block kind's BlockMemoryFacts at ``width`` (as ``kind_cost_facts``: None, the model's own); only the
    kinds recomputation checkpoints read the recompute mode."""
    kind = BLOCK_KINDS[name]
    rc = recompute if kind.recomputed else "none"
    return BlockMemoryFacts(*kind.memory(model, shape, rc, width))


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
        head_shared_tensors=head_tensors_shared_with_embedding(model),
        recompute_code=RECOMPUTE_CODES[recompute],
        overlap_tp_comm=overlap_tp_comm,
        tp_domains=spans["tp"].domains,
        pipeline=pipeline_links(model, system, shape, spans["pp"], spans["tp"]),
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
    """Per-block costs of a row (``block_cost`` of every block kind): ``kind_blocks`` of its facts."""
    return kind_blocks(facts.blocks, facts.recompute_code, facts.overlap_tp_comm, facts.tp_domains)


def kind_blocks(
    blocks: dict[str, BlockFacts], recompute_code: Num, overlap_tp_comm: Num, tp_domains: Num
) -> dict[str, BlockCost]:
    """``block_cost`` of every block kind's facts (TP comm-GEMM overlap: ``tp_overlap``)."""
    overlap = tp_overlap(overlap_tp_comm, tp_domains)
    return {name: block_cost(name, f, recompute_code, overlap) for name, f in blocks.items()}


def tp_overlap(overlap_tp_comm: Num, tp_domains: Num) -> Num:
    """Whether TP comm-GEMM overlap applies: asked for, and the TP group inside one NVLink domain
    (Transformer Engine userbuffers run over NVLink)."""
    return logical_and(overlap_tp_comm, tp_domains == 1)


def kind_recompute_code(name: str, recompute_code: Num) -> Num:
    """The recompute code a block kind runs with: the plan's (or stage's) for the kinds BLOCK_KINDS marks
    recomputed, 0 (none) for the others."""
    return recompute_code if BLOCK_KINDS[name].recomputed else 0


def kind_terms(name: str, compute, comm, recompute_code: Num, overlap_tp_comm: Num) -> BlockTerms:
    """A block kind's per-micro-batch time terms (step.block_terms.block_terms at its recompute code)."""
    return block_terms(compute, comm, kind_recompute_code(name, recompute_code), overlap_tp_comm)


def kind_compute_floor(name: str, compute, recompute_code: Num) -> Num:
    """forward + backward + recomputation of a block kind: the first three of its ``kind_terms``, summed as the
    search sums them (BLOCK_TERM_NAMES order, from 0.0). Its other terms, exposed communication, are >= 0, so
    their sum is at least this, bit for bit (IEEE addition of a non-negative number never decreases a sum): a
    floor of the block's work from its op times alone, no collective costed (search.table.RowTable)."""
    code = kind_recompute_code(name, recompute_code)
    return 0.0 + compute.forward + compute.backward + recompute_s(compute, code)


def block_cost(name: str, f: BlockFacts, recompute_code: Num, overlap_tp_comm: Num) -> BlockCost:
    """One block's cost: time terms (``kind_terms``), parameters and memory. Recomputation applies to the
    kinds that BLOCK_KINDS marks recomputed (``recompute_code`` of the plan or stage)."""
    kind = BLOCK_KINDS[name]
    code = kind_recompute_code(name, recompute_code)
    return BlockCost(
        name,
        kind_terms(name, f.compute, f.comm, recompute_code, overlap_tp_comm),
        f.params,
        f.activation_bytes,
        f.held_bytes,
        f.buffer_bytes,
        kind.gradient_group,
        nic_forward_s=f.comm.tp_nic_forward + f.comm.cp_nic_forward,
        nic_backward_s=block_nic_backward_s(f.comm, code),
        regathered=1.0 * (code == 2),
        largest_weight_params=f.largest_weight_params,
        weight_tensors=f.weight_tensors,
        small_numels=f.small_numels,
    )


def block_nic_backward_s(comm: BlockComm, recompute_code: Num) -> Num:
    """NIC-busy seconds of a block's backward: its backward TP/CP collectives plus those recomputation
    re-runs (full: the forward TP collectives; selective and full: the CP ring), as block_terms counts them."""
    full = where(recompute_code == 2, 1.0, 0.0)
    any_rc = where(recompute_code > 0, 1.0, 0.0)
    return (
        comm.tp_nic_backward
        + comm.cp_nic_backward
        + full * comm.tp_nic_forward
        + any_rc * comm.cp_nic_forward
    )


def _graph_caches() -> tuple:
    """The memos of the op-graph builders (graph/: the layers, their core attention, memory and parameter counts) and
    of the cost functions they feed (cost/: GEMM waves, group spans, MoE FLOP counts)."""
    from paraplan.cost import comm, compute, flops
    from paraplan.cost import moe as moe_cost
    from paraplan.graph import encoder, moe, ops, summa, transformer

    return (
        moe.layer_core_ops,
        moe.moe_model_layer,
        moe.moe_layer_memory_bytes,
        moe.layer_weight_split,
        moe.mtp_block,
        moe._mtp_entry_and_head,
        transformer.decoder_layer_1d,
        transformer._outer_ops,
        transformer.embedding_block,
        transformer.lm_head_block,
        transformer.with_expert,
        summa.decoder_layer_2d,
        encoder.encoder_layer,
        encoder.cross_decoder_layer,
        encoder.patch_embedding_block,
        encoder.classifier_block,
        ops.largest_weight_params,
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
    _used_span_cost_facts,
    _statics_of,
    _weight_stats,
    _op_times,
    block_memory_facts,
    gradient_group,
    linear_collective,
    collective_costs_s,
    moe_collective_time_and_price_s,
    _comm_with_overlap,
    *_graph_caches(),
)
